"""A plain-Python reference of the two partition plans, written for reading, not for speed.

This is the baseline that ``arrow_split.partition`` is tested and benchmarked against. It follows
the description of the plans word for word, with one small class per set and per state, Python
lists and ``heapq``; no numpy and no shortcuts.

Strided: rank ``r`` gets rows ``r, r + dp_size, r + 2 * dp_size, ...``.

Balanced (Karmarkar-Karp largest differencing, equal-size parts):

1. sort the items ``(length, row)`` ascending;
2. every run of ``dp_size`` consecutive sorted items seeds one state, item ``j`` of the run in
   set ``j``; a state keeps its sets in descending order, where sets compare by their sum, then
   their number of items, then their lists of ``(row, length)`` pairs in insertion order;
3. a priority queue pops first the state with the largest spread (largest set sum minus smallest
   set sum); on equal spreads, the state whose first set compares larger;
4. pop state A, pop state B, append B's set ``k - 1 - i`` to A's set ``i`` for every ``i``,
   re-sort A's sets and push A back; repeat until one state is left;
5. that state's sets, in order, are ranks ``0 .. dp_size - 1``, each sorted ascending.
"""

from __future__ import annotations

import heapq

__all__ = ["reference_partitions"]


class ReferenceSet:
    """A set of ``(row, length)`` items and their sum."""

    def __init__(self, row: int, length: int) -> None:
        self.items: list[tuple[int, int]] = [(row, length)]
        self.sum = length

    def absorb(self, other: ReferenceSet) -> None:
        self.items.extend(other.items)
        self.sum += other.sum

    def sort_key(self) -> tuple[int, int, list[tuple[int, int]]]:
        return (self.sum, len(self.items), self.items)

    def __lt__(self, other: ReferenceSet) -> bool:
        return self.sort_key() < other.sort_key()

    def __gt__(self, other: ReferenceSet) -> bool:
        return self.sort_key() > other.sort_key()


class ReferenceState:
    """``dp_size`` sets, always kept in descending order."""

    def __init__(self, run: list[tuple[int, int]]) -> None:
        self.sets = [ReferenceSet(row, length) for length, row in run]
        self.sets.sort(reverse=True)

    @property
    def spread(self) -> int:
        return self.sets[0].sum - self.sets[-1].sum

    def merge(self, other: ReferenceState) -> None:
        k = len(self.sets)
        for i in range(k):
            self.sets[i].absorb(other.sets[k - 1 - i])
        self.sets.sort(reverse=True)

    def __lt__(self, other: ReferenceState) -> bool:
        # heapq pops the smallest entry first, so "smaller" means "popped earlier":
        # the larger spread, then the larger first set.
        if self.spread != other.spread:
            return self.spread > other.spread
        return self.sets[0] > other.sets[0]


def _reference_balanced(lengths: list[int], dp_size: int) -> list[list[int]]:
    n = len(lengths)
    if n < dp_size or n % dp_size != 0:
        msg = f"balanced plan needs a positive multiple of {dp_size} samples, got {n}"
        raise ValueError(msg)
    items = sorted((length, row) for row, length in enumerate(lengths))
    heap = [ReferenceState(items[start : start + dp_size]) for start in range(0, n, dp_size)]
    heapq.heapify(heap)
    while len(heap) > 1:
        first = heapq.heappop(heap)
        second = heapq.heappop(heap)
        first.merge(second)
        heapq.heappush(heap, first)
    return [sorted(row for row, _ in one_set.items) for one_set in heap[0].sets]


def reference_partitions(lengths: list[int], dp_size: int, balance_data: bool) -> list[list[int]]:
    """Return the rows of each rank, ``dp_size`` lists, computed the slow and obvious way."""
    if dp_size < 1:
        msg = f"dp_size must be >= 1, got {dp_size}"
        raise ValueError(msg)
    if balance_data:
        return _reference_balanced(list(lengths), dp_size)
    return [list(range(rank, len(lengths), dp_size)) for rank in range(dp_size)]
