"""The balanced plan: Karmarkar-Karp largest differencing into equal-size parts, computed fast.

How it is computed fast. Sets are compared by their sum, then their number of rows,
then their ``(row, length)`` lists in insertion order. Row numbers are distinct and every set
starts with exactly one row, which a merged set keeps in front; so the list comparison is decided
by the first row alone, and a set is ordered by the exact integer key ``(sum, count, first_row)``.
All sets of a state have the same count, so inside a state ``(sum, first_row)`` suffices, and a
state is ordered by ``(spread, key of its first set)``. A set is therefore never stored as a list
of rows: a state holds only its set sums and first rows, each merge records which first row was
absorbed by which, and the rank of every row is resolved at the end by following these parent
links with vectorised pointer jumping. Small ``dp_size`` (many states of few sets) merges with
Python tuples, large ``dp_size`` with numpy arrays; both equal ``tests/reference_plan.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from operator import add
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = ["balanced_plan"]

Int64Array = npt.NDArray[np.int64]

# (-spread, -sum of first set, -count, -first row of first set, state index): heapq pops the
# smallest tuple, i.e. the largest spread, then the state whose first set compares larger.
# First rows are distinct, so the state index is never reached by a comparison.
_Key = tuple[int, int, int, int, int]

_INT64_MAX = int(np.iinfo(np.int64).max)
# At and above this many sets per state, a merge sorts numpy arrays instead of Python tuples.
_ARRAY_MERGE_MIN_SETS = 10


def _rows_ordered_by(keys: Int64Array) -> Int64Array:
    """Return the rows sorted ascending by ``(keys[row], row)``."""
    n = keys.size
    rows = np.arange(n, dtype=np.int64)
    if n and int(keys.max()) <= (_INT64_MAX - n) // n:
        # One packed int64 per row sorts faster than a stable argsort and gives the same order.
        packed = np.sort(keys * n + rows)
        return np.asarray(packed % n, dtype=np.int64)
    return np.asarray(np.argsort(keys, kind="stable"), dtype=np.int64)


class _States(Protocol):
    """The sets of every state, known by their sums and first rows, and who absorbed whom."""

    def merge(self, first: int, second: int) -> _Key:
        """Merge state `second` into state `first`; return the queue key of the result."""

    def first_rows(self, state: int) -> Int64Array:
        """Return the first row of each set of `state`, largest set first."""

    def parents(self) -> Int64Array:
        """Return, for each row, the first row of the set that absorbed its set (or itself)."""


class _TupleStates:
    """States as Python tuples: cheapest per merge when each state has only a few sets."""

    def __init__(self, sums: Int64Array, rows: Int64Array) -> None:
        self.n = sums.size
        self.sums: list[Sequence[int]] = sums.tolist()
        self.rows: list[Sequence[int]] = rows.tolist()
        self.counts = [1] * len(self.sums)
        self.children: list[int] = []
        self.adopters: list[int] = []

    def merge(self, first: int, second: int) -> _Key:
        rows_first = self.rows[first]
        self.children.extend(self.rows[second])
        self.adopters.extend(rows_first[::-1])
        merged = zip(map(add, self.sums[first], self.sums[second][::-1]), rows_first, strict=True)
        sums, rows = zip(*sorted(merged, reverse=True), strict=True)
        self.sums[first], self.rows[first] = sums, rows
        count = self.counts[first] + self.counts[second]
        self.counts[first] = count
        return (sums[-1] - sums[0], -sums[0], -count, -rows[0], first)

    def first_rows(self, state: int) -> Int64Array:
        return np.array(self.rows[state], dtype=np.int64)

    def parents(self) -> Int64Array:
        parents = np.arange(self.n, dtype=np.int64)
        parents[np.array(self.children, dtype=np.int64)] = self.adopters
        return parents


class _ArrayStates:
    """States as rows of two int64 matrices: cheapest per merge when each state has many sets."""

    def __init__(self, sums: Int64Array, rows: Int64Array) -> None:
        self.sums = sums  # taken over, not copied: the caller passes fresh arrays
        self.rows = rows
        self.counts = [1] * sums.shape[0]
        self.parent_rows = np.arange(sums.size, dtype=np.int64)

    def merge(self, first: int, second: int) -> _Key:
        rows_first = self.rows[first]
        self.parent_rows[self.rows[second]] = rows_first[::-1]
        sums = self.sums[first] + self.sums[second, ::-1]
        order = np.lexsort((rows_first, sums))[::-1]
        sums, rows = sums[order], rows_first[order]
        self.sums[first], self.rows[first] = sums, rows
        count = self.counts[first] + self.counts[second]
        self.counts[first] = count
        top = int(sums[0])
        return (int(sums[-1]) - top, -top, -count, -int(rows[0]), first)

    def first_rows(self, state: int) -> Int64Array:
        return np.array(self.rows[state], dtype=np.int64)

    def parents(self) -> Int64Array:
        return self.parent_rows


def _merge_all(keys: list[_Key], states: _States) -> int:
    """Run the largest-differencing loop over the queue `keys`; return the last state's index.

    The state made by the latest merge is held outside the heap, because it is often the next
    one popped; it is pushed only when a heap state comes before it.
    """
    heapq.heapify(keys)
    held = heapq.heappop(keys)
    while keys:
        if held < keys[0]:
            first, second = held, heapq.heappop(keys)
        else:
            first = heapq.heappop(keys)
            second = heapq.heapreplace(keys, held) if keys and keys[0] < held else held
        held = states.merge(first[-1], second[-1])
    return held[-1]


def _resolve_roots(parents: Int64Array) -> Int64Array:
    """Follow parent links until every row points at its root (vectorised pointer jumping)."""
    while True:
        grandparents = parents[parents]
        if np.array_equal(grandparents, parents):
            return parents
        parents = grandparents


def balanced_plan(lengths: Int64Array, dp_size: int) -> list[Int64Array]:
    """Return the balanced plan of `lengths` (validated; a positive multiple of `dp_size`)."""
    n = lengths.size
    # State s starts with the rows at sorted positions s*k .. s*k+k-1, heaviest set first.
    rows = _rows_ordered_by(lengths).reshape(-1, dp_size)[:, ::-1].copy()
    sums = lengths[rows]
    spreads, tops = (sums[:, 0] - sums[:, -1]).tolist(), sums[:, 0].tolist()
    firsts = rows[:, 0].tolist()
    keys = [
        (-spread, -top, -1, -first, state)
        for state, (spread, top, first) in enumerate(zip(spreads, tops, firsts, strict=True))
    ]
    states: _States
    if dp_size >= _ARRAY_MERGE_MIN_SETS:
        states = _ArrayStates(sums, rows)
    else:
        states = _TupleStates(sums, rows)
    last = _merge_all(keys, states)
    rank_of_root = np.zeros(n, dtype=np.int64)
    rank_of_root[states.first_rows(last)] = np.arange(dp_size, dtype=np.int64)
    ranks = rank_of_root[_resolve_roots(states.parents())]
    grouped = _rows_ordered_by(ranks).reshape(dp_size, n // dp_size)
    return [part.copy() for part in grouped]
