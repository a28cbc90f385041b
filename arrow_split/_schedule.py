"""The rollout-side micro-batch schedule, as miles computes it, built on a :class:`Plan`.

For the same inputs :func:`plan_schedule` gives exactly miles' rollout-side ``partitions``,
``micro_batch_indices``, ``num_microbatches`` and ``num_rollouts``:

1. samples are grouped by rollout id (rollouts in order of first appearance, a rollout's samples
   in row order); a rollout's samples train in one step or are dropped together;
2. the rollouts are cut into steps of ``global_batch_size``; trailing rollouts that do not fill a
   step are dropped, unless ``allow_partial_train_step`` (with dynamic batch size) makes them one
   smaller last step, which it does only if they hold at least ``dp_size`` samples;
3. each step is packed into micro-batches whose count is a multiple of ``dp_size`` times the
   micro-batch group (:func:`_pack_step`);
4. the micro-batches go to ranks strided (``j`` to rank ``j % dp_size``) or, with
   ``balance_data`` or ``balance_by_flops``, by equal-size Karmarkar-Karp on their token (or
   weight) sums, each rank taking its micro-batches in ascending order;
5. a rank's rows are its micro-batches' rows, one after another, step after step.

The rows of every rank form a :class:`Plan` whose fingerprint is :mod:`arrow_split.plan`'s, over
the lengths and the schedule's other inputs: a scheduled shard carries the plan's
:class:`PlanKey`, and a rank whose schedule differs gets a :class:`PlanMismatchError`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._args import (
    Float64Array,
    Int64Array,
    SplitMethod,
    check_dp_rank,
    check_dp_size,
    check_lengths,
    check_positive_int,
    check_rollout_ids,
    check_weights,
)
from arrow_split._karmarkar_karp import kk_partitions, sorted_parts
from arrow_split._split import take
from arrow_split.batch import RolloutBatch
from arrow_split.errors import PlanError, PlanMismatchError, PlanTypeError
from arrow_split.plan import Plan, PlanKey, _fingerprint
from arrow_split.shard import Shard

__all__ = ["RankSchedule", "Schedule", "ScheduleConfig", "plan_schedule", "schedule_for_rank"]

_FLAGS = ("allow_partial_train_step", "balance_by_flops", "balance_data", "use_dynamic_batch_size")
_INTS = ("global_batch_size", "micro_batch_size", "cp_size")
_OPTIONAL_INTS = ("vpp_size", "microbatch_group_size_per_vp_stage", "max_tokens_per_gpu")
_INT64_MAX = int(np.iinfo(np.int64).max)
Weights = Int64Array | Float64Array


@dataclass(frozen=True, slots=True)
class ScheduleConfig:
    """The schedule's parameters, named as miles reads them from its args and parallel config.

    Checked when built; ints and flags are kept as Python ``int`` and ``bool``.

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
    vpp_size, microbatch_group_size_per_vp_stage
        Virtual pipeline stages (``None`` or 1: none); with ``vpp_size > 1`` each step's
        micro-batch count per rank is a multiple of the group size, which is then required.
    balance_data
        Distribute micro-batches by Karmarkar-Karp on their token sums, not strided.
    balance_by_flops
        Pack and distribute by the planner's per-sample `weights` (e.g. FLOPs); the token budget
        only sets the micro-batch count. Needs `use_dynamic_batch_size`.
    allow_partial_train_step
        Train the trailing rollouts that do not fill a step as a smaller last step (if they hold
        at least `dp_size` samples); only with `use_dynamic_batch_size`, ignored otherwise.

    Raises
    ------
    PlanTypeError
        A field of the wrong type (a float or a bool for an int, an int for a flag).
    PlanError
        A value out of range or a combination the schedule cannot run.
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
            value = getattr(self, name)
            if not isinstance(value, (bool, np.bool_)):
                msg = f"`{name}` must be a bool, got {value!r} of type {type(value).__name__}"
                raise PlanTypeError(msg)
            object.__setattr__(self, name, bool(value))
        for name in _INTS + _OPTIONAL_INTS:
            if name in _INTS or getattr(self, name) is not None:
                object.__setattr__(self, name, check_positive_int(name, getattr(self, name)))
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
        """The micro-batch group per VP stage if ``vpp_size > 1``, else 1."""
        if (self.vpp_size or 1) > 1:
            return self.microbatch_group_size_per_vp_stage or 1
        return 1

    @property
    def max_tokens_per_micro_batch(self) -> int | None:
        """``max_tokens_per_gpu * cp_size`` with dynamic batch size; None with fixed chunks."""
        if not self.use_dynamic_batch_size or self.max_tokens_per_gpu is None:
            return None
        return self.max_tokens_per_gpu * self.cp_size

    def canonical(self) -> str:
        """Return the fields as ``name=value`` pairs, one string, for fingerprints."""
        return ";".join(f"{field.name}={getattr(self, field.name)!r}" for field in fields(self))


