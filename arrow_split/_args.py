"""One parsing rule per kind of argument: every entry point, core or leaf, parses with these.

A parser turns a user's value into a typed one or raises, once, at the door; the code behind it
trusts the result. The same value gets the same answer whatever its container (a Python or numpy
scalar, a 0-d array, a list, a numpy or torch array, a ``memoryview``); a dtype is checked
before any arithmetic (an unsigned array never wraps in a ``diff``). Options raise
:class:`OptionTypeError` / :class:`OptionError`, planning arguments :class:`PlanTypeError` /
:class:`PlanError`. The one internal module the leaves may import.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt

from arrow_split.errors import (
    ArrowSplitError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanTypeError,
    SchemaTypeError,
    mistake,
)

__all__ = [
    "Float64Array",
    "INT64_MAX",
    "Int64Array",
    "MAX_DP_SIZE",
    "SplitMethod",
    "as_callback",
    "as_choice",
    "as_flag",
    "as_index_array",
    "as_int",
    "as_keywords",
    "as_list_of",
    "as_offsets",
    "as_path",
    "as_real",
    "as_rows",
    "check_dp_rank",
    "check_dp_size",
    "check_lengths",
    "check_order_by",
    "check_positive_int",
    "check_rollout_ids",
    "check_weights",
    "describe",
    "method_of",
]

Int64Array = npt.NDArray[np.int64]
Float64Array = npt.NDArray[np.float64]

SplitMethod = Literal["balanced", "strided"]

MAX_DP_SIZE = 65_536
"""The largest ``dp_size`` a plan accepts: a larger one is a mistake (a token count passed as
``dp_size``), refused instead of allocating billions of empty ranks."""

INT64_MAX = int(np.iinfo(np.int64).max)
_A_BOOL = "a bool (True or False)"


def describe(value: object) -> str:
    """``type value`` for an error message, the value's repr cut to 40 characters."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


# Options ---------------------------------------------------------------------------------------


