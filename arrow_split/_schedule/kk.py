"""Karmarkar-Karp largest differencing into `k` parts, of equal or of free sizes.

The same algorithm, tie-breaks included, as the ``get_seqlen_balanced_partitions`` that verl and
miles share:

1. sort the items ``(value, index)`` ascending;
2. seed the states: with ``equal_size``, each run of `k` consecutive sorted items is one state
   (item ``j`` of the run in set ``j``); without, each item is a state of one set holding it
   and ``k - 1`` empty sets. A state keeps its sets in descending order, where a set compares
   by its sum, then its number of items, then its list of ``(index, value)`` items;
3. a priority queue pops first the state with the largest spread (largest set sum minus smallest),
   on equal spreads the state whose first set compares larger;
4. pop A, pop B, let A's set ``i`` absorb B's set ``k - 1 - i`` item by item, re-sort A's sets,
   push A back; repeat until one state is left;
5. its sets, in order, are the parts, each returned sorted ascending.

How this module computes it. Indices are distinct, and a set keeps its first item in front when
it absorbs another, so the comparison of two non-empty item lists is decided by their first
index: a set is ordered by ``(sum, count, first index)``. With non-negative values an empty set
never compares above a non-empty one, so a state stores only its non-empty sets; the empty ones
are implied at the end, and a merge touches only the sets that hold items. Sums are accumulated
one item at a time, as the reference does, so float weights round the same way.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._schedule.config import Int64Array, check_positive_int, check_weights
from arrow_split.errors import PlanError, PlanTypeError

__all__ = ["karmarkar_karp", "kk_partitions"]

# One set: [sum, count, first index, indices, values]. Values are kept only for float sums.
_Set = list[Any]
# Queue key: (-spread, -sum of first set, -count of first set, -first index of first set, state).
_Key = tuple[Any, Any, int, int, int]


def _sort_key(one_set: _Set) -> tuple[Any, int, int]:
    return (one_set[0], one_set[1], one_set[2])


def _absorb(target: _Set, source: _Set, exact: bool) -> None:
    """Append `source`'s items to `target`, adding the values one by one unless `exact`."""
    if exact:
        target[0] += source[0]
    else:
        total = target[0]
        for value in source[4]:
            total += value
        target[0] = total
        target[4].extend(source[4])
    target[1] += source[1]
    target[3].extend(source[3])


def _key(sets: list[_Set], k: int, state: int) -> _Key:
    top = sets[0]
    bottom = sets[-1][0] if len(sets) == k else 0
    return (-(top[0] - bottom), -top[0], -top[1], -top[2], state)


def _merge(first: list[_Set], second: list[_Set], k: int, exact: bool) -> list[_Set]:
    """Return `first` with its set ``i`` having absorbed `second`'s set ``k - 1 - i``."""
    merged = first
    held = len(first)
    for j, one_set in enumerate(second):
        i = k - 1 - j
        if i < held:
            _absorb(first[i], one_set, exact)
        else:
            merged.append(one_set)
    merged.sort(key=_sort_key, reverse=True)
    return merged


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
    """Return the `k` parts of checked `values` in the algorithm's final order, unsorted.

    `values` are non-negative Python ints (`exact`: sums are added whole) or floats; there are at
    least `k` of them, a multiple of `k` with `equal_size`.
    """
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


def karmarkar_karp(weights: npt.ArrayLike, k: int, *, equal_size: bool) -> list[Int64Array]:
    """Split ``range(len(weights))`` into `k` parts with close weight sums.

    Parameters
    ----------
    weights
        One non-negative, finite number per item: ints (summed exactly) or floats.
    k
        Number of parts, a positive int no larger than the number of items.
    equal_size
        ``True``: every part gets ``len(weights) / k`` items (the count must be a multiple of
        `k`). ``False``: parts may differ in size; only their sums are balanced.

    Returns
    -------
    list of numpy.ndarray
        `k` int64 arrays of item indices, each sorted ascending, in the algorithm's order (the
        heaviest part first), exactly as ``get_seqlen_balanced_partitions`` returns them.

    Raises
    ------
    PlanTypeError
        For non-numeric weights or a `k` that is not an int.
    PlanError
        For fewer items than `k`, a count not divisible by `k` with `equal_size`, or negative
        or non-finite weights.
    """
    parts = check_positive_int("k", k)
    if not isinstance(equal_size, (bool, np.bool_)):
        msg = f"`equal_size` must be a bool, got {type(equal_size).__name__}"
        raise PlanTypeError(msg)
    checked = check_weights(weights, None)
    n = checked.size
    if n < parts:
        msg = f"cannot split {n} items into `k`={parts} non-empty parts; pass `k` <= {n}"
        raise PlanError(msg)
    if equal_size and n % parts:
        msg = (
            f"`equal_size` needs a multiple of `k` ({parts}) items, got {n}; "
            f"drop {n % parts} items, pad with {parts - n % parts}, or pass `equal_size=False`"
        )
        raise PlanError(msg)
    exact = bool(np.issubdtype(checked.dtype, np.integer))
    found = kk_partitions(checked.tolist(), parts, equal_size=equal_size, exact=exact)
    return [np.sort(np.asarray(part, dtype=np.int64)) for part in found]