@dataclass(frozen=True, slots=True, eq=False)
class RankSchedule:
    """One rank's part of a schedule: its rows of the schedule's plan, cut into micro-batches.

    Attributes
    ----------
    dp_rank
        The rank.
    plan
        The whole schedule's :class:`Plan` (shared by every rank); :attr:`rows` and
        :attr:`plan_key` read it.
    micro_batch_offsets
        int64, ``len = sum(num_microbatches) + 1``: micro-batch ``j`` is
        ``rows[micro_batch_offsets[j]:micro_batch_offsets[j + 1]]`` (read-only).
    num_microbatches
        Micro-batches per step on every rank (the same on all ranks).
    num_rollouts
        Rollouts per step, all ranks together.
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

    def take(self, batch: RolloutBatch) -> Shard:
        """Gather this rank's rows of `batch`, in micro-batch order, into a shard.

        The shard carries :attr:`plan_key` and :attr:`dp_rank`, as :func:`arrow_split.take`'s.

        Raises
        ------
        PlanMismatchError
            `batch` carries another plan (the driver's, ``batch.with_plan(schedule.plan)``, of
            another config, ``dp_size`` or batch), or has another number of samples.
        """
        if isinstance(batch, RolloutBatch):
            carried = None if batch.plan is None else batch.plan.key
            if carried not in (None, self.plan_key) or batch.num_samples != self.plan.num_samples:
                raise PlanMismatchError(_mismatch(self, batch, carried))
        return take(batch, self.plan, self.dp_rank)


def _mismatch(rank: RankSchedule, batch: RolloutBatch, carried: PlanKey | None) -> str:
    key = rank.plan_key
    if carried is None or carried == key:
        got = f"has {batch.num_samples} samples"
    else:
        got = f"was put with the {carried.method} plan {carried.fingerprint} for {carried.dp_size}"
        got += " ranks"
    return (
        f"rank {rank.dp_rank} asks for the {key.method} schedule {key.fingerprint} of "
        f"{rank.plan.num_samples} samples for {key.dp_size} ranks, but the batch {got}; plan "
        "the schedule on every rank from the driver's batch, `dp_size` and `ScheduleConfig`"
    )


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """The whole schedule: a :class:`Plan` of every rank's rows, and each rank's micro-batches.

    Attributes
    ----------
    plan
        Rank ``r``'s rows in micro-batch order at ``plan.partitions[r]`` (the rows of
        ``dropped_rows`` in none); method ``"balanced"`` with ``balance_data`` or
        ``balance_by_flops``, else ``"strided"``. ``arrow_split.take(batch, schedule.plan, r)``
        and ``arrow_split.split`` give shards that carry its key.
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
        """Number of data-parallel ranks."""
        return self.plan.dp_size

    @property
    def key(self) -> PlanKey:
        """The plan's :class:`PlanKey`."""
        return self.plan.key

    @property
    def input_digest(self) -> str:
        """What :meth:`fingerprint` returns."""
        return self.plan.fingerprint

    def fingerprint(self) -> str:
        """Return the plan's fingerprint: 16 hex digits over every input, equal on every rank."""
        return self.plan.fingerprint


# --- packing one step into micro-batches ---------------------------------------------------


