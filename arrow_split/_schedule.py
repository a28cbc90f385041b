"""The rollout-side micro-batch schedule, exactly as miles computes it, as a :class:`Plan`.

Rollouts are cut into steps, each step packed into micro-batches dealt to ranks; the plan is
fingerprinted over every input, so a rank that asks for another schedule is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._args import (
    Int64Array,
    SplitMethod,
    as_flag,
    check_dp_rank,
    check_dp_size,
    check_lengths,
    check_positive_int,
    check_rollout_ids,
    check_weights,
)
from arrow_split._schedule_packing import distribute, group_rollouts, pack_step
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.errors import PlanError, PlanMismatchError, PlanTypeError
from arrow_split.plan import Plan, PlanKey, _fingerprint
from arrow_split.shard import Shard

__all__ = ["RankSchedule", "Schedule", "ScheduleConfig", "plan_schedule", "schedule_for_rank"]

_FLAGS = ("allow_partial_train_step", "balance_by_flops", "balance_data", "use_dynamic_batch_size")
_INTS = ("global_batch_size", "micro_batch_size", "cp_size")
_OPTIONAL_INTS = ("vpp_size", "microbatch_group_size_per_vp_stage", "max_tokens_per_gpu")
Weights = npt.NDArray[np.int64] | npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """The schedule's parameters, named as miles reads them; checked once, when built.

    Parameters
    ----------
    global_batch_size, micro_batch_size
        Rollouts (not samples) per step; samples per micro-batch in fixed chunks.
    use_dynamic_batch_size, max_tokens_per_gpu, cp_size
        Pack micro-batches under a budget of ``max_tokens_per_gpu * cp_size`` tokens instead.
    vpp_size, microbatch_group_size_per_vp_stage
        With ``vpp_size > 1``, each step's micro-batches per rank are a multiple of the group.
    balance_data, balance_by_flops
        Deal by Karmarkar-Karp on token sums; pack and deal by `weights` (budget: the count).
    allow_partial_train_step
        With a token budget, train trailing rollouts of >= `dp_size` samples as a last step.

    Raises
    ------
    PlanTypeError, PlanError
        A field of the wrong type, out of range, or a combination the schedule cannot run.
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
        for name in _FLAGS:
            object.__setattr__(self, name, as_flag(name, getattr(self, name)))
        for name in _INTS + _OPTIONAL_INTS:
            if name in _INTS or getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
        if self.use_dynamic_batch_size and self.max_tokens_per_gpu is None:
            msg = (
                "`use_dynamic_batch_size` needs `max_tokens_per_gpu`, got None; "
                "set the token budget per GPU or use fixed `micro_batch_size` chunks"
            )
            raise PlanError(msg, key="use_dynamic_batch_size")
        if self.balance_by_flops and not self.use_dynamic_batch_size:
            msg = (
                "`balance_by_flops` needs `use_dynamic_batch_size=True` (and "
                "`max_tokens_per_gpu`); turn it on or use `balance_data` instead"
            )
            raise PlanError(msg, key="balance_by_flops")
        if (self.vpp_size or 1) > 1 and self.microbatch_group_size_per_vp_stage is None:
            msg = (
                f"`vpp_size` is {self.vpp_size} but `microbatch_group_size_per_vp_stage` is "
                "None; pass the micro-batch group size (the pipeline-parallel size by default)"
            )
            raise PlanError(msg, key="vpp_size")

    @property
    def micro_batch_group(self) -> int:
        """The micro-batch group per VP stage if ``vpp_size > 1``, else 1."""
        return (self.microbatch_group_size_per_vp_stage or 1) if (self.vpp_size or 1) > 1 else 1

    @property
    def max_tokens_per_micro_batch(self) -> int | None:
        """``max_tokens_per_gpu * cp_size`` with dynamic batch size; None with fixed chunks."""
        tokens = self.max_tokens_per_gpu if self.use_dynamic_batch_size else None
        return None if tokens is None else tokens * self.cp_size

    def canonical(self) -> str:
        """Return the fields as ``name=value`` pairs, one string, for fingerprints."""
        return ";".join(f"{field.name}={getattr(self, field.name)!r}" for field in fields(self))