def as_flag(name: str, value: object) -> bool:
    """``value`` as a bool: ``bool`` or ``numpy.bool_`` only (``bool("False")`` is ``True``)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise mistake("flag_type", key=name, expected=_A_BOOL, got=describe(value))


def as_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    fix: str = "",
) -> int:
    """``value`` as an int (never a bool or a float) in ``[minimum, maximum]``; ``fix`` if not."""
    number = _integer(value)
    if number is None:
        raise mistake("option_type", key=name, expected="an int", got=describe(value))
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        low = "" if minimum is None else f">= {minimum}"
        high = "" if maximum is None else f"<= {maximum}"
        bounds = " and ".join(part for part in (low, high) if part)
        raise mistake("option_value", key=name, expected=bounds, got=str(number), fix=fix or None)
    return number


def as_real(name: str, value: object, expected: str) -> int | float:
    """``value`` as an int or float (0-d arrays and tensors too; never a bool or complex)."""
    if not isinstance(value, np.generic) and getattr(value, "ndim", None) == 0:
        with contextlib.suppress(AttributeError, TypeError, ValueError, RuntimeError):
            value = value.item()  # type: ignore[attr-defined]  # a 0-d array or tensor (any device)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        msg = f"`{name}` must be {expected}, got {describe(value)}"
        raise OptionTypeError(msg, key=name)
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


def as_choice(
    name: str,
    value: object,
    allowed: Any,
    *,
    type_error: type[ArrowSplitError] = OptionTypeError,
    value_error: type[ArrowSplitError] = OptionError,
) -> str:
    """``value`` as one of the strings of the ``Literal`` ``allowed``, exactly; errors list them."""
    choices = get_args(allowed)
    expected = f"expected one of: {', '.join(map(repr, choices))}"
    if not isinstance(value, str):
        msg = f"invalid `{name}`: {value!r:.40} of type {type(value).__name__}; {expected}"
        raise type_error(msg, key=name)
    if value not in choices:
        msg = f"invalid `{name}`: {value!r:.40}; {expected}"
        raise value_error(msg, key=name)
    return value


def as_keywords(
    name: str,
    options: Mapping[str, object],
    function: Callable[..., object],
    *,
    reserved: Collection[str] = (),
    callbacks: Collection[str] = (),
) -> dict[str, object]:
    """``options`` (a copy) checked as keywords for ``function`` (``name`` in messages).

    Each must be one of its keyword-only parameters (any, if it takes ``**kwargs``), none of
    ``reserved`` (passed by the caller itself); each of ``callbacks`` is None or a callable.
    """
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # no signature to read: any keyword
        parameters = [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    anything = any(parameter.kind is parameter.VAR_KEYWORD for parameter in parameters)
    accepted = [p.name for p in parameters if p.kind is p.KEYWORD_ONLY and p.name not in reserved]
    for key, value in options.items():
        if key in reserved or not (anything or key in accepted):
            names = ", ".join(map(repr, accepted))
            why = "is passed for each call of" if key in reserved else "is not an option of"
            msg = f"`{key}` {why} `{name}`; pass only {names}"
            raise mistake("option_value", msg, key=key, expected=f"one of {names}", got=repr(key))
        if key in callbacks:
            as_callback(key, value)
    return dict(options)


def as_callback(name: str, value: object) -> None:
    """Refuse a ``value`` that is neither None nor a callable (an option called back later)."""
    if value is not None and not callable(value):
        raise mistake("option_type", key=name, expected="None or a callable", got=describe(value))


def as_list_of(name: str, value: object, item: type[Any]) -> list[object]:
    """``value`` as a list (of ``item`` values); a single one, a str or a non-iterable refused."""
    if not isinstance(value, (item, str, bytes)):
        try:
            return list(value)  # type: ignore[call-overload,no-any-return]
        except TypeError:
            pass
    msg = (
        f"`{name}` must be a list of {item.__name__} values, got {type(value).__name__} "
        f"{value!r:.60}; wrap a single spec in a list"
    )
    raise SchemaTypeError(msg, key=name)


def as_path(name: str, value: object) -> str:
    """``value`` as a path: a ``str`` or an ``os.PathLike`` of a str, not empty, without NUL."""
    if not isinstance(value, (str, os.PathLike)):
        expected = "a path (a str or an os.PathLike)"
        raise mistake("path_type", key=name, expected=expected, got=describe(value))
    path = os.fspath(value)
    if not isinstance(path, str):
        msg = f"`{name}` must name a path with a str, got {describe(path)}"
        raise mistake("path_type", msg, key=name)
    if not path:
        raise mistake("path_value", key=name, expected="a non-empty path", got="''")
    if "\0" in path:
        msg = f"`{name}` {path!r:.60} holds a NUL character; no file can have that name"
        raise mistake("path_value", msg, key=name, got=f"{path!r:.60}")
    return path


# Index arrays ----------------------------------------------------------------------------------


def as_index_array(name: str, value: object, *, ndim: int = 1) -> Int64Array:
    """``value`` as a fresh int64 array of ``ndim`` dimensions, from ints only (no bool, float)."""
    if isinstance(value, (str, bytes)) or value is None:
        msg = f"`{name}` must be an array of ints, got {describe(value)}"
        raise mistake("option_type", msg, key=name)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError, BufferError, RuntimeError) as exc:
        msg = f"`{name}` must be an array of ints: {exc}"
        raise mistake("option_type", msg, key=name) from None
    if array.ndim != ndim:
        msg = f"`{name}` must be a {ndim}-D array of ints, got shape {array.shape}"
        raise mistake("option_type", msg, key=name)
    if isinstance(value, (list, tuple)) and array.dtype.kind in "iu" and _holds_a_bool(value):
        # numpy reads [0, True, 2] as int64: a bool among ints is refused like a bool array
        msg = f"`{name}` must be an array of ints, got a bool among its values: {value!r:.60}"
        raise mistake("option_type", msg, key=name)
    if array.size == 0 and array.dtype.kind in "fO":  # an empty list reads as float64
        return np.zeros(array.shape, dtype=np.int64)
    if array.dtype.kind == "u" and array.size and int(array.max()) > INT64_MAX:
        msg = f"`{name}` has a value above the int64 range: {int(array.max())}"
        raise mistake("option_value", msg, key=name)
    if array.dtype.kind not in "iu":
        msg = (
            f"`{name}` must be an array of ints, got dtype {array.dtype}; "
            "bool, float and object arrays are refused (cast to int64 first if you mean it)"
        )
        raise mistake("option_type", msg, key=name)
    return np.ascontiguousarray(array, dtype=np.int64).copy()


def _holds_a_bool(values: list[object] | tuple[object, ...]) -> bool:
    """Whether a list (of any depth) holds a ``bool`` or ``numpy.bool_``."""
    return any(
        isinstance(item, (bool, np.bool_))
        or (isinstance(item, (list, tuple)) and _holds_a_bool(item))
        for item in values
    )


def as_rows(name: str, value: object, num_samples: int) -> Int64Array:
    """``value`` as rows of ``num_samples`` (:func:`as_index_array`, each in range), every door."""
    rows = as_index_array(name, value)
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= num_samples):
        bad = int(rows[(rows < 0) | (rows >= num_samples)][0])
        msg = f"`{name}` holds row {bad}, outside [0, {num_samples}) for this batch"
        raise mistake("option_value", msg, key=name, got=str(bad))
    return rows


def as_offsets(name: str, value: object, *, total: int | None = None) -> Int64Array:
    """``value`` as int64 offsets: 1-D, from 0, non-decreasing, ending at ``total`` if given."""
    offsets = as_index_array(name, value)
    if len(offsets) == 0 or offsets[0] != 0:
        first = "nothing" if len(offsets) == 0 else int(offsets[0])
        msg = f"`{name}` must start at 0, got {first}"
        raise OptionError(msg, key=name)
    steps = np.diff(offsets)
    if steps.size and int(steps.min()) < 0:
        at = int(np.argmin(steps))
        msg = (
            f"`{name}` must be non-decreasing: offset {at + 1} ({int(offsets[at + 1])}) "
            f"is below offset {at} ({int(offsets[at])})"
        )
        raise OptionError(msg, key=name)
    if total is not None and int(offsets[-1]) != total:
        msg = f"`{name}` must end at {total}, got {int(offsets[-1])}"
        raise OptionError(msg, key=name)
    return offsets


# Planning arguments ----------------------------------------------------------------------------


def _integer(value: object) -> int | None:
    """``value`` as an int if it is an int, a numpy integer or a 0-d integer array, else None."""
    scalar = isinstance(value, (int, float, str, bytes, np.generic)) or value is None
    if not scalar and getattr(value, "ndim", None) == 0 and hasattr(value, "__array__"):
        # a 0-d array, or what numpy reads as one (a CPU torch tensor); not a GPU tensor
        with contextlib.suppress(TypeError, ValueError, RuntimeError, BufferError):
            value = np.asarray(value)[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an int >= 1 (:class:`PlanTypeError` for a bool or a float)."""
    number = _integer(value)
    if number is None:
        got = f"{value!r} of type {type(value).__name__}"
        raise mistake("plan_type", key=name, expected="a positive int", got=got)
    if number < 1:
        raise mistake("plan_value", key=name, expected="a positive int", got=repr(value))
    return number