def _first_fit_decreasing(lengths: Int64Array, budget: int) -> list[list[int]]:
    """Bins of positions into `lengths`: longest first (ties by position), each into the first
    bin whose sum stays within `budget`, else a new one; each bin in insertion order."""
    n = lengths.size
    order = np.argsort(-lengths, kind="stable")
    loads = np.zeros(max(n, 1), dtype=np.int64)
    bin_of = np.empty(n, dtype=np.int64)
    budget = min(budget, _INT64_MAX)
    count = 0
    for position, length in enumerate(lengths[order].tolist()):
        target = count
        if count:
            fits = loads[:count] <= budget - length
            first = int(fits.argmax())
            if fits[first]:
                target = first
        loads[target] += length
        bin_of[position] = target
        count += target == count
    grouped = order[np.argsort(bin_of, kind="stable")]
    bounds = np.cumsum(np.bincount(bin_of, minlength=count))[:-1]
    return [chunk.tolist() for chunk in np.split(grouped, bounds)] if n else []


def _split_in_two(one_bin: list[int], lengths: list[int]) -> tuple[list[int], list[int]]:
    halves: tuple[list[int], list[int]] = ([], [])
    sums = [0, 0]
    for index in sorted(one_bin, key=lambda i: -lengths[i]):
        half = 0 if sums[0] <= sums[1] else 1
        halves[half].append(index)
        sums[half] += lengths[index]
    return halves


def _expand_by_splitting(bins: list[list[int]], target: int, lengths: list[int]) -> None:
    """Split the heaviest multi-sample bin (the later on ties), in place, until `target` bins.

    Stops early when every bin holds one sample; zero-token bins may split off an empty one.
    """
    sums = [sum(lengths[i] for i in one_bin) for one_bin in bins]
    while len(bins) < target:
        best = -1
        for j, one_bin in enumerate(bins):
            if len(one_bin) > 1 and (best < 0 or sums[j] >= sums[best]):
                best = j
        if best < 0:
            return
        left, right = _split_in_two(bins[best], lengths)
        bins[best] = left
        bins.append(right)
        sums[best] = sum(lengths[i] for i in left)
        sums.append(sum(lengths[i] for i in right))


