"""The schedule's parameters and the checks of its inputs, all done before any planning.

:class:`ScheduleConfig` names its fields as miles' rollout-side schedule reads them from its
arguments and its training backend's parallel config. Its checks, and those of the planner's inputs
(:mod:`arrow_split._args`), turn every condition the schedule would otherwise assert on, or crash
on, into a typed error that names the values and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from arrow_split._args import check_positive_int
from arrow_split.errors import PlanError, PlanTypeError

__all__ = ["ScheduleConfig"]

_BOOL_FIELDS = (
    "allow_partial_train_step",
    "balance_by_flops",
    "balance_data",
    "use_dynamic_batch_size",
)
_INT_FIELDS = ("global_batch_size", "micro_batch_size", "cp_size")
_OPTIONAL_INT_FIELDS = ("vpp_size", "microbatch_group_size_per_vp_stage", "max_tokens_per_gpu")


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
        for name in _INT_FIELDS:
            check_positive_int(name, getattr(self, name))
        for name in _OPTIONAL_INT_FIELDS:
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
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