def check_dp_size(dp_size: object) -> int:
    """``dp_size`` as an int in ``[1, MAX_DP_SIZE]`` (errors as :func:`check_positive_int`)."""
    size = _integer(dp_size)
    if size is None or size < 1:
        return check_positive_int("dp_size", dp_size)  # raises the positive-int error
    if size > MAX_DP_SIZE:
        fix = "a plan holds one index array per rank: pass the number of data-parallel ranks"
        expected = f"at most {MAX_DP_SIZE}"
        raise mistake("plan_value", key="dp_size", expected=expected, got=repr(dp_size), fix=fix)
    return size


def check_dp_rank(dp_rank: object, dp_size: int) -> int:
    """``dp_rank`` as an int in ``[0, dp_size)``, ``dp_size`` parsed already."""
    rank = _integer(dp_rank)
    if rank is None:
        got = f"{dp_rank!r} of type {type(dp_rank).__name__}"
        raise mistake("plan_type", key="dp_rank", expected=f"an int in [0, {dp_size})", got=got)
    if not 0 <= rank < dp_size:
        expected, fix = f"in [0, {dp_size})", f"`dp_size` is {dp_size}"
        raise mistake("plan_value", key="dp_rank", expected=expected, got=repr(dp_rank), fix=fix)
    return rank


def method_of(balance_data: object) -> SplitMethod:
    """The :data:`SplitMethod` of a ``balance_data`` flag (a bool; anything else is refused)."""
    if not isinstance(balance_data, (bool, np.bool_)):  # the rule of `as_flag`, its mistake
        got = describe(balance_data)
        raise mistake("flag_type", key="balance_data", expected=_A_BOOL, got=got)
    return "balanced" if balance_data else "strided"


def _one_d(name: str, values: object, what: str) -> np.ndarray:
    """``values`` as a 1-D array (one value per sample)."""
    try:
        array = np.asarray(values)
    except (ValueError, TypeError) as exc:
        msg = f"`{name}` must be a 1-D sequence of {what}; numpy says: {exc}"
        raise PlanError(msg, key=name) from exc
    if array.ndim != 1:
        per = "length" if name.endswith("total_lengths") else "value"
        msg = f"`{name}` must be 1-D (one {per} per sample), got shape {array.shape}"
        got = f"shape {array.shape}"
        if array.ndim == 0:  # not a sequence at all
            msg += f": {type(values).__name__} {values!r:.40}"
            raise PlanTypeError(msg, key=name, got=got)
        raise PlanError(msg, key=name, got=got)
    return array


