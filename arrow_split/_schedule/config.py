"""The schedule's parameters and the checks of its inputs, all done before any planning.

:class:`ScheduleConfig` names its fields as miles' rollout-side schedule reads them from its
arguments and its training backend's parallel config. The input checks turn every condition the
schedule would otherwise assert on, or crash on, into a typed error that names the values and
the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from arrow_split.errors import PlanError, PlanTypeError

__all__ = [
    "Float64Array",
    "Int64Array",
    "ScheduleConfig",
    "check_positive_int",
    "check_rollout_ids",
    "check_weights",
]

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]

_INT64_MAX = int(np.iinfo(np.int64).max)
_BOOL_FIELDS = (
    "allow_partial_train_step",
    "balance_by_flops",
    "balance_data",
    "use_dynamic_batch_size",
)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_positive(name: str, value: object, *, optional: bool = False) -> None:
    """Raise unless `value` is an int >= 1 (or None when `optional`)."""
    if value is None and optional:
        return
    if not _is_int(value):
        kind = type(value).__name__
        msg = f"`{name}` must be a positive int, got {value!r} of type {kind}"
        raise PlanTypeError(msg)
    if int(value) < 1:  # type: ignore[call-overload]
        msg = f"`{name}` must be a positive int, got {value!r}"
        raise PlanError(msg)


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """The parameters of the rollout-side micro-batch schedule, checked when built.

    Parameters
    ----------
    global_batch_size
        Rollouts (not samples) per training step.
    micro_batch_size
        Samples per micro-batch when `use_dynamic_batch_size` is off.
    use_dynamic_batch_size
        Pack micro-batches under a token budget instead of fixed chunks.
    max_tokens_per_gpu
        The token budget per GPU; required with `use_dynamic_batch_size`.
    cp_size
        Context-parallel size: a micro-batch may hold ``max_tokens_per_gpu * cp_size`` tokens.
    vpp_size
        Virtual pipeline stages; ``None`` (or 1) for none.
    microbatch_group_size_per_vp_stage
        With ``vpp_size > 1``, each step's micro-batch count per rank must be a multiple of it.
    balance_data
        Distribute micro-batches over ranks by Karmarkar-Karp on their token sums, not strided.
    balance_by_flops
        Pack into micro-batches, and distribute them, by per-sample weights (e.g. FLOPs) with
        Karmarkar-Karp; the token budget only sets the micro-batch count and is not enforced.
        Needs `use_dynamic_batch_size` and the `weights` argument of the planner.
    allow_partial_train_step
        Train the trailing rollouts that do not fill a step as one smaller last step (if they hold
        at least `dp_size` samples) instead of dropping them. Only with `use_dynamic_batch_size`;
        ignored otherwise, as miles ignores it.

    Raises
    ------
    PlanTypeError
        For a field of the wrong type (a float or a bool where an int is expected).
    PlanError
        For a value out of range or a combination the schedule cannot run.
    """

    global_batch_size: int
    micro_batch_size: int = 1
    use_dynamic_batch_size: bool = False
    max_tokens_per_gpu: int | None = None
    cp_size: int = 1
    vpp_size: int | None = None
    microbatch_group_size_per_vp_stage: int | None = None
    balance_data: bool = False
    balance_by_flops: bool = False
    allow_partial_train_step: bool = False

    def __post_init__(self) -> None:
        for name in _BOOL_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                msg = f"`{name}` must be a bool, got {value!r} of type {type(value).__name__}"
                raise PlanTypeError(msg)
        _check_positive("global_batch_size", self.global_batch_size)
        _check_positive("micro_batch_size", self.micro_batch_size)
        _check_positive("cp_size", self.cp_size)
        _check_positive("vpp_size", self.vpp_size, optional=True)
        _check_positive(
            "microbatch_group_size_per_vp_stage",
            self.microbatch_group_size_per_vp_stage,
            optional=True,
        )
        _check_positive("max_tokens_per_gpu", self.max_tokens_per_gpu, optional=True)
        self._check_combinations()

    def _check_combinations(self) -> None:
        if self.use_dynamic_batch_size and self.max_tokens_per_gpu is None:
            msg = (
                "`use_dynamic_batch_size` needs `max_tokens_per_gpu`, got None; "
                "set the token budget per GPU or use fixed `micro_batch_size` chunks"
            )
            raise PlanError(msg)
        if self.balance_by_flops and not self.use_dynamic_batch_size:
            msg = (
                "`balance_by_flops` needs `use_dynamic_batch_size=True` (and "
                "`max_tokens_per_gpu`); turn it on or use `balance_data` instead"
            )
            raise PlanError(msg)
        if (self.vpp_size or 1) > 1 and self.microbatch_group_size_per_vp_stage is None:
            msg = (
                f"`vpp_size` is {self.vpp_size} but `microbatch_group_size_per_vp_stage` is "
                "None; pass the micro-batch group size (the pipeline-parallel size by default)"
            )
            raise PlanError(msg)

    @property
    def micro_batch_group(self) -> int:
        """The micro-batch group that counts: the one per VP stage if ``vpp_size > 1``, else 1."""
        if (self.vpp_size or 1) > 1 and self.microbatch_group_size_per_vp_stage is not None:
            return int(self.microbatch_group_size_per_vp_stage)
        return 1

    @property
    def max_tokens_per_micro_batch(self) -> int | None:
        """``max_tokens_per_gpu * cp_size`` with dynamic batch size; None with fixed chunks."""
        if not self.use_dynamic_batch_size or self.max_tokens_per_gpu is None:
            return None
        return int(self.max_tokens_per_gpu) * int(self.cp_size)

    def canonical(self) -> str:
        """Return the fields as ``name=value`` pairs, one string, for fingerprints."""
        parts = []
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None:  # numpy scalars print as plain Python values
                value = bool(value) if field.name in _BOOL_FIELDS else int(value)
            parts.append(f"{field.name}={value!r}")
        return ";".join(parts)


def check_positive_int(name: str, value: object) -> int:
    """Return `value` as an int, or raise if it is not a positive int (``bool`` is refused)."""
    _check_positive(name, value)
    return int(value)  # type: ignore[call-overload,no-any-return]


def _as_1d(name: str, values: npt.ArrayLike, what: str) -> np.ndarray:
    try:
        array = np.asarray(values)
    except (ValueError, TypeError) as exc:
        msg = f"`{name}` must be a 1-D sequence of {what}; numpy says: {exc}"
        raise PlanError(msg) from exc
    if array.ndim != 1:
        msg = f"`{name}` must be 1-D (one value per sample), got shape {array.shape}"
        raise PlanError(msg)
    return array


def _as_int64(name: str, values: npt.ArrayLike, what: str, fix: str) -> Int64Array:
    array = _as_1d(name, values, what)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        msg = f"`{name}` must hold integers, got dtype {array.dtype}; {fix}"
        raise PlanTypeError(msg)
    if array.dtype == np.uint64 and int(array.max()) > _INT64_MAX:
        msg = f"`{name}` holds {int(array.max())}, more than int64 can hold"
        raise PlanError(msg)
    return np.ascontiguousarray(array, dtype=np.int64)


def check_rollout_ids(rollout_ids: npt.ArrayLike, n: int) -> Int64Array:
    """Return the rollout id of every sample as a 1-D int64 array of length `n`, or raise."""
    fix = "pass one integer rollout id per sample"
    ids = _as_int64("rollout_ids", rollout_ids, "ints", fix)
    if ids.size != n:
        msg = (
            f"`rollout_ids` has {ids.size} values but `total_lengths` has {n}; "
            "pass one rollout id per sample"
        )
        raise PlanError(msg)
    return ids


def check_weights(weights: npt.ArrayLike, n: int | None) -> Int64Array | Float64Array:
    """Return weights as int64 (integer input) or float64, finite and >= 0, or raise.

    `n`, if not None, is the number of samples the weights must match.
    """
    array = _as_1d("weights", weights, "non-negative numbers")
    if n is not None and array.size != n:
        msg = (
            f"`weights` has {array.size} values but `total_lengths` has {n}; "
            "pass one weight per sample"
        )
        raise PlanError(msg)
    if array.size and (
        array.dtype == np.bool_
        or not np.issubdtype(array.dtype, np.number)
        or np.issubdtype(array.dtype, np.complexfloating)
    ):
        msg = f"`weights` must hold real numbers, got dtype {array.dtype}; pass ints or floats"
        raise PlanTypeError(msg)
    if array.size == 0 or np.issubdtype(array.dtype, np.integer):
        checked: Int64Array | Float64Array = _as_int64("weights", array, "numbers", "")
    else:
        checked = np.ascontiguousarray(array, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(checked))
        if bad.size:
            row = int(bad[0])
            msg = f"`weights` must be finite, got {checked[row]} at sample {row}"
            raise PlanError(msg)
    negative = np.flatnonzero(checked < 0)
    if negative.size:
        row = int(negative[0])
        msg = f"`weights` must be non-negative, got {checked[row]} at sample {row}"
        raise PlanError(msg)
    return checked
