"""Partition plans: which rows of a batch go to which data-parallel rank.

Pure numpy and :mod:`hashlib`. A :class:`Plan` is a value: its method, ``dp_size``,
sample count, one int64 index array per rank, and a fingerprint of its inputs, so that ranks can
check in O(1) that they hold parts of the same plan. Two methods, named by :data:`SplitMethod`,
each placing every sample exactly where the frameworks in use today place it:

``"strided"`` (``balance_data=False``)
    Rank ``r`` gets rows ``r, r + dp_size, r + 2 * dp_size, ...``.

``"balanced"`` (``balance_data=True``)
    Karmarkar-Karp largest differencing into ``dp_size`` parts of equal size, so that every rank
    gets ``n / dp_size`` samples and the token totals of the ranks are close. Rows are sorted
    ascending by ``(length, row)``; each run of ``dp_size`` consecutive rows seeds a *state* of
    ``dp_size`` one-row *sets*. A state keeps its sets in descending order and a priority queue
    hands out first the state with the largest *spread* (largest set sum minus smallest). The two
    states popped first, A then B, are merged: A's set ``i`` absorbs B's set ``dp_size - 1 - i``
    (the heaviest set takes the lightest), A's sets are re-sorted and A goes back into the queue.
    When one state is left, its sets in order are ranks ``0 .. dp_size - 1``, each rank's rows
    in ascending order.

The balanced planner itself is :mod:`arrow_split._karmarkar_karp`.

Order within a rank. With ``order_by`` (the batch's adapter slots, for multi-LoRA training), each
rank's rows are then sorted stably by that key: rows with equal keys keep the plan's order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import Literal

import numpy as np
import numpy.typing as npt

from arrow_split._karmarkar_karp import balanced_plan
from arrow_split.errors import PlanError, PlanTypeError

__all__ = [
    "Plan",
    "PlanKey",
    "SplitMethod",
    "check_dp_rank",
    "check_dp_size",
    "check_lengths",
    "partition_for_rank",
    "plan_fingerprint",
    "plan_partitions",
]

SplitMethod = Literal["balanced", "strided"]

Int64Array = npt.NDArray[np.int64]


_INT64_MAX = int(np.iinfo(np.int64).max)
_MAX_DP_SIZE = 2**31 - 1  # ranks are numbered in int32 everywhere (torch.distributed too)
_FINGERPRINT_PERSON = b"arrow_split.plan"


def check_dp_size(dp_size: object) -> int:
    """Return `dp_size` as an int, or raise if it is not a positive int (``bool`` is refused)."""
    if isinstance(dp_size, bool) or not isinstance(dp_size, (int, np.integer)):
        kind = type(dp_size).__name__
        msg = f"`dp_size` must be a positive int, got {dp_size!r} of type {kind}"
        raise PlanTypeError(msg)
    if dp_size < 1:
        msg = f"`dp_size` must be a positive int, got {dp_size!r}"
        raise PlanError(msg)
    if dp_size > _MAX_DP_SIZE:
        msg = f"`dp_size` must be at most {_MAX_DP_SIZE}, got {dp_size!r}"
        raise PlanError(msg)
    return int(dp_size)


def check_dp_rank(dp_rank: object, dp_size: object) -> int:
    """Return `dp_rank` as an int, or raise if it is not an int in ``[0, dp_size)``."""
    size = check_dp_size(dp_size)
    if isinstance(dp_rank, bool) or not isinstance(dp_rank, (int, np.integer)):
        kind = type(dp_rank).__name__
        msg = f"`dp_rank` must be an int in [0, {size}), got {dp_rank!r} of type {kind}"
        raise PlanTypeError(msg)
    if not 0 <= dp_rank < size:
        msg = f"`dp_rank` must be in [0, {size}), got {dp_rank!r}; `dp_size` is {size}"
        raise PlanError(msg)
    return int(dp_rank)


def check_lengths(total_lengths: npt.ArrayLike) -> Int64Array:
    """Return the per-sample token counts as a 1-D, C-contiguous int64 array.

    Parameters
    ----------
    total_lengths
        One non-negative integer per sample: a list, a tuple or a 1-D integer ndarray. An empty
        input is accepted whatever its dtype. The result may share memory with an int64 input;
        nothing in this module writes to it.

    Raises
    ------
    PlanTypeError
        If the values are not integers (floats, ``bool``, strings, objects).
    PlanError
        If the input is not 1-D, holds a negative value, or its total overflows int64.
    """
    try:
        array = np.asarray(total_lengths)
    except (ValueError, TypeError) as exc:
        msg = f"`total_lengths` must be a 1-D sequence of non-negative ints; numpy says: {exc}"
        raise PlanError(msg) from exc
    if array.ndim != 1:
        msg = f"`total_lengths` must be 1-D (one length per sample), got shape {array.shape}"
        if array.ndim == 0:  # not a sequence at all
            msg += f": {type(total_lengths).__name__} {total_lengths!r:.40}"
            raise PlanTypeError(msg)
        raise PlanError(msg)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        msg = (
            f"`total_lengths` must hold integers, got dtype {array.dtype}; "
            "pass token counts, e.g. `np.asarray(lengths, dtype=np.int64)`"
        )
        raise PlanTypeError(msg)
    if array.dtype == np.uint64 and int(array.max()) > _INT64_MAX:
        msg = f"`total_lengths` holds {int(array.max())}, more than int64 can hold"
        raise PlanError(msg)
    lengths = np.ascontiguousarray(array, dtype=np.int64)
    _check_non_negative_total(lengths)
    return lengths


def _check_non_negative_total(lengths: Int64Array) -> None:
    """Raise unless every length is >= 0 and their total fits int64."""
    negative = np.flatnonzero(lengths < 0)
    if negative.size:
        row = int(negative[0])
        msg = (
            f"`total_lengths` must be non-negative, got {int(lengths[row])} at sample {row} "
            f"({negative.size} negative in all)"
        )
        raise PlanError(msg)
    if int(lengths.max()) > _INT64_MAX // lengths.size:
        total = sum(lengths.tolist())
        if total > _INT64_MAX:
            msg = f"`total_lengths` sums to {total} tokens, more than int64 can hold"
            raise PlanError(msg)


def _method(balance_data: bool) -> SplitMethod:
    return "balanced" if balance_data else "strided"


def method_of(balance_data: object) -> SplitMethod:
    """The :data:`SplitMethod` of a ``balance_data`` flag (a bool; anything else is refused)."""
    if not isinstance(balance_data, (bool, np.bool_)):
        kind = type(balance_data).__name__
        msg = f"`balance_data` must be a bool, got {balance_data!r} of type {kind}"
        raise PlanTypeError(msg)
    return _method(bool(balance_data))


def _check_order_by(order_by: npt.ArrayLike | None, n: int) -> Int64Array | None:
    if order_by is None:
        return None
    try:
        keys = np.asarray(order_by)
    except (TypeError, ValueError) as exc:
        msg = f"`order_by` must hold one integer per sample ({n}); numpy says: {exc}"
        raise PlanTypeError(msg) from None
    if keys.shape != (n,) or (keys.size and keys.dtype.kind not in "iu"):
        msg = (
            f"`order_by` must hold one integer per sample ({n}), got shape {keys.shape} and "
            f"dtype {keys.dtype}"
        )
        if keys.ndim == 0 or (keys.size and keys.dtype.kind not in "iu"):
            raise PlanTypeError(msg)
        raise PlanError(msg)
    return np.ascontiguousarray(keys, dtype=np.int64)


def _ordered(rows: Int64Array, keys: Int64Array | None) -> Int64Array:
    """``rows`` sorted stably by ``keys[rows]`` (unchanged without keys)."""
    if keys is None:
        return rows
    return np.ascontiguousarray(rows[np.argsort(keys[rows], kind="stable")])


def _check_balanced(n: int, dp_size: int) -> None:
    """Raise unless `n` samples split into `dp_size` non-empty parts of equal size."""
    if n < dp_size:
        msg = (
            f"balanced partitioning needs at least `dp_size` ({dp_size}) samples, got {n}; "
            f"pad the batch with {dp_size - n} samples or use `balance_data=False`"
        )
        raise PlanError(msg)
    if n % dp_size:
        drop, pad = n % dp_size, dp_size - n % dp_size
        msg = (
            f"balanced partitioning needs a multiple of `dp_size` ({dp_size}) samples, got {n}; "
            f"drop {drop} samples or pad with {pad}, or use `balance_data=False`"
        )
        raise PlanError(msg)


def plan_partitions(
    total_lengths: npt.ArrayLike,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> list[Int64Array]:
    """Return the rows of each rank: `dp_size` int64 arrays, each sorted ascending.

    Parameters
    ----------
    total_lengths
        Token count of every sample (see :func:`check_lengths`).
    dp_size
        Number of data-parallel ranks, a positive int.
    balance_data
        ``True`` for the balanced plan (equal sample counts, close token totals), ``False`` for
        the strided plan.
    order_by
        Optional: one integer per sample (adapter slots); each rank's rows are sorted stably by
        it. Without it, each rank's rows are ascending.

    Returns
    -------
    list of numpy.ndarray
        Entry ``r`` holds the rows of rank ``r``; every row is in exactly one entry. Each array is
        C-contiguous and owns its memory.

    Raises
    ------
    PlanError
        For a bad `dp_size` or `total_lengths`, or a balanced plan whose sample count is smaller
        than `dp_size` or not a multiple of it.
    """
    size = check_dp_size(dp_size)
    lengths = check_lengths(total_lengths)
    n = lengths.size
    keys = _check_order_by(order_by, n)
    if method_of(balance_data) != "balanced":
        return [_ordered(np.arange(rank, n, size, dtype=np.int64), keys) for rank in range(size)]
    _check_balanced(n, size)
    if size == 1:
        return [_ordered(np.arange(n, dtype=np.int64), keys)]
    return [_ordered(rows, keys) for rows in balanced_plan(lengths, size)]


def partition_for_rank(
    total_lengths: npt.ArrayLike,
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> Int64Array:
    """Return the rows of one rank, equal to ``plan_partitions(...)[dp_rank]``.

    Parameters
    ----------
    total_lengths, dp_size, balance_data, order_by
        As for :func:`plan_partitions`.
    dp_rank
        The rank whose rows to return, an int in ``[0, dp_size)``.

    Returns
    -------
    numpy.ndarray
        The rows of `dp_rank`, int64, sorted ascending. Strided rows are computed directly,
        without the other ranks; the balanced plan needs the whole planner.

    Raises
    ------
    PlanError
        As :func:`plan_partitions`, and for a `dp_rank` outside ``[0, dp_size)``.
    """
    rank = check_dp_rank(dp_rank, dp_size)
    if method_of(balance_data) == "balanced":
        return plan_partitions(total_lengths, dp_size, balance_data=True, order_by=order_by)[rank]
    lengths = check_lengths(total_lengths)
    keys = _check_order_by(order_by, lengths.size)
    return _ordered(np.arange(rank, lengths.size, int(dp_size), dtype=np.int64), keys)


def plan_fingerprint(
    total_lengths: npt.ArrayLike,
    dp_size: int,
    *,
    balance_data: bool,
    order_by: npt.ArrayLike | None = None,
) -> str:
    """Return 16 hex digits that identify a plan's inputs, for ranks to cross-check cheaply.

    Parameters
    ----------
    total_lengths, dp_size, balance_data, order_by
        As for :func:`plan_partitions`.

    Returns
    -------
    str
        A BLAKE2b digest of the sample count, `dp_size`, the method name, the lengths as
        little-endian int64 bytes and, when given, the ``order_by`` keys the same way: equal
        inputs give equal digests on every platform, in every process, whatever the container or
        integer dtype of `total_lengths`. Without ``order_by`` the digest is the same as before
        ``order_by`` existed.

    Raises
    ------
    PlanError
        What :func:`plan_partitions` raises for the same arguments.
    """
    size = check_dp_size(dp_size)
    lengths = check_lengths(total_lengths)
    method = method_of(balance_data)
    if method == "balanced":
        _check_balanced(lengths.size, size)
    keys = _check_order_by(order_by, lengths.size)
    name = method.encode("ascii")
    digest = hashlib.blake2b(digest_size=8, person=_FINGERPRINT_PERSON)
    digest.update(struct.pack("<qqB", lengths.size, size, len(name)))
    digest.update(name)
    digest.update(np.ascontiguousarray(lengths, dtype="<i8").data)
    if keys is not None:
        digest.update(b"order_by")
        digest.update(np.ascontiguousarray(keys, dtype="<i8").data)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True, slots=True)
class PlanKey:
    """What identifies a plan without its rows: method, ``dp_size`` and fingerprint.

    A shard carries its plan's key and its ``dp_rank``, so a rank checks in O(1) that it holds
    its own part of the plan it asked for, and ranks can compare fingerprints across a job.
    """

    method: SplitMethod
    dp_size: int
    fingerprint: str


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """Which rows go to which rank: a value that can travel with the data.

    Build one with :meth:`build`. ``partitions[r]`` holds rank ``r``'s rows (int64, read-only);
    every row of the batch is in exactly one. Two plans are equal when their fingerprints and
    rows are.
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
        """Plan ``total_lengths`` for ``dp_size`` ranks (see :func:`plan_partitions`)."""
        lengths = check_lengths(total_lengths)
        fingerprint = plan_fingerprint(
            lengths, dp_size, balance_data=balance_data, order_by=order_by
        )
        partitions = plan_partitions(lengths, dp_size, balance_data=balance_data, order_by=order_by)
        for rows in partitions:
            rows.flags.writeable = False
        return cls(
            method_of(balance_data), int(dp_size), lengths.size, fingerprint, tuple(partitions)
        )

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

    def __repr__(self) -> str:
        sizes = [len(rows) for rows in self.partitions]
        shown = sizes if len(sizes) <= 8 else [*sizes[:8], "..."]
        return (
            f"Plan(method={self.method!r}, dp_size={self.dp_size}, "
            f"num_samples={self.num_samples}, fingerprint={self.fingerprint!r}, rows={shown})"
        )
