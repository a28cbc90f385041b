"""Karmarkar-Karp largest differencing into `k` parts, of equal or of free sizes: the one KK.

verl's and miles' ``get_seqlen_balanced_partitions``, tie-breaks included (plain Python in
``tests/reference_plan.py``); a set compares by ``(sum, count, first index)``. :func:`kk_partitions`
runs it on lists (float sums added one item at a time, as the reference rounds);
:func:`balanced_plan`, the hot path (equal sizes of ints), keeps each state's set sums and first
rows only and resolves every row's part at the end by vectorised pointer jumping.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from operator import add, itemgetter
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._args import INT64_MAX, Int64Array, as_flag, check_positive_int, check_weights
from arrow_split.errors import PlanError

__all__ = [
    "balanced_plan",
    "karmarkar_karp",
    "kk_partitions",
    "sorted_parts",
]

# One set: [sum, count, first index, indices, values]. Values are kept only for float sums.
_Set = list[Any]
# Queue key: (-spread, -sum of first set, -count of first set, -first index of first set, state):
# heapq pops the largest spread first; distinct first rows end every comparison.
_Key = tuple[Any, Any, int, int, int]
_sort_key = itemgetter(0, 1, 2)  # a set's (sum, count, first index)


def _absorb(target: _Set, source: _Set, exact: bool) -> None:
    """Append `source`'s items to `target`, adding the values one by one unless `exact`."""
    if exact:
        target[0] += source[0]
    else:
        target[0] = functools.reduce(add, source[4], target[0])
        target[4].extend(source[4])
    target[1] += source[1]
    target[3].extend(source[3])


def _key(sets: list[_Set], k: int, state: int) -> _Key:
    top = sets[0]
    bottom = sets[-1][0] if len(sets) == k else 0
    return (-(top[0] - bottom), -top[0], -top[1], -top[2], state)


def _merge(first: list[_Set], second: list[_Set], k: int, exact: bool) -> list[_Set]:
    """Return `first` with its set ``i`` having absorbed `second`'s set ``k - 1 - i``."""
    held = len(first)
    for j, one_set in enumerate(second):
        i = k - 1 - j
        if i < held:
            _absorb(first[i], one_set, exact)
        else:
            first.append(one_set)
    first.sort(key=_sort_key, reverse=True)
    return first


def _seed(values: list[Any], k: int, equal_size: bool, exact: bool) -> list[list[_Set]]:
    ordered = sorted(zip(values, range(len(values)), strict=True))
    width = k if equal_size else 1
    states = []
    for start in range(0, len(ordered), width):
        sets = [
            [value, 1, index, [index], [] if exact else [value]]
            for value, index in ordered[start : start + width]
        ]
        sets.sort(key=_sort_key, reverse=True)
        states.append(sets)
    return states


def kk_partitions(values: list[Any], k: int, *, equal_size: bool, exact: bool) -> list[list[int]]:
    """The `k` parts of checked `values` (ints with `exact`, else floats), in the final order."""
    states = _seed(values, k, equal_size, exact)
    heap = [_key(sets, k, state) for state, sets in enumerate(states)]
    heapq.heapify(heap)
    while len(heap) > 1:
        first = heapq.heappop(heap)[-1]
        second = heapq.heappop(heap)[-1]
        states[first] = _merge(states[first], states[second], k, exact)
        heapq.heappush(heap, _key(states[first], k, first))
    last = states[heap[0][-1]]
    return [one_set[3] for one_set in last] + [[] for _ in range(k - len(last))]


# At and above this many sets per state, a merge sorts numpy arrays instead of Python tuples.
_ARRAY_MERGE_MIN_SETS = 10


def _rows_ordered_by(keys: Int64Array) -> Int64Array:
    """Return the rows sorted ascending by ``(keys[row], row)``."""
    n = keys.size
    rows = np.arange(n, dtype=np.int64)
    if n and int(keys.max()) <= (INT64_MAX - n) // n:
        # One packed int64 per row sorts faster than a stable argsort and gives the same order.
        packed = np.sort(keys * n + rows)
        return np.asarray(packed % n, dtype=np.int64)
    return np.asarray(np.argsort(keys, kind="stable"), dtype=np.int64)


class _TupleStates:
    """States as tuples of set sums and first rows: cheapest when a state has few sets."""

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

    def parents(self) -> Int64Array:
        parents = np.arange(self.n, dtype=np.int64)
        parents[np.array(self.children, dtype=np.int64)] = self.adopters
        return parents


class _ArrayStates:
    """:class:`_TupleStates` as two int64 matrices: cheapest when each state has many sets."""

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

    def parents(self) -> Int64Array:
        return self.parent_rows


def _merge_all(keys: list[_Key], states: _TupleStates | _ArrayStates) -> int:
    """The last state's index; the latest merged state waits outside the heap (often next)."""
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
    many_sets = dp_size >= _ARRAY_MERGE_MIN_SETS
    states: _TupleStates | _ArrayStates = (_ArrayStates if many_sets else _TupleStates)(sums, rows)
    last = _merge_all(keys, states)
    rank_of_root = np.zeros(n, dtype=np.int64)
    rank_of_root[np.array(states.rows[last], dtype=np.int64)] = np.arange(dp_size, dtype=np.int64)
    ranks = rank_of_root[_resolve_roots(states.parents())]
    grouped = _rows_ordered_by(ranks).reshape(dp_size, n // dp_size)
    return [part.copy() for part in grouped]


def karmarkar_karp(weights: npt.ArrayLike, k: int, *, equal_size: bool) -> list[Int64Array]:
    """Split ``range(len(weights))`` into `k` parts with close weight sums.

    Parameters
    ----------
    weights
        One non-negative, finite number per item: ints (summed exactly) or floats.
    k
        Number of parts, a positive int no larger than the number of items.
    equal_size
        Whether every part gets ``len(weights) / k`` items (else only sums are balanced).

    Returns
    -------
    list of numpy.ndarray
        `k` sorted int64 arrays of indices, heaviest part first, as verl's KK returns them.

    Raises
    ------
    PlanTypeError
        For non-numeric weights or a `k` that is not an int.
    OptionTypeError
        An `equal_size` that is not a bool.
    PlanError
        Fewer items than `k`, a count not a multiple of `k` (`equal_size`), bad weights.
    """
    parts = check_positive_int("k", k)
    equal_size = as_flag("equal_size", equal_size)
    checked = check_weights(weights, None)
    n = checked.size
    if n < parts:
        msg = f"cannot split {n} items into `k`={parts} non-empty parts; pass `k` <= {n}"
        raise PlanError(msg, key="k", expected=f"<= {n}", got=str(parts))
    if equal_size and n % parts:
        msg = (
            f"`equal_size` needs a multiple of `k` ({parts}) items, got {n}; "
            f"drop {n % parts} item{'s' if n % parts != 1 else ''}, pad with {parts - n % parts}, "
            "or pass `equal_size=False`"
        )
        raise PlanError(msg, key="equal_size")
    exact = bool(np.issubdtype(checked.dtype, np.integer))
    return sorted_parts(checked.tolist(), parts, equal_size=equal_size, exact=exact)


def sorted_parts(values: list[Any], k: int, *, equal_size: bool, exact: bool) -> list[Int64Array]:
    """The `k` parts of checked `values` (as :func:`kk_partitions`), each sorted ascending."""
    if equal_size and exact and values and max(values) * len(values) <= INT64_MAX:
        return balanced_plan(np.asarray(values, dtype=np.int64), k)
    found = kk_partitions(values, k, equal_size=equal_size, exact=exact)
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in found]
