"""Partition plans: which rows of a batch go to which data-parallel rank. Pure numpy.

A :class:`Plan` holds one read-only int64 index array per rank and a fingerprint of its inputs,
so that ranks check in O(1) that they hold parts of one plan. ``"strided"``: rank ``r`` gets rows
``r, r + dp_size, ...``; ``"balanced"``: equal-size Karmarkar-Karp parts of close token totals.
``order_by`` (adapter slots) then sorts each rank's rows stably.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from arrow_split._args import (
    Int64Array,
    SplitMethod,
    check_dp_rank,
    check_dp_size,
    check_lengths,
    check_order_by,
    method_of,
)
from arrow_split.errors import PlanError
from arrow_split.plan._karmarkar_karp import balanced_plan

__all__ = [
    "Plan",
    "PlanKey",
    "partition_for_rank",
    "plan_fingerprint",
    "plan_partitions",
]


def _count(number: int, noun: str) -> str:
    """``1 sample``, ``2 samples``: a count and its noun, in the right number."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _check_balanced(n: int, dp_size: int) -> None:
    """Raise unless `n` samples split into `dp_size` non-empty parts of equal size."""
    if n < dp_size:
        msg = (
            f"balanced partitioning needs at least `dp_size` ({dp_size}) samples, got {n}; "
            f"pad the batch with {_count(dp_size - n, 'sample')} (`pad_to_dp=True` does it) or "
            "use `balance_data=False`"
        )
        raise PlanError(msg, key="dp_size", expected=f"at least {dp_size} samples", got=str(n))
    if n % dp_size:
        msg = (
            f"balanced partitioning needs a multiple of `dp_size` ({dp_size}) samples, got {n}; "
            f"drop {_count(n % dp_size, 'sample')} or pad with {dp_size - n % dp_size} "
            "(`pad_to_dp=True` does it), or use `balance_data=False`"
        )
        raise PlanError(msg, key="dp_size", expected=f"a multiple of {dp_size} samples", got=str(n))


def _ordered(rows: Int64Array, keys: Int64Array | None) -> Int64Array:
    """``rows`` sorted stably by ``keys[rows]`` (unchanged without keys)."""
    if keys is None:
        return rows
    return np.ascontiguousarray(rows[np.argsort(keys[rows], kind="stable")])


def _partitions(
    dp_size: int, method: SplitMethod, lengths: Int64Array, keys: Int64Array | None
) -> list[Int64Array]:
    """Every rank's rows, from checked inputs."""
    n = lengths.size
    if method == "strided" or dp_size == 1:  # one rank: every row, in order, either way
        return [
            _ordered(np.arange(rank, n, dp_size, dtype=np.int64), keys) for rank in range(dp_size)
        ]
    return [_ordered(rows, keys) for rows in balanced_plan(lengths, dp_size)]


def _fingerprint(
    dp_size: int, method: SplitMethod, lengths: Int64Array, keys: Int64Array | None
) -> str:
    """16 hex digits of BLAKE2b over checked inputs (see :func:`plan_fingerprint`)."""
    name = method.encode("ascii")
    digest = hashlib.blake2b(digest_size=8, person=b"arrow_split.plan")
    digest.update(struct.pack("<qqB", lengths.size, dp_size, len(name)))
    digest.update(name)
    digest.update(np.ascontiguousarray(lengths, dtype="<i8").data)
    if keys is not None:
        digest.update(b"order_by")
        digest.update(np.ascontiguousarray(keys, dtype="<i8").data)
    return digest.hexdigest()


def _checked(
    total_lengths: npt.ArrayLike,
    size: int,
    balance_data: object,
    order_by: npt.ArrayLike | None,
) -> tuple[Int64Array, int, SplitMethod, Int64Array | None]:
    """The other inputs of a plan of parsed ``size``, parsed once: lengths, method, sort keys."""
    method = method_of(balance_data)
    lengths = check_lengths(total_lengths)
    return lengths, size, method, check_order_by(order_by, lengths.size)


