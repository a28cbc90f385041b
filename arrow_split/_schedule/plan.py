"""The rollout-side micro-batch schedule: which rows each rank trains, in which micro-batch.

:func:`plan_schedule` gives, for the same inputs, exactly the schedule miles computes on the
rollout side (its ``partitions``, ``micro_batch_indices``, ``num_microbatches`` and
``num_rollouts``):

1. samples are grouped by rollout id, rollouts in order of first appearance and each rollout's
   samples in row order; a rollout's samples train in the same step or are dropped together;
2. the rollouts are cut into steps of ``global_batch_size``; trailing rollouts that do not fill a
   step are dropped, unless ``allow_partial_train_step`` (with dynamic batch size) lets them form
   one smaller last step, which it does only if they hold at least ``dp_size`` samples;
3. each step is packed into micro-batches whose count is a multiple of ``dp_size`` (times the
   micro-batch group with virtual pipelining), see :mod:`arrow_split._schedule.pack`;
4. the micro-batches go to ranks strided (micro-batch ``j`` to rank ``j % dp_size``) or, with
   ``balance_data`` or ``balance_by_flops``, by equal-size Karmarkar-Karp on their token (or
   weight) sums, each rank taking its micro-batches in ascending order;
5. a rank's rows are its micro-batches' rows one after another, step after step, so every
   micro-batch is a contiguous slice of the rank's shard.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._args import (
    Int64Array,
    check_dp_rank,
    check_dp_size,
    check_lengths,
    check_rollout_ids,
    check_weights,
)
from arrow_split._karmarkar_karp import sorted_parts
from arrow_split._schedule.config import ScheduleConfig
from arrow_split._schedule.pack import pack_step
from arrow_split.errors import PlanError, PlanTypeError

__all__ = ["RankSchedule", "Schedule", "plan_schedule", "schedule_for_rank"]

_FINGERPRINT_PERSON = b"arrow_split.sch1"


def _frozen(array: Int64Array) -> Int64Array:
    array.setflags(write=False)
    return array


@dataclass(frozen=True, slots=True, eq=False)
class RankSchedule:
    """One rank's part of a schedule.

    Attributes
    ----------
    dp_rank
        The rank.
    rows
        int64 rows of the batch this rank trains, ordered by micro-batch (read-only).
    micro_batch_offsets
        int64, ``len = sum(num_microbatches) + 1``: micro-batch ``j`` is
        ``rows[micro_batch_offsets[j]:micro_batch_offsets[j + 1]]`` (read-only).
    num_microbatches
        Micro-batches per step on every rank (the same on all ranks).
    num_rollouts
        Rollouts per step, all ranks together.
    """

    dp_rank: int
    rows: Int64Array
    micro_batch_offsets: Int64Array
    num_microbatches: tuple[int, ...]
    num_rollouts: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """The whole schedule: every rank's part and the per-step counts.

    Attributes
    ----------
    dp_size
        Number of data-parallel ranks.
    ranks
        ``dp_size`` :class:`RankSchedule`, rank ``r`` at index ``r``.
    num_microbatches, num_rollouts
        Per step, as in :class:`RankSchedule`.
    dropped_rows
        int64 rows of the trailing rollouts that no step trains, ascending (read-only).
    input_digest
        What :meth:`fingerprint` returns.
    """

    dp_size: int
    ranks: tuple[RankSchedule, ...]
    num_microbatches: tuple[int, ...]
    num_rollouts: tuple[int, ...]
    dropped_rows: Int64Array
    input_digest: str

    def fingerprint(self) -> str:
        """Return 16 hex digits of BLAKE2b over the inputs, equal on every rank and platform."""
        return self.input_digest


def _digest(
    lengths: Int64Array,
    rollout_ids: Int64Array,
    dp_size: int,
    config: ScheduleConfig,
    weights: npt.NDArray[Any] | None,
) -> str:
    digest = hashlib.blake2b(digest_size=8, person=_FINGERPRINT_PERSON)
    canonical = config.canonical().encode("ascii")
    digest.update(struct.pack("<qqq", lengths.size, dp_size, len(canonical)))
    digest.update(canonical)
    digest.update(np.ascontiguousarray(lengths, dtype="<i8").data)
    digest.update(np.ascontiguousarray(rollout_ids, dtype="<i8").data)
    if weights is None:
        digest.update(b"n")
    elif np.issubdtype(weights.dtype, np.integer):
        digest.update(b"i" + np.ascontiguousarray(weights, dtype="<i8").tobytes())
    else:
        digest.update(b"f" + np.ascontiguousarray(weights, dtype="<f8").tobytes())
    return digest.hexdigest()


def _group_rollouts(rollout_ids: Int64Array) -> tuple[Int64Array, Int64Array]:
    """Return the rows grouped by rollout (first-appearance order) and the group boundaries."""
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
    """Return the rollouts of each step; raise if not even one step can be filled."""
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
    """Raise for a step that cannot give every rank a micro-batch (checked before packing)."""
    align = dp_size * config.micro_batch_group
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
                f"(`dp_size` {dp_size} times micro-batch group {config.micro_batch_group}) "
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
            f"group {config.micro_batch_group}); make each step's sample count a multiple of "
            f"{align * size} or use `use_dynamic_batch_size`"
        )
        raise PlanError(msg)


def _check_weights_use(weights: npt.ArrayLike | None, config: ScheduleConfig) -> None:
    if config.balance_by_flops and weights is None:
        msg = (
            "`balance_by_flops` needs `weights`, one per sample (e.g. forward FLOPs); "
            "pass them or turn `balance_by_flops` off"
        )
        raise PlanError(msg)
    if weights is not None and not config.balance_by_flops:
        msg = "`weights` are used only with `balance_by_flops=True`; turn it on or drop `weights`"
        raise PlanError(msg)


def _distribute(
    bins: list[list[int]], source: list[Any], exact: bool, dp_size: int, balanced: bool
) -> list[list[int]]:
    """Return the micro-batch ids of each rank, ascending."""
    if not balanced:
        return [list(range(rank, len(bins), dp_size)) for rank in range(dp_size)]
    sums = [sum(source[i] for i in one_bin) for one_bin in bins]
    parts = sorted_parts(sums, dp_size, equal_size=True, exact=exact)
    return [part.tolist() for part in parts]


class _RankBuilder:
    """Collects one rank's rows and micro-batch sizes, step by step."""

    def __init__(self) -> None:
        self.rows: list[Int64Array] = []
        self.sizes: list[int] = []

    def add(self, step_rows: Int64Array, bins: list[list[int]], bin_ids: list[int]) -> None:
        local = [i for j in bin_ids for i in bins[j]]
        self.rows.append(step_rows[np.asarray(local, dtype=np.int64)])
        self.sizes.extend(len(bins[j]) for j in bin_ids)

    def build(self, rank: int, num_mb: tuple[int, ...], num_ro: tuple[int, ...]) -> RankSchedule:
        rows = np.concatenate(self.rows) if self.rows else np.zeros(0, dtype=np.int64)
        offsets = np.zeros(len(self.sizes) + 1, dtype=np.int64)
        np.cumsum(np.asarray(self.sizes, dtype=np.int64), out=offsets[1:])
        return RankSchedule(rank, _frozen(rows.astype(np.int64)), _frozen(offsets), num_mb, num_ro)


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

    Raises
    ------
    PlanTypeError
        For inputs of the wrong type.
    PlanError
        For malformed inputs, fewer rollouts than one step, a step with fewer samples than
        ranks, or a micro-batch count that cannot be aligned to the ranks.
    """
    size = check_dp_size(dp_size)
    if not isinstance(config, ScheduleConfig):
        msg = f"`config` must be a ScheduleConfig, got {type(config).__name__}"
        raise PlanTypeError(msg)
    lengths = check_lengths(total_lengths)
    ids = check_rollout_ids(rollout_ids, lengths.size)
    _check_weights_use(weights, config)
    checked = None if weights is None else check_weights(weights, lengths.size)
    grouped, bounds = _group_rollouts(ids)
    counts = _step_counts(bounds, size, config)
    starts = np.cumsum([0, *counts]).tolist()
    for step, count in enumerate(counts):
        n = int(bounds[starts[step + 1]] - bounds[starts[step]])
        _check_step(step, n, count, size, config)
    builders = [_RankBuilder() for _ in range(size)]
    num_mb = _plan_steps(lengths, checked, grouped, bounds, starts, size, config, builders)
    dropped = np.sort(grouped[int(bounds[starts[-1]]) :])
    ranks = tuple(b.build(r, num_mb, tuple(counts)) for r, b in enumerate(builders))
    digest = _digest(lengths, ids, size, config, checked)
    return Schedule(size, ranks, num_mb, tuple(counts), _frozen(dropped), digest)


def _plan_steps(
    lengths: Int64Array,
    weights: npt.NDArray[Any] | None,
    grouped: Int64Array,
    bounds: Int64Array,
    starts: list[int],
    dp_size: int,
    config: ScheduleConfig,
    builders: list[_RankBuilder],
) -> tuple[int, ...]:
    """Pack and distribute every step into `builders`; return the micro-batches per rank."""
    align = dp_size * config.micro_batch_group
    exact = weights is None or bool(np.issubdtype(weights.dtype, np.integer))
    balanced = config.balance_data or config.balance_by_flops
    num_mb = []
    for step in range(len(starts) - 1):
        step_rows = grouped[int(bounds[starts[step]]) : int(bounds[starts[step + 1]])]
        step_lengths = lengths[step_rows]
        workloads = None if weights is None else weights[step_rows].tolist()
        bins = pack_step(step, step_lengths, workloads, align, config, exact=exact)
        num_mb.append(len(bins) // dp_size)
        source = step_lengths.tolist() if workloads is None else workloads
        for rank, bin_ids in enumerate(_distribute(bins, source, exact, dp_size, balanced)):
            builders[rank].add(step_rows, bins, bin_ids)
    return tuple(num_mb)


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
    rank = check_dp_rank(dp_rank, dp_size)
    schedule = plan_schedule(total_lengths, rollout_ids, dp_size, config, weights=weights)
    return schedule.ranks[rank]