@dataclass(frozen=True, slots=True, eq=False)
class RankSchedule:
    """One rank's part of a schedule: its rows of the schedule's plan, cut into micro-batches.

    Attributes
    ----------
    dp_rank, plan
        The rank, and the whole schedule's :class:`Plan`.
    micro_batch_offsets
        int64, read-only: micro-batch ``j`` is ``rows[micro_batch_offsets[j]:...[j + 1]]``.
    num_microbatches, num_rollouts
        Micro-batches per step on each rank (the same on all), rollouts per step on all ranks.
    """

    dp_rank: int
    plan: Plan
    micro_batch_offsets: Int64Array
    num_microbatches: tuple[int, ...]
    num_rollouts: tuple[int, ...]

    @property
    def rows(self) -> Int64Array:
        """int64 rows of the batch this rank trains, ordered by micro-batch (read-only)."""
        return self.plan.partitions[self.dp_rank]

    @property
    def plan_key(self) -> PlanKey:
        """The schedule's :class:`PlanKey`, the same on every rank that planned alike."""
        return self.plan.key

    def __repr__(self) -> str:
        return (
            f"RankSchedule(dp_rank={self.dp_rank}, {len(self.rows)} rows, "
            f"{len(self.micro_batch_offsets) - 1} micro-batches, "
            f"fingerprint={self.plan.fingerprint!r})"
        )

    def take(self, batch: RolloutBatch) -> Shard:
        """Gather this rank's rows of `batch` into a shard carrying :attr:`plan_key`.

        Raises
        ------
        PlanMismatchError
            `batch` carries another plan than this schedule's, or another number of samples.
        """
        key, theirs = self.plan_key, getattr(batch, "plan", None)
        mine = theirs is None or theirs.key == key
        if isinstance(batch, RolloutBatch) and not (mine and len(batch) == self.plan.num_samples):
            got = f"was put with {theirs!r}" if not mine else f"has {len(batch)} samples"
            msg = (
                f"rank {self.dp_rank} asks for the {key.method} schedule {key.fingerprint} of "
                f"{self.plan.num_samples} samples for {key.dp_size} ranks, but the batch {got};"
                " plan the schedule on every rank from the driver's batch, `dp_size` and config"
            )
            raise PlanMismatchError(msg, key="schedule", got=key.fingerprint)
        batch = check_batch(batch)
        return Shard._take(batch, self.rows, batch.total_lengths, key, self.dp_rank)


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """The whole schedule: a :class:`Plan` of every rank's rows, and each rank's micro-batches.

    Attributes
    ----------
    plan
        Rank ``r``'s rows in micro-batch order at ``plan.partitions[r]`` (for :func:`take`).
    ranks
        ``dp_size`` :class:`RankSchedule`, rank ``r`` at index ``r``.
    num_microbatches, num_rollouts
        Per step, as in :class:`RankSchedule`.
    dropped_rows
        int64 rows of the trailing rollouts that no step trains, ascending (read-only).
    """

    plan: Plan
    ranks: tuple[RankSchedule, ...]
    num_microbatches: tuple[int, ...]
    num_rollouts: tuple[int, ...]
    dropped_rows: Int64Array

    @property
    def dp_size(self) -> int:
        """Number of data-parallel ranks (``plan.dp_size``)."""
        return self.plan.dp_size

    @property
    def input_digest(self) -> str:
        """The plan's fingerprint, 16 hex digits over every input, equal on every rank."""
        return self.plan.fingerprint

    def fingerprint(self) -> str:
        """Return :attr:`input_digest`."""
        return self.plan.fingerprint

    def __repr__(self) -> str:
        key = self.plan.key
        return (
            f"Schedule({key.method}, dp_size={key.dp_size}, {self.plan.num_samples} samples, "
            f"{len(self.num_microbatches)} steps, micro-batches per rank per step "
            f"{_short_tuple(self.num_microbatches)}, {len(self.dropped_rows)} rows dropped, "
            f"fingerprint={key.fingerprint!r})"
        )


def _short_tuple(values: tuple[int, ...], shown: int = 6) -> str:
    """``values`` as a tuple's text, its first ``shown`` values and a count when longer."""
    if len(values) <= shown:
        return str(values)
    return f"({', '.join(map(str, values[:shown]))}, ... {len(values)} in all)"


