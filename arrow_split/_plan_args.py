"""The planning arguments: one parsing rule each, raising a PlanError or a PlanTypeError.

``dp_size``, ``dp_rank``, ``balance_data`` (the :data:`SplitMethod`) and the per-sample arrays of
a plan (token counts, rollout ids, weights, sort keys). The plan, the schedule, the split and the
leaves all call these, through :mod:`arrow_split._args` (the one interface of the parsing rules,
which exports every name here), so a planning argument is parsed the same way wherever it enters.
An array's dtype is checked before any arithmetic, and the array converted to int64 (weights: to
int64 or float64); bool, string and object arrays are refused whatever their values.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from arrow_split.errors import PlanError, PlanTypeError

__all__ = [
    "Float64Array",
    "Int64Array",
    "MAX_DP_SIZE",
    "SplitMethod",
    "check_balanced",
    "check_dp_rank",
    "check_dp_size",
    "check_lengths",
    "check_order_by",
    "check_positive_int",
    "check_rollout_ids",
    "check_weights",
    "method_of",
]

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]

SplitMethod = Literal["balanced", "strided"]

MAX_DP_SIZE = 65_536
"""The largest ``dp_size`` a plan accepts.

A plan holds one index array per rank, so its cost grows with ``dp_size`` even where most ranks
are empty (a strided plan of more ranks than samples). Data parallelism at this size is far
beyond any training job; a larger value is a mistake (a token count or a byte size passed as
``dp_size``) and is refused at once, instead of allocating billions of empty ranks.
"""

_INT64_MAX = int(np.iinfo(np.int64).max)


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an int or a numpy integer (never a bool), else ``None``.

    A 0-d array (numpy, or anything numpy reads as one: a CPU torch tensor) is its one value,
    so a 0-d integer array is an int and a 0-d bool or float array is refused like a bool or a
    float is.
    """
    value = _scalar_of(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def _scalar_of(value: object) -> object:
    """The one value of a 0-d array, or ``value`` itself (not an array, or not 0-d)."""
    if isinstance(value, (int, float, str, bytes, np.generic)) or value is None:
        return value
    if getattr(value, "ndim", None) != 0 or not hasattr(value, "__array__"):
        return value
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError, BufferError):  # e.g. a GPU tensor
        return value
    return array[()] if array.ndim == 0 else value


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1; ``bool`` and floats are refused.

    Raises
    ------
    PlanTypeError
        For anything but an int or a numpy integer.
    PlanError
        For an int below 1.
    """
    number = _integer(value)
    if number is None:
        msg = f"`{name}` must be a positive int, got {value!r} of type {type(value).__name__}"
        raise PlanTypeError(msg)
    if number < 1:
        msg = f"`{name}` must be a positive int, got {value!r}"
        raise PlanError(msg)
    return number


def check_dp_size(dp_size: object) -> int:
    """``dp_size`` as an int in ``[1, MAX_DP_SIZE]`` (see :data:`MAX_DP_SIZE`)."""
    size = check_positive_int("dp_size", dp_size)
    if size > MAX_DP_SIZE:
        msg = (
            f"`dp_size` must be at most {MAX_DP_SIZE}, got {dp_size!r}; a plan holds one index "
            "array per rank: pass the number of data-parallel ranks"
        )
        raise PlanError(msg)
    return size


def check_dp_rank(dp_rank: object, dp_size: object) -> int:
    """``dp_rank`` as an int in ``[0, dp_size)`` (``dp_size`` is checked first)."""
    size = check_dp_size(dp_size)
    rank = _integer(dp_rank)
    if rank is None:
        kind = type(dp_rank).__name__
        msg = f"`dp_rank` must be an int in [0, {size}), got {dp_rank!r} of type {kind}"
        raise PlanTypeError(msg)
    if not 0 <= rank < size:
        msg = f"`dp_rank` must be in [0, {size}), got {dp_rank!r}; `dp_size` is {size}"
        raise PlanError(msg)
    return rank


def method_of(balance_data: object) -> SplitMethod:
    """The :data:`SplitMethod` of a ``balance_data`` flag (a bool; anything else is refused)."""
    if not isinstance(balance_data, (bool, np.bool_)):
        kind = type(balance_data).__name__
        msg = f"`balance_data` must be a bool, got {balance_data!r} of type {kind}"
        raise PlanTypeError(msg)
    return "balanced" if balance_data else "strided"


def _as_1d(name: str, values: object, what: str) -> np.ndarray:
    try:
        array = np.asarray(values)
    except (ValueError, TypeError) as exc:
        msg = f"`{name}` must be a 1-D sequence of {what}; numpy says: {exc}"
        raise PlanError(msg) from exc
    if array.ndim != 1:
        msg = f"`{name}` must be 1-D (one value per sample), got shape {array.shape}"
        if name == "total_lengths":
            msg = f"`{name}` must be 1-D (one length per sample), got shape {array.shape}"
        if array.ndim == 0:  # not a sequence at all
            msg += f": {type(values).__name__} {values!r:.40}"
            raise PlanTypeError(msg)
        raise PlanError(msg)
    return array


def _as_int64(name: str, array: np.ndarray, fix: str) -> Int64Array:
    """A 1-D array of integers as a C-contiguous int64 array (empty input of any dtype too)."""
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        msg = f"`{name}` must hold integers, got dtype {array.dtype}; {fix}"
        raise PlanTypeError(msg)
    if array.dtype == np.uint64 and int(array.max()) > _INT64_MAX:
        msg = f"`{name}` holds {int(array.max())}, more than int64 can hold"
        raise PlanError(msg)
    return np.ascontiguousarray(array, dtype=np.int64)


def _first_negative(values: np.ndarray) -> tuple[int, int] | None:
    negative = np.flatnonzero(values < 0)
    return (int(negative[0]), negative.size) if negative.size else None


def check_lengths(total_lengths: npt.ArrayLike) -> Int64Array:
    """The per-sample token counts as a 1-D, C-contiguous int64 array.

    One non-negative integer per sample: a list, a tuple or a 1-D integer ndarray; an empty input
    is accepted whatever its dtype. The result may share memory with an int64 input.

    Raises
    ------
    PlanTypeError
        If the values are not integers (floats, ``bool``, strings, objects), or not a sequence.
    PlanError
        If the input is not 1-D, holds a negative value, or its total overflows int64.
    """
    array = _as_1d("total_lengths", total_lengths, "non-negative ints")
    fix = "pass token counts, e.g. `np.asarray(lengths, dtype=np.int64)`"
    lengths = _as_int64("total_lengths", array, fix)
    negative = _first_negative(lengths)
    if negative is not None:
        row, count = negative
        msg = (
            f"`total_lengths` must be non-negative, got {int(lengths[row])} at sample {row} "
            f"({count} negative in all)"
        )
        raise PlanError(msg)
    if lengths.size and int(lengths.max()) > _INT64_MAX // lengths.size:
        total = sum(lengths.tolist())
        if total > _INT64_MAX:
            msg = f"`total_lengths` sums to {total} tokens, more than int64 can hold"
            raise PlanError(msg)
    return lengths


def check_rollout_ids(rollout_ids: npt.ArrayLike, n: int) -> Int64Array:
    """The rollout id of every sample as a 1-D int64 array of length `n`."""
    array = _as_1d("rollout_ids", rollout_ids, "ints")
    ids = _as_int64("rollout_ids", array, "pass one integer rollout id per sample")
    if ids.size != n:
        msg = (
            f"`rollout_ids` has {ids.size} values but `total_lengths` has {n}; "
            "pass one rollout id per sample"
        )
        raise PlanError(msg)
    return ids


def check_weights(weights: npt.ArrayLike, n: int | None) -> Int64Array | Float64Array:
    """Weights as int64 (integer input) or float64, finite and >= 0.

    `n`, if not None, is the number of samples the weights must match.
    """
    array = _as_1d("weights", weights, "non-negative numbers")
    if n is not None and array.size != n:
        msg = (
            f"`weights` has {array.size} values but `total_lengths` has {n}; "
            "pass one weight per sample"
        )
        raise PlanError(msg)
    if array.size and (
        array.dtype == np.bool_
        or not np.issubdtype(array.dtype, np.number)
        or np.issubdtype(array.dtype, np.complexfloating)
    ):
        msg = f"`weights` must hold real numbers, got dtype {array.dtype}; pass ints or floats"
        raise PlanTypeError(msg)
    if array.size == 0 or np.issubdtype(array.dtype, np.integer):
        checked: Int64Array | Float64Array = _as_int64("weights", array, "")
    else:
        checked = np.ascontiguousarray(array, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(checked))
        if bad.size:
            row = int(bad[0])
            msg = f"`weights` must be finite, got {checked[row]} at sample {row}"
            raise PlanError(msg)
    negative = _first_negative(checked)
    if negative is not None:
        row = negative[0]
        msg = f"`weights` must be non-negative, got {checked[row]} at sample {row}"
        raise PlanError(msg)
    return checked


def check_order_by(order_by: npt.ArrayLike | None, n: int) -> Int64Array | None:
    """Per-sample sort keys (adapter slots) as int64, or ``None``."""
    if order_by is None:
        return None
    try:
        keys = np.asarray(order_by)
    except (TypeError, ValueError) as exc:
        msg = f"`order_by` must hold one integer per sample ({n}); numpy says: {exc}"
        raise PlanTypeError(msg) from None
    wrong_type = keys.ndim == 0 or bool(keys.size and keys.dtype.kind not in "iu")
    if keys.shape != (n,) or wrong_type:
        msg = (
            f"`order_by` must hold one integer per sample ({n}), got shape {keys.shape} and "
            f"dtype {keys.dtype}"
        )
        raise (PlanTypeError if wrong_type else PlanError)(msg)
    return np.ascontiguousarray(keys, dtype=np.int64)


def check_balanced(n: int, dp_size: int) -> None:
    """Raise unless `n` samples split into `dp_size` non-empty parts of equal size."""
    if n < dp_size:
        msg = (
            f"balanced partitioning needs at least `dp_size` ({dp_size}) samples, got {n}; "
            f"pad the batch with {dp_size - n} samples (`pad_to_dp=True` does it) or use "
            "`balance_data=False`"
        )
        raise PlanError(msg)
    if n % dp_size:
        drop, pad = n % dp_size, dp_size - n % dp_size
        msg = (
            f"balanced partitioning needs a multiple of `dp_size` ({dp_size}) samples, got {n}; "
            f"drop {drop} samples or pad with {pad} (`pad_to_dp=True` does it), or use "
            "`balance_data=False`"
        )
        raise PlanError(msg)
