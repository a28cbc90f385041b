"""Packing a schedule's steps into micro-batches and dealing them to ranks, as miles does.

First-fit decreasing under a token budget (or Karmarkar-Karp by workloads), bins split until
every rank gets as many, then dealt strided or balanced; rollouts grouped in first-seen order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arrow_split._args import INT64_MAX, Int64Array
from arrow_split.errors import PlanError
from arrow_split.plan._karmarkar_karp import kk_partitions, sorted_parts

__all__ = ["distribute", "group_rollouts", "pack_step"]


def group_rollouts(rollout_ids: Int64Array) -> tuple[Int64Array, Int64Array]:
    """The rows grouped by rollout (first-appearance order) and the group boundaries."""
    _, first, inverse = np.unique(rollout_ids, return_index=True, return_inverse=True)
    ordinal_of = np.argsort(np.argsort(first))  # each rollout's rank by first appearance
    ordinals = ordinal_of[inverse.reshape(-1)]
    rows = np.argsort(ordinals, kind="stable").astype(np.int64)
    bounds = np.zeros(first.size + 1, dtype=np.int64)
    np.cumsum(np.bincount(ordinals, minlength=first.size), out=bounds[1:])
    return rows, bounds


def _first_fit_decreasing(lengths: Int64Array, budget: int) -> list[list[int]]:
    """Longest first (ties by position), each into the first bin that stays within `budget`."""
    n = lengths.size
    order = np.argsort(-lengths, kind="stable")
    loads = np.zeros(max(n, 1), dtype=np.int64)
    bin_of = np.empty(n, dtype=np.int64)
    budget = min(budget, INT64_MAX)
    count = 0
    for position, length in enumerate(lengths[order].tolist()):
        fits = np.flatnonzero(loads[:count] <= budget - length)
        target = int(fits[0]) if fits.size else count
        loads[target] += length
        bin_of[position] = target
        count += target == count
    grouped = order[np.argsort(bin_of, kind="stable")]
    bounds = np.cumsum(np.bincount(bin_of, minlength=count))[:-1]
    return [chunk.tolist() for chunk in np.split(grouped, bounds)] if n else []


def _expand_by_splitting(bins: list[list[int]], target: int, lengths: list[int]) -> None:
    """Split the heaviest multi-sample bin (the later on ties) until `target` bins, or none."""
    sums = [sum(lengths[i] for i in one_bin) for one_bin in bins]
    while len(bins) < target:
        splittable = [j for j, one_bin in enumerate(bins) if len(one_bin) > 1]
        if not splittable:
            return
        best = max(reversed(splittable), key=sums.__getitem__)  # reversed: ties go to the later
        halves: tuple[list[int], list[int]] = ([], [])  # longest first, into the lighter half
        half_sums = [0, 0]
        for index in sorted(bins[best], key=lambda i: -lengths[i]):
            half = 0 if half_sums[0] <= half_sums[1] else 1
            halves[half].append(index)
            half_sums[half] += lengths[index]
        bins[best], sums[best] = halves[0], half_sums[0]
        bins.append(halves[1])
        sums.append(half_sums[1])


def pack_step(
    step: int,
    lengths: Int64Array,
    workloads: list[Any] | None,
    align: int,
    budget: int | None,
    size: int,
    exact: bool,
) -> list[list[int]]:
    """Step `step`'s micro-batches (positions into its samples), a multiple of `align` of them.

    In chunks of `size` samples, or packed under `budget` tokens (by `workloads` if given).
    """
    if budget is None:
        return [list(range(i, min(i + size, lengths.size))) for i in range(0, lengths.size, size)]
    values = lengths.tolist()
    count = max(1, -(-sum(values) // budget))
    if workloads is None:
        bins = _first_fit_decreasing(lengths, budget)
    elif count >= len(values):
        bins = [[i] for i in range(len(values))]
    else:  # weights >= 0 and fewer parts than samples: every part has samples
        parts = kk_partitions(workloads, count, equal_size=False, exact=exact)
        bins = [sorted(part) for part in parts]
    packed, target = len(bins), max(-(-len(bins) // align) * align, align)
    _expand_by_splitting(bins, target, values)
    if len(bins) != target:
        msg = (
            f"step {step}: {lengths.size} samples in {packed} micro-batches cannot be split "
            f"into {target}, the next multiple of {align} (`dp_size` times the micro-batch "
            "group); each micro-batch needs a sample: raise `global_batch_size`, or lower "
            "`dp_size` or `microbatch_group_size_per_vp_stage`"
        )
        raise PlanError(msg, key="global_batch_size", expected=f"{target} micro-batches")
    if not all(bins):
        msg = (
            f"step {step}: splitting micro-batches to reach {target} would leave an empty one: "
            "the only micro-batches left to split hold zero-token samples; give every sample "
            "at least one token"
        )
        raise PlanError(msg, key="total_lengths", expected=f"{target} micro-batches")
    return bins


def distribute(
    bins: list[list[int]], source: list[Any], exact: bool, dp_size: int, balanced: bool
) -> list[list[int]]:
    """The micro-batch ids of each rank, ascending."""
    if not balanced:
        return [list(range(rank, len(bins), dp_size)) for rank in range(dp_size)]
    sums = [sum(source[i] for i in one_bin) for one_bin in bins]
    return [part.tolist() for part in sorted_parts(sums, dp_size, equal_size=True, exact=exact)]