@dataclasses.dataclass(frozen=True, slots=True)
class PlanKey:
    """What identifies a plan without its rows; a shard carries it to check its plan in O(1)."""

    method: SplitMethod
    dp_size: int
    fingerprint: str


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """Which rows go to which rank: a value that can travel with the data.

    ``partitions[r]`` holds rank ``r``'s rows (int64, read-only); every row is in exactly one.
    Two plans are equal when their fingerprints and rows are.
    """

    method: SplitMethod
    dp_size: int
    num_samples: int
    fingerprint: str
    partitions: tuple[Int64Array, ...]

    @classmethod
    def build(
        cls,
        total_lengths: npt.ArrayLike,
        dp_size: int,
        *,
        balance_data: bool,
        order_by: npt.ArrayLike | None = None,
    ) -> Plan:
        """Plan ``total_lengths`` for ``dp_size`` ranks; every input is checked once, here.

        Parameters
        ----------
        total_lengths
            Token count of every sample: non-negative ints, one per sample.
        dp_size
            Number of data-parallel ranks, an int in ``[1, MAX_DP_SIZE]``.
        balance_data
            ``True`` for the balanced plan, ``False`` for the strided plan.
        order_by
            Optional: one integer per sample (adapter slots) each rank's rows are sorted by.

        Raises
        ------
        PlanTypeError
            For inputs of the wrong type (``bool`` or float ``dp_size``, float lengths...).
        PlanError
            Bad inputs, or a balanced plan of fewer samples than `dp_size` or not a multiple.
        """
        return cls._make(*_checked(total_lengths, check_dp_size(dp_size), balance_data, order_by))

    @classmethod
    def _make(
        cls, lengths: Int64Array, dp_size: int, method: SplitMethod, keys: Int64Array | None
    ) -> Plan:
        """The plan of parsed inputs (1-D int64 lengths and keys, ``dp_size`` in range)."""
        if method == "balanced":
            _check_balanced(lengths.size, dp_size)
        partitions = _partitions(dp_size, method, lengths, keys)
        for rows in partitions:
            rows.flags.writeable = False
        fingerprint = _fingerprint(dp_size, method, lengths, keys)
        return cls(method, dp_size, lengths.size, fingerprint, tuple(partitions))

    @classmethod
    def strided(
        cls, total_lengths: npt.ArrayLike, dp_size: int, *, order_by: npt.ArrayLike | None = None
    ) -> Plan:
        """The strided plan: rank ``r`` gets rows ``r, r + dp_size, ...`` (see :meth:`build`)."""
        return cls.build(total_lengths, dp_size, balance_data=False, order_by=order_by)

    @classmethod
    def balanced(
        cls, total_lengths: npt.ArrayLike, dp_size: int, *, order_by: npt.ArrayLike | None = None
    ) -> Plan:
        """The balanced (Karmarkar-Karp, equal-size) plan (see :meth:`build`)."""
        return cls.build(total_lengths, dp_size, balance_data=True, order_by=order_by)

    @property
    def key(self) -> PlanKey:
        """The plan's :class:`PlanKey`."""
        return PlanKey(self.method, self.dp_size, self.fingerprint)

    def rows(self, dp_rank: int) -> Int64Array:
        """Rank ``dp_rank``'s rows (read-only)."""
        return self.partitions[check_dp_rank(dp_rank, self.dp_size)]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return self.key == other.key and all(
            np.array_equal(mine, theirs)
            for mine, theirs in zip(self.partitions, other.partitions, strict=True)
        )

    def __hash__(self) -> int:
        return hash(self.key)

    def __reduce__(self) -> tuple[Any, ...]:
        # One array of every rank's rows and one of their counts: two buffers in a pickle (an
        # object store's get wraps each buffer), not one per rank.
        rows = np.concatenate(self.partitions) if self.partitions else np.zeros(0, np.int64)
        sizes = np.array([len(part) for part in self.partitions], dtype=np.int64)
        key = (self.method, self.dp_size, self.num_samples, self.fingerprint)
        return (_rebuild_plan, (*key, rows, sizes))

    def __repr__(self) -> str:
        sizes = [len(rows) for rows in self.partitions]
        shown = sizes if len(sizes) <= 8 else [*sizes[:8], "..."]
        return (
            f"Plan(method={self.method!r}, dp_size={self.dp_size}, "
            f"num_samples={self.num_samples}, fingerprint={self.fingerprint!r}, rows={shown})"
        )


def plan_partitions(
    total_lengths: npt.ArrayLike,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> list[Int64Array]:
    """Every rank's rows: ``Plan.build(...).partitions`` as writable copies (see there)."""
    plan = Plan.build(total_lengths, dp_size, balance_data=balance_data, order_by=order_by)
    return [rows.copy() for rows in plan.partitions]


def partition_for_rank(
    total_lengths: npt.ArrayLike,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> Int64Array:
    """One rank's rows: ``Plan.build(...).rows(dp_rank)`` as a writable copy (rank parsed first)."""
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    plan = Plan._make(*_checked(total_lengths, size, balance_data, order_by))
    return plan.partitions[rank].copy()


def plan_fingerprint(
    total_lengths: npt.ArrayLike,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> str:
    """``Plan.build(...).fingerprint`` without computing the rows: 16 hex digits.

    BLAKE2b of the sample count, `dp_size`, the method and the lengths (and ``order_by`` keys) as
    little-endian int64: equal inputs give equal digests on every platform and in every process.
    """
    size = check_dp_size(dp_size)
    lengths, _, method, keys = _checked(total_lengths, size, balance_data, order_by)
    if method == "balanced":
        _check_balanced(lengths.size, size)
    return _fingerprint(size, method, lengths, keys)


def _rebuild_plan(
    method: SplitMethod,
    dp_size: int,
    num_samples: int,
    fingerprint: str,
    rows: Int64Array,
    sizes: Int64Array,
) -> Plan:
    """A pickled plan: each rank's rows a read-only view of the one array of every rank's."""
    flat = np.array(rows, dtype=np.int64, copy=True)  # private: a shard never pins the store
    flat.flags.writeable = False
    bounds = list(itertools.accumulate(sizes.tolist(), initial=0))  # no numpy ufunc: a get's cost
    parts = tuple(flat[start:stop] for start, stop in itertools.pairwise(bounds))
    return Plan(method, dp_size, num_samples, fingerprint, parts)