def _int64(name: str, array: np.ndarray, fix: str) -> Int64Array:
    """A 1-D array of integers as a C-contiguous int64 array (empty input of any dtype too)."""
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):  # numpy.bool_ is not an integer type
        msg = f"`{name}` must hold integers, got dtype {array.dtype}; {fix}"
        raise PlanTypeError(msg, key=name, got=f"dtype {array.dtype}")
    if array.dtype == np.uint64 and int(array.max()) > INT64_MAX:
        msg = f"`{name}` holds {int(array.max())}, more than int64 can hold"
        raise PlanError(msg, key=name, got=str(int(array.max())))
    return np.ascontiguousarray(array, dtype=np.int64)


def _check_count(name: str, size: int, n: int | None, each: str) -> None:
    """Raise unless ``name`` has one value per sample (``n`` of them, where ``n`` is known)."""
    if n is not None and size != n:
        msg = f"`{name}` has {size} values but `total_lengths` has {n}; pass one {each} per sample"
        raise PlanError(msg, key=name)


def _first_negative(values: np.ndarray) -> tuple[int, int] | None:
    negative = np.flatnonzero(values < 0)
    return (int(negative[0]), negative.size) if negative.size else None


def check_lengths(total_lengths: npt.ArrayLike, name: str = "total_lengths") -> Int64Array:
    """The per-sample token counts as a 1-D int64 array (may share memory) of an int64 total."""
    array = _one_d(name, total_lengths, "non-negative ints")
    lengths = _int64(name, array, "pass token counts, e.g. `np.asarray(lengths, dtype=np.int64)`")
    if (negative := _first_negative(lengths)) is not None:
        row, count = negative
        got = str(int(lengths[row]))
        msg = f"`{name}` must be non-negative, got {got} ({count} negative in all)"
        raise PlanError(msg, key=name, sample=row, got=got)
    if lengths.size and int(lengths.max()) > INT64_MAX // lengths.size:
        total = sum(lengths.tolist())
        if total > INT64_MAX:
            msg = f"`{name}` sums to {total} tokens, more than int64 can hold"
            raise PlanError(msg, key=name, got=str(total))
    return lengths


def check_rollout_ids(rollout_ids: npt.ArrayLike, n: int) -> Int64Array:
    """The rollout id of every sample as a 1-D int64 array of length `n`."""
    array = _one_d("rollout_ids", rollout_ids, "ints")
    ids = _int64("rollout_ids", array, "pass one integer rollout id per sample")
    _check_count("rollout_ids", ids.size, n, "rollout id")
    return ids


def check_weights(weights: npt.ArrayLike, n: int | None) -> Int64Array | Float64Array:
    """Weights as int64 (integer input) or float64, finite and >= 0; `n` of them if given."""
    array = _one_d("weights", weights, "non-negative numbers")
    _check_count("weights", array.size, n, "weight")
    if array.size and (not np.issubdtype(array.dtype, np.number) or array.dtype.kind == "c"):
        msg = f"`weights` must hold real numbers, got dtype {array.dtype}; pass ints or floats"
        raise PlanTypeError(msg, key="weights")
    if array.size == 0 or np.issubdtype(array.dtype, np.integer):
        checked: Int64Array | Float64Array = _int64("weights", array, "")
    else:
        checked = np.ascontiguousarray(array, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(checked))
        if bad.size:
            row = int(bad[0])
            msg = f"`weights` must be finite, got {checked[row]}"
            raise PlanError(msg, key="weights", sample=row, got=str(checked[row]))
    negative = _first_negative(checked)
    if negative is not None:
        row = negative[0]
        msg = f"`weights` must be non-negative, got {checked[row]}"
        raise PlanError(msg, key="weights", sample=row, got=str(checked[row]))
    return checked


def check_order_by(order_by: npt.ArrayLike | None, n: int) -> Int64Array | None:
    """Per-sample sort keys (adapter slots) as int64, or ``None``."""
    if order_by is None:
        return None
    try:
        keys = np.asarray(order_by)
    except (TypeError, ValueError) as exc:
        msg = f"`order_by` must hold one integer per sample ({n}); numpy says: {exc}"
        raise PlanTypeError(msg, key="order_by") from None
    wrong_type = keys.ndim == 0 or bool(keys.size and keys.dtype.kind not in "iu")
    if keys.shape != (n,) or wrong_type:
        msg = (
            f"`order_by` must hold one integer per sample ({n}), got shape {keys.shape} and "
            f"dtype {keys.dtype}"
        )
        raise (PlanTypeError if wrong_type else PlanError)(msg, key="order_by")
    return _int64("order_by", keys, "")  # range-checked: a uint64 above int64 never wraps
