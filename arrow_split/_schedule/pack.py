"""One step's samples packed into micro-batches, their count aligned to the ranks.

Three ways to pack, as miles' rollout-side schedule packs:

fixed chunks (``use_dynamic_batch_size=False``)
    Samples ``0 .. micro_batch_size - 1``, then the next ``micro_batch_size``, and so on; the
    count must already be a multiple of the alignment.
first-fit decreasing (``use_dynamic_batch_size=True``)
    Samples by length descending (ties by position), each into the first micro-batch whose
    token sum stays within the budget, else into a new one; a sample over the budget gets its
    own micro-batch.
by weight (``balance_by_flops=True``)
    ``ceil(tokens / budget)`` micro-batches (at least one) made by unequal-size Karmarkar-Karp on
    the weights; one sample each if there would be as many as samples.

A dynamic packing is then aligned: while there are fewer micro-batches than the next multiple of
the alignment (at least one multiple), the one with the most tokens among those holding two or
more samples (ties: the later one) is split in two by tokens, longest sample first, each into
the lighter half (the first on ties); the second half becomes the last micro-batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arrow_split._args import Int64Array
from arrow_split._karmarkar_karp import kk_partitions
from arrow_split._schedule.config import ScheduleConfig
from arrow_split.errors import PlanError

__all__ = ["expand_by_splitting", "first_fit_decreasing", "pack_step"]

_INT64_MAX = int(np.iinfo(np.int64).max)


def first_fit_decreasing(lengths: Int64Array, budget: int) -> list[list[int]]:
    """Return first-fit-decreasing bins of positions into `lengths`, each in insertion order."""
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


def expand_by_splitting(bins: list[list[int]], target: int, lengths: list[int]) -> None:
    """Split the heaviest multi-sample bins of `bins`, in place, until there are `target`.

    Stops early when every bin holds one sample. A bin of zero-token samples splits into itself
    and an empty bin, as the reference does; the caller decides what to do with that.
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
    parts = kk_partitions(workloads, count, equal_size=False, exact=exact)
    return [sorted(part) for part in parts]


def _alignment_error(step: int, n: int, count: int, target: int, align: int) -> PlanError:
    msg = (
        f"step {step}: {n} samples in {count} micro-batches cannot be split into {target}, "
        f"the next multiple of {align} (`dp_size` times the micro-batch group); each "
        "micro-batch needs a sample: raise `global_batch_size`, or lower `dp_size` or "
        "`microbatch_group_size_per_vp_stage`"
    )
    return PlanError(msg)


def pack_step(
    step: int,
    lengths: Int64Array,
    workloads: list[Any] | None,
    align: int,
    config: ScheduleConfig,
    *,
    exact: bool,
) -> list[list[int]]:
    """Return step `step`'s micro-batches as lists of positions into its samples.

    `workloads` are the step's weights (Python numbers) when ``config.balance_by_flops`` is set,
    ints if `exact`, else floats.
    The count is a multiple of `align`; every micro-batch holds at least one sample.

    Raises
    ------
    PlanError
        If the count cannot be aligned (too few samples), or aligning it would leave an empty
        micro-batch (the only micro-batches left to split hold zero-token samples).
    """
    budget = config.max_tokens_per_micro_batch
    if budget is None:
        size = config.micro_batch_size
        return [list(range(i, min(i + size, lengths.size))) for i in range(0, lengths.size, size)]
    values = lengths.tolist()
    if workloads is not None:
        bins = _pack_by_weight(values, workloads, budget, exact)
    else:
        bins = first_fit_decreasing(lengths, budget)
    packed = len(bins)
    target = max(-(-packed // align) * align, align)
    expand_by_splitting(bins, target, values)
    if len(bins) != target:
        raise _alignment_error(step, lengths.size, packed, target, align)
    if not all(bins):
        msg = (
            f"step {step}: splitting micro-batches to reach {target} would leave an empty one: "
            "the only micro-batches left to split hold zero-token samples; give every sample "
            "at least one token"
        )
        raise PlanError(msg)
    return bins