def _step_counts(bounds: Int64Array, dp_size: int, config: ScheduleConfig) -> list[int]:
    """The rollouts of each step; raise if not even one step can be filled."""
    total, gbs = bounds.size - 1, config.global_batch_size
    if total < gbs:
        msg = (
            f"{total} rollouts < `global_batch_size` ({gbs}): a step trains "
            "`global_batch_size` rollouts; lower `global_batch_size` or pass more rollouts"
        )
        raise PlanError(msg, key="global_batch_size", got=str(gbs))
    counts, leftover = [gbs] * (total // gbs), total % gbs
    partial = config.allow_partial_train_step and config.use_dynamic_batch_size
    if leftover and partial and int(bounds[-1] - bounds[-1 - leftover]) >= dp_size:
        counts.append(leftover)
    return counts


def _check_step(step: int, n: int, rollouts: int, dp_size: int, config: ScheduleConfig) -> None:
    """Raise for a step that cannot give every rank a micro-batch (before any packing)."""
    group, align = config.micro_batch_group, dp_size * config.micro_batch_group
    if n < dp_size:
        msg = (
            f"step {step} has {n} samples ({rollouts} rollouts) but `dp_size` is {dp_size}; "
            "every rank needs a sample in every step: raise `global_batch_size` or lower `dp_size`"
        )
        raise PlanError(msg, key="dp_size", got=str(dp_size))
    if config.use_dynamic_batch_size:
        if n < align:
            msg = (
                f"step {step} has {n} samples, fewer than the {align} micro-batches "
                f"(`dp_size` {dp_size} times micro-batch group {group}) "
                "it needs; raise `global_batch_size` or lower the micro-batch group"
            )
            raise PlanError(msg, key="global_batch_size", expected=f"at least {align} samples")
        return
    size = config.micro_batch_size
    count = -(-n // size)
    if count % align:
        msg = (
            f"step {step}: {n} samples in chunks of `micro_batch_size` {size} make {count} "
            f"micro-batches, not a multiple of {align} (`dp_size` {dp_size} times micro-batch "
            f"group {group}); make each step's sample count a multiple of "
            f"{align * size} or use `use_dynamic_batch_size`"
        )
        raise PlanError(msg, key="micro_batch_size", got=str(size))


def _frozen(array: Int64Array) -> Int64Array:
    array.flags.writeable = False
    return array


def _fingerprint_words(ids: Int64Array, config: ScheduleConfig, weights: Weights | None) -> Any:
    """Config text, rollout ids and weights as int64 words (more than a plan's sort keys)."""
    text = config.canonical().encode("ascii")
    words = np.frombuffer(text.ljust(-(-len(text) // 8) * 8, b"\0"), dtype="<i8")
    tail: list[Any] = [[0]]
    if weights is not None:
        tail = [[2], weights.view(np.int64)] if weights.dtype.kind == "f" else [[1], weights]
    return np.concatenate([[len(text)], words, ids, *tail]).astype(np.int64)


def _deal(
    steps: list[Int64Array],
    lengths: Int64Array,
    weights: Weights | None,
    dp_size: int,
    config: ScheduleConfig,
) -> tuple[list[list[Int64Array]], list[list[int]], list[int]]:
    """Pack each step's rows and deal the micro-batches: rows and sizes per rank, counts."""
    align = dp_size * config.micro_batch_group
    exact = weights is None or weights.dtype.kind != "f"
    balanced = config.balance_data or config.balance_by_flops
    budget, size = config.max_tokens_per_micro_batch, config.micro_batch_size
    rows: list[list[Int64Array]] = [[] for _ in range(dp_size)]
    sizes: list[list[int]] = [[] for _ in range(dp_size)]
    num_mb = []
    for step, step_rows in enumerate(steps):
        step_lengths = lengths[step_rows]
        workloads = None if weights is None else weights[step_rows].tolist()
        bins = pack_step(step, step_lengths, workloads, align, budget, size, exact)
        num_mb.append(len(bins) // dp_size)
        source = step_lengths.tolist() if workloads is None else workloads
        for rank, bin_ids in enumerate(distribute(bins, source, exact, dp_size, balanced)):
            rows[rank].append(step_rows[[i for j in bin_ids for i in bins[j]]])
            sizes[rank].extend(len(bins[j]) for j in bin_ids)
    return rows, sizes, num_mb


def _plan(
    dp_size: int,
    lengths: Int64Array,
    ids: Int64Array,
    config: ScheduleConfig,
    weights: Weights | None,
) -> Schedule:
    """The schedule of parsed inputs (every step is checked before any is packed)."""
    grouped, bounds = group_rollouts(ids)
    counts = _step_counts(bounds, dp_size, config)
    starts = [int(bounds[start]) for start in np.cumsum([0, *counts]).tolist()]
    for step, rollouts in enumerate(counts):
        _check_step(step, starts[step + 1] - starts[step], rollouts, dp_size, config)
    steps = [grouped[start:stop] for start, stop in pairwise(starts)]
    rows, sizes, num_mb = _deal(steps, lengths, weights, dp_size, config)
    balanced = config.balance_data or config.balance_by_flops
    method: SplitMethod = "balanced" if balanced else "strided"
    digest = _fingerprint(dp_size, method, lengths, _fingerprint_words(ids, config, weights))
    partitions = tuple(_frozen(np.concatenate(parts)) for parts in rows)
    plan = Plan(method, dp_size, lengths.size, digest, partitions)
    per_step = (tuple(num_mb), tuple(counts))
    ranks = tuple(
        RankSchedule(rank, plan, _frozen(np.cumsum([0, *rank_sizes], dtype=np.int64)), *per_step)
        for rank, rank_sizes in enumerate(sizes)
    )
    return Schedule(plan, ranks, *per_step, _frozen(np.sort(grouped[starts[-1] :])))


def _parse(
    total_lengths: npt.ArrayLike,
    rollout_ids: npt.ArrayLike,
    config: object,
    weights: npt.ArrayLike | None,
) -> tuple[Int64Array, Int64Array, ScheduleConfig, Weights | None]:
    """Every input of a schedule but `dp_size`, parsed once, in the order errors are raised."""
    if not isinstance(config, ScheduleConfig):
        msg = f"`config` must be a ScheduleConfig, got {type(config).__name__}"
        raise PlanTypeError(msg, key="config")
    lengths = check_lengths(total_lengths)
    ids = check_rollout_ids(rollout_ids, lengths.size)
    if config.balance_by_flops == (weights is None):
        msg = (
            "`balance_by_flops` needs `weights`, one per sample (e.g. forward FLOPs); pass them "
            "or turn `balance_by_flops` off"
            if weights is None
            else "`weights` are used only with `balance_by_flops=True`; turn it on or drop "
            "`weights`"
        )
        raise PlanError(msg, key="balance_by_flops")
    return lengths, ids, config, None if weights is None else check_weights(weights, lengths.size)


def plan_schedule(
    total_lengths: npt.ArrayLike,
    rollout_ids: npt.ArrayLike,
    dp_size: int,
    config: ScheduleConfig,
    *,
    weights: npt.ArrayLike | None = None,
) -> Schedule:
    """Plan every rank's micro-batches, exactly as miles' rollout-side schedule does.

    Parameters
    ----------
    total_lengths, rollout_ids
        Token count (non-negative) and rollout id of every sample, ints.
    dp_size, config
        Number of data-parallel ranks; the schedule's parameters.
    weights
        Per-sample workloads (e.g. forward FLOPs), non-negative ints or floats; required with,
        and only with, ``config.balance_by_flops``.

    Raises
    ------
    PlanTypeError, PlanError
        Inputs of the wrong type or value, or a step that cannot give every rank micro-batches.
    """
    return _plan(check_dp_size(dp_size), *_parse(total_lengths, rollout_ids, config, weights))


def schedule_for_rank(
    total_lengths: npt.ArrayLike,
    rollout_ids: npt.ArrayLike,
    dp_size: int,
    dp_rank: int,
    config: ScheduleConfig,
    *,
    weights: npt.ArrayLike | None = None,
) -> RankSchedule:
    """Return ``plan_schedule(...).ranks[dp_rank]`` (the whole schedule is computed).

    Raises
    ------
    PlanError
        As :func:`plan_schedule`, and for a `dp_rank` outside ``[0, dp_size)``.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    return _plan(size, *_parse(total_lengths, rollout_ids, config, weights)).ranks[rank]
