"""A plain-Python reference of the rollout-side micro-batch schedule, written for reading.

This is the baseline that ``arrow_split._schedule`` is tested against. It states the schedule
step by step with Python lists, loops and ``heapq``; no numpy and no shortcuts:

1. group the samples by rollout id, rollouts in order of first appearance, each rollout's samples
   in row order;
2. cut the rollouts into steps of ``global_batch_size``; the trailing rollouts that do not fill a
   step are dropped, unless partial steps are allowed (dynamic batch size only) and they hold at
   least ``dp_size`` samples, in which case they form one smaller last step;
3. pack each step into micro-batches: fixed chunks of ``micro_batch_size`` samples, or (dynamic)
   first-fit decreasing under ``max_tokens_per_gpu * cp_size`` tokens, or (FLOPs balance)
   unequal-size Karmarkar-Karp on the weights into ``ceil(tokens / budget)`` micro-batches;
4. (dynamic) split the heaviest multi-sample micro-batch into two token-balanced halves until the
   count is a multiple of ``dp_size`` (times the micro-batch group under virtual pipelining);
5. hand the micro-batches to ranks: strided, or equal-size Karmarkar-Karp on their token (or
   weight) sums; each rank appends its micro-batches' rows in order.

Every failure the schedule cannot get past raises ``ValueError``.
"""

from __future__ import annotations

import heapq
from typing import Any

__all__ = ["reference_karmarkar_karp", "reference_schedule"]


class _Set:
    """A set of ``(index, value)`` items and their sum, added one item at a time."""

    def __init__(self) -> None:
        self.sum: Any = 0
        self.items: list[tuple[int, Any]] = []

    def add(self, index: int, value: Any) -> None:
        self.items.append((index, value))
        self.sum += value

    def absorb(self, other: _Set) -> None:
        for index, value in other.items:
            self.add(index, value)

    def key(self) -> tuple[Any, int, list[tuple[int, Any]]]:
        return (self.sum, len(self.items), self.items)

    def __lt__(self, other: _Set) -> bool:
        return self.key() < other.key()

    def __gt__(self, other: _Set) -> bool:
        return self.key() > other.key()


class _State:
    """``k`` sets in descending order; the queue pops the largest spread first."""

    def __init__(self, items: list[tuple[int, Any]], k: int) -> None:
        self.k = k
        self.sets = [_Set() for _ in range(k)]
        for position, (index, value) in enumerate(items):
            self.sets[position].add(index, value)
        self.sets.sort(reverse=True)

    @property
    def spread(self) -> Any:
        return self.sets[0].sum - self.sets[-1].sum

    def merge(self, other: _State) -> None:
        for i in range(self.k):
            self.sets[i].absorb(other.sets[self.k - 1 - i])
        self.sets.sort(reverse=True)

    def __lt__(self, other: _State) -> bool:
        if self.spread != other.spread:
            return bool(self.spread > other.spread)
        return self.sets[0] > other.sets[0]


def reference_karmarkar_karp(values: list[Any], k: int, equal_size: bool) -> list[list[int]]:
    """Return ``k`` partitions of ``range(len(values))``, each sorted, in the final set order."""
    if len(values) < k:
        raise ValueError(f"{len(values)} items < {k} partitions")
    ordered = sorted((value, index) for index, value in enumerate(values))
    heap: list[_State] = []
    if equal_size:
        if len(values) % k:
            raise ValueError(f"{len(values)} items not a multiple of {k}")
        for start in range(0, len(ordered), k):
            run = [(index, value) for value, index in ordered[start : start + k]]
            heapq.heappush(heap, _State(run, k))
    else:
        for value, index in ordered:
            heapq.heappush(heap, _State([(index, value)], k))
    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, first)
    partitions = [[index for index, _ in one_set.items] for one_set in heap[0].sets]
    if any(not partition for partition in partitions):
        raise ValueError("an empty partition")
    return [sorted(partition) for partition in partitions]


def _first_fit_decreasing(lengths: list[int], budget: int) -> list[list[int]]:
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    bins: list[list[int]] = []
    sums: list[int] = []
    for index in order:
        for j in range(len(bins)):
            if sums[j] + lengths[index] <= budget:
                bins[j].append(index)
                sums[j] += lengths[index]
                break
        else:
            bins.append([index])
            sums.append(lengths[index])
    return bins


def _split_in_two(one_bin: list[int], lengths: list[int]) -> list[list[int]]:
    halves: list[list[int]] = [[], []]
    sums = [0, 0]
    for index in sorted(one_bin, key=lambda i: -lengths[i]):
        half = 0 if sums[0] <= sums[1] else 1
        halves[half].append(index)
        sums[half] += lengths[index]
    return halves