def _pack_by_weight(
    lengths: list[int], workloads: list[Any], budget: int, exact: bool
) -> list[list[int]]:
    count = max(1, (sum(lengths) + budget - 1) // budget)
    if count >= len(lengths):
        return [[i] for i in range(len(lengths))]
    # count < len(lengths) and the weights are >= 0, so every one of the `count` parts has items.
    return [sorted(part) for part in kk_partitions(workloads, count, equal_size=False, exact=exact)]


def _pack_step(
    step: int,
    lengths: Int64Array,
    workloads: list[Any] | None,
    align: int,
    config: ScheduleConfig,
    exact: bool,
) -> list[list[int]]:
    """Step `step`'s micro-batches as positions into its samples, their count aligned.

    Fixed chunks of ``micro_batch_size`` (already aligned: :func:`_check_step`); with a token
    budget, first-fit decreasing or, with `workloads` (``balance_by_flops``), ``ceil(tokens /
    budget)`` bins by unequal-size Karmarkar-Karp on them; then split up to a multiple of `align`.

    Raises
    ------
    PlanError
        The count cannot be aligned (too few samples), or aligning it would leave an empty
        micro-batch (the only ones left to split hold zero-token samples).
    """
    budget = config.max_tokens_per_micro_batch
    if budget is None:
        size = config.micro_batch_size
        return [list(range(i, min(i + size, lengths.size))) for i in range(0, lengths.size, size)]
    values = lengths.tolist()
    if workloads is not None:
        bins = _pack_by_weight(values, workloads, budget, exact)
    else:
        bins = _first_fit_decreasing(lengths, budget)
    packed = len(bins)
    target = max(-(-packed // align) * align, align)
    _expand_by_splitting(bins, target, values)
    if len(bins) != target:
        msg = (
            f"step {step}: {lengths.size} samples in {packed} micro-batches cannot be split "
            f"into {target}, the next multiple of {align} (`dp_size` times the micro-batch "
            "group); each micro-batch needs a sample: raise `global_batch_size`, or lower "
            "`dp_size` or `microbatch_group_size_per_vp_stage`"
        )
        raise PlanError(msg)
    if not all(bins):
        msg = (
            f"step {step}: splitting micro-batches to reach {target} would leave an empty one: "
            "the only micro-batches left to split hold zero-token samples; give every sample "
            "at least one token"
        )
        raise PlanError(msg)
    return bins


# --- steps and ranks ------------------------------------------------------------------------


def _group_rollouts(rollout_ids: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The rows grouped by rollout (first-appearance order) and the group boundaries."""
    if rollout_ids.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64)
    _, first, inverse = np.unique(rollout_ids, return_index=True, return_inverse=True)
    ordinal_of = np.empty(first.size, dtype=np.int64)
    ordinal_of[np.argsort(first, kind="stable")] = np.arange(first.size, dtype=np.int64)
    ordinals = ordinal_of[inverse.reshape(-1)]
    rows = np.argsort(ordinals, kind="stable").astype(np.int64)
    bounds = np.zeros(first.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(ordinals, minlength=first.size), out=bounds[1:])
    return rows, bounds


def _step_counts(bounds: Int64Array, dp_size: int, config: ScheduleConfig) -> list[int]:
    """The rollouts of each step; raise if not even one step can be filled."""
    total = bounds.size - 1
    gbs = config.global_batch_size
    if total < gbs:
        msg = (
            f"{total} rollouts < `global_batch_size` ({gbs}): a step trains "
            "`global_batch_size` rollouts; lower `global_batch_size` or pass more rollouts"
        )
        raise PlanError(msg)
    counts = [gbs] * (total // gbs)
    leftover = total % gbs
    partial = config.allow_partial_train_step and config.use_dynamic_batch_size
    if leftover and partial and int(bounds[-1] - bounds[-1 - leftover]) >= dp_size:
        counts.append(leftover)
    return counts


def _check_step(step: int, n: int, rollouts: int, dp_size: int, config: ScheduleConfig) -> None:
    """Raise for a step that cannot give every rank a micro-batch (before any packing)."""
    group = config.micro_batch_group
    align = dp_size * group
    if n < dp_size:
        msg = (
            f"step {step} has {n} samples ({rollouts} rollouts) but `dp_size` is {dp_size}; "
            "every rank needs a sample in every step: raise `global_batch_size` or lower `dp_size`"
        )
        raise PlanError(msg)
    if config.use_dynamic_batch_size:
        if n < align:
            msg = (
                f"step {step} has {n} samples, fewer than the {align} micro-batches "
                f"(`dp_size` {dp_size} times micro-batch group {group}) "
                "it needs; raise `global_batch_size` or lower the micro-batch group"
            )
            raise PlanError(msg)
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
        raise PlanError(msg)


def _distribute(
    bins: list[list[int]], source: list[Any], exact: bool, dp_size: int, balanced: bool
) -> list[list[int]]:
    """The micro-batch ids of each rank, ascending."""
    if not balanced:
        return [list(range(rank, len(bins), dp_size)) for rank in range(dp_size)]
    sums = [sum(source[i] for i in one_bin) for one_bin in bins]
    return [part.tolist() for part in sorted_parts(sums, dp_size, equal_size=True, exact=exact)]


def _frozen(array: Int64Array) -> Int64Array:
    array.flags.writeable = False
    return array


def _fingerprint_words(ids: Int64Array, config: ScheduleConfig, weights: Weights | None) -> Any:
    """The inputs besides the lengths, as int64 words for plan.py's fingerprint.

    The config's canonical text (its length, then its bytes padded to whole words), the rollout
    ids, a tag (0 no weights, 1 ints, 2 floats) and the weights (floats as their bits). A plan's
    sort keys are one word per sample, these more: a schedule's fingerprint is never a plan's.
    """
    text = config.canonical().encode("ascii")
    words = np.frombuffer(text.ljust(-(-len(text) // 8) * 8, b"\0"), dtype="<i8")
    tail: list[Any] = [[0]]
    if weights is not None:
        tail = [[2], weights.view(np.int64)] if weights.dtype.kind == "f" else [[1], weights]
    return np.concatenate([[len(text)], words, ids, *tail]).astype(np.int64)


def _plan(
    lengths: Int64Array,
    ids: Int64Array,
    dp_size: int,
    config: ScheduleConfig,
    weights: Weights | None,
) -> Schedule:
    """The schedule of parsed inputs (the steps are checked before any is packed)."""
    grouped, bounds = _group_rollouts(ids)
    counts = _step_counts(bounds, dp_size, config)
    starts = [int(bounds[start]) for start in np.cumsum([0, *counts]).tolist()]
    for step, rollouts in enumerate(counts):
        _check_step(step, starts[step + 1] - starts[step], rollouts, dp_size, config)
    align = dp_size * config.micro_batch_group
    exact = weights is None or weights.dtype.kind != "f"
    balanced = config.balance_data or config.balance_by_flops
    rows: list[list[Int64Array]] = [[] for _ in range(dp_size)]
    sizes: list[list[int]] = [[] for _ in range(dp_size)]
    num_mb = []
    for step in range(len(counts)):
        step_rows = grouped[starts[step] : starts[step + 1]]
        step_lengths = lengths[step_rows]
        workloads = None if weights is None else weights[step_rows].tolist()
        bins = _pack_step(step, step_lengths, workloads, align, config, exact)
        num_mb.append(len(bins) // dp_size)
        source = step_lengths.tolist() if workloads is None else workloads
        for rank, bin_ids in enumerate(_distribute(bins, source, exact, dp_size, balanced)):
            local = [i for j in bin_ids for i in bins[j]]
            rows[rank].append(step_rows[np.asarray(local, dtype=np.int64)])
            sizes[rank].extend(len(bins[j]) for j in bin_ids)
    method: SplitMethod = "balanced" if balanced else "strided"
    words = _fingerprint_words(ids, config, weights)
    partitions = tuple(_frozen(np.concatenate(parts)) for parts in rows)
    plan = Plan(
        method, dp_size, lengths.size, _fingerprint(dp_size, method, lengths, words), partitions
    )
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
    """Every input of a schedule but `dp_size`, parsed once."""
    if not isinstance(config, ScheduleConfig):
        msg = f"`config` must be a ScheduleConfig, got {type(config).__name__}"
        raise PlanTypeError(msg)
    lengths = check_lengths(total_lengths)
    ids = check_rollout_ids(rollout_ids, lengths.size)
    if config.balance_by_flops and weights is None:
        msg = (
            "`balance_by_flops` needs `weights`, one per sample (e.g. forward FLOPs); "
            "pass them or turn `balance_by_flops` off"
        )
        raise PlanError(msg)
    if weights is not None and not config.balance_by_flops:
        msg = "`weights` are used only with `balance_by_flops=True`; turn it on or drop `weights`"
        raise PlanError(msg)
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
    total_lengths
        Token count of every sample (prompt and response): non-negative ints, one per sample.
        They drive the token budget and, without `weights`, the balance.
    rollout_ids
        Rollout id of every sample, ints; a rollout's samples stay in one step.
    dp_size
        Number of data-parallel ranks, a positive int.
    config
        The schedule's parameters.
    weights
        Per-sample workloads (e.g. forward FLOPs), non-negative ints or floats; required with,
        and only with, ``config.balance_by_flops``. They replace miles' model-FLOPs estimate.

    Returns
    -------
    Schedule
        Its ``plan`` holds every rank's rows; shards taken with it carry its key.

    Raises
    ------
    PlanTypeError
        For inputs of the wrong type.
    PlanError
        For malformed inputs, fewer rollouts than one step, a step with fewer samples than
        ranks, or a micro-batch count that cannot be aligned to the ranks.
    """
    size = check_dp_size(dp_size)
    lengths, ids, parsed, checked = _parse(total_lengths, rollout_ids, config, weights)
    return _plan(lengths, ids, size, parsed, checked)


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

    Its :meth:`~RankSchedule.take` gathers the rank's rows into a shard that carries the plan's
    key, and refuses a batch put with another schedule (:class:`PlanMismatchError`).

    Raises
    ------
    PlanError
        As :func:`plan_schedule`, and for a `dp_rank` outside ``[0, dp_size)``.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    lengths, ids, parsed, checked = _parse(total_lengths, rollout_ids, config, weights)
    return _plan(lengths, ids, size, parsed, checked).ranks[rank]