def _expand(bins: list[list[int]], target: int, lengths: list[int]) -> None:
    while len(bins) < target:
        candidates = [
            (sum(lengths[i] for i in one_bin), j)
            for j, one_bin in enumerate(bins)
            if len(one_bin) > 1
        ]
        if not candidates:
            return
        _, j = max(candidates)
        left, right = _split_in_two(bins[j], lengths)
        bins[j] = left
        bins.append(right)


def _steps(rollout_ids: list[int], dp_size: int, config: Any) -> tuple[list[list[int]], list[int]]:
    """Return each step's sample rows (grouped by rollout) and each step's rollout count."""
    groups: dict[int, list[int]] = {}
    for row, rollout in enumerate(rollout_ids):
        groups.setdefault(rollout, []).append(row)
    order = list(groups)
    gbs = config.global_batch_size
    full = len(order) // gbs
    if full < 1:
        raise ValueError(f"{len(order)} rollouts < global_batch_size {gbs}")
    counts = [gbs] * full
    leftover = len(order) - full * gbs
    partial = config.allow_partial_train_step and config.use_dynamic_batch_size
    if leftover and partial and sum(len(groups[r]) for r in order[-leftover:]) >= dp_size:
        counts.append(leftover)
    steps = []
    start = 0
    for count in counts:
        steps.append([row for r in order[start : start + count] for row in groups[r]])
        start += count
    return steps, counts


def _pack(
    lengths: list[int], workloads: list[Any] | None, align: int, config: Any
) -> list[list[int]]:
    if not config.use_dynamic_batch_size:
        size = config.micro_batch_size
        bins = [list(range(i, min(i + size, len(lengths)))) for i in range(0, len(lengths), size)]
        if len(bins) % align:
            raise ValueError(f"static path: {len(bins)} micro-batches, not a multiple of {align}")
        return bins
    budget = config.max_tokens_per_gpu * config.cp_size
    if workloads is not None:
        count = max(1, (sum(lengths) + budget - 1) // budget)
        if count >= len(lengths):
            bins = [[i] for i in range(len(lengths))]
        else:
            bins = reference_karmarkar_karp(workloads, count, equal_size=False)
    else:
        bins = _first_fit_decreasing(lengths, budget)
    target = max((len(bins) + align - 1) // align * align, align)
    _expand(bins, target, lengths)
    if len(bins) != target:
        raise ValueError(f"dynamic path: {len(bins)} micro-batches, need {target}")
    return bins


def reference_schedule(
    total_lengths: list[int],
    rollout_ids: list[int],
    dp_size: int,
    config: Any,
    weights: list[Any] | None = None,
) -> tuple[list[list[int]], list[list[list[int]]], list[int], list[int]]:
    """Return ``(partitions, micro_batch_indices, num_microbatches, num_rollouts)``.

    `config` is anything with the attributes of ``arrow_split._schedule.ScheduleConfig``;
    `weights` (per sample) are used, and required, when ``config.balance_by_flops`` is set.
    """
    vpp = config.vpp_size or 1
    align = dp_size * (config.microbatch_group_size_per_vp_stage if vpp > 1 else 1)
    steps, counts = _steps(rollout_ids, dp_size, config)
    partitions: list[list[int]] = [[] for _ in range(dp_size)]
    micro_batch_indices: list[list[list[int]]] = [[] for _ in range(dp_size)]
    num_microbatches = []
    for rows in steps:
        if len(rows) < dp_size:
            raise ValueError(f"a step of {len(rows)} samples < dp_size {dp_size}")
        lengths = [total_lengths[row] for row in rows]
        workloads = [weights[row] for row in rows] if config.balance_by_flops else None
        bins = _pack(lengths, workloads, align, config)
        num_microbatches.append(len(bins) // dp_size)
        if config.balance_data or config.balance_by_flops:
            source = workloads if workloads is not None else lengths
            sums = [sum(source[i] for i in one_bin) for one_bin in bins]
            ranks = reference_karmarkar_karp(sums, dp_size, equal_size=True)
        else:
            ranks = [list(range(rank, len(bins), dp_size)) for rank in range(dp_size)]
        for rank, bin_ids in enumerate(ranks):
            for j in bin_ids:
                start = len(partitions[rank])
                partitions[rank].extend(rows[i] for i in bins[j])
                micro_batch_indices[rank].append(list(range(start, start + len(bins[j]))))
    return partitions, micro_batch_indices, num_microbatches, counts
