"""One parsing rule per kind of argument, shared by the core and every leaf.

Every public entry point converts its arguments with these helpers first and then works on clean
values, so the same value gets the same answer whatever its container (a Python scalar, a numpy
scalar or 0-d array, a list, a numpy or torch array, ``array.array``, a ``memoryview``):

- a flag is a ``bool`` or ``numpy.bool_``; ``"False"``, ``0``, ``None`` are refused
  (``bool("False")`` is ``True``, the silent coercion these rules exist to prevent);
- an int is integral (Python ``int`` or a numpy integer, never a bool or a float) and in range;
- an index or offset array is converted to int64 *before* any arithmetic: unsigned, bool, float,
  complex and object arrays are refused by dtype, never wrapped by a ``numpy.diff``.

The planning arguments (``dp_size``, ``dp_rank``, ``balance_data``, per-sample lengths, rollout
ids, weights and sort keys) have their own rules, raising :class:`PlanError` and
:class:`PlanTypeError`, in :mod:`arrow_split._plan_args`; this module exports them: the plan, the
schedule, the split and the leaves all call these, so a planning argument is parsed the same way
wherever it enters.

This module is the one internal interface the leaves may import besides the public core.
"""

from __future__ import annotations

import os
from typing import Any, get_args

import numpy as np

from arrow_split._plan_args import (
    MAX_DP_SIZE,
    Float64Array,
    Int64Array,
    SplitMethod,
    check_balanced,
    check_dp_rank,
    check_dp_size,
    check_lengths,
    check_order_by,
    check_positive_int,
    check_rollout_ids,
    check_weights,
    method_of,
)
from arrow_split.errors import OptionError, OptionTypeError

__all__ = [
    "Float64Array",
    "Int64Array",
    "MAX_DP_SIZE",
    "SplitMethod",
    "as_choice",
    "as_flag",
    "as_index_array",
    "as_int",
    "as_offsets",
    "as_path",
    "check_balanced",
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


def describe(value: object) -> str:
    """``type value`` for an error message, the value's repr cut to 40 characters."""
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{type(value).__name__} {text}"


def as_flag(name: str, value: object) -> bool:
    """``value`` as a bool: ``bool`` or ``numpy.bool_`` only.

    Raises
    ------
    OptionTypeError
        For anything else (a string, an int, ``None``, an array).
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    msg = f"`{name}` must be a bool (True or False), got {describe(value)}"
    raise OptionTypeError(msg)


def as_int(
    name: str,
    value: object,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    fix: str = "",
) -> int:
    """``value`` as a Python int: an ``int`` or numpy integer (0-d integer arrays too), in range.

    Raises
    ------
    OptionTypeError
        For a bool, a float (even an integral one), a string, ``None``, an array of ndim > 0.
    OptionError
        For an int outside ``[minimum, maximum]``; ``fix`` is appended to the message.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        msg = f"`{name}` must be an int, got {describe(value)}"
        raise OptionTypeError(msg)
    number = int(value)
    low_ok = minimum is None or number >= minimum
    high_ok = maximum is None or number <= maximum
    if not (low_ok and high_ok):
        low = "" if minimum is None else f">= {minimum}"
        high = "" if maximum is None else f"<= {maximum}"
        bounds = " and ".join(part for part in (low, high) if part)
        msg = f"`{name}` must be {bounds}, got {number}" + (f"; {fix}" if fix else "")
        raise OptionError(msg)
    return number


def as_index_array(name: str, value: object, *, ndim: int = 1) -> Int64Array:
    """``value`` as a fresh, C-contiguous int64 array of ``ndim`` dimensions.

    Accepts anything numpy reads (lists, numpy arrays of any byte order or stride, ``array.array``,
    ``memoryview``, objects with ``__array__`` or DLPack such as a CPU torch tensor) whose dtype
    is a *signed* integer, or an unsigned one whose values all fit in int64. Bool, float, complex,
    string and object arrays are refused, whatever their values.

    Raises
    ------
    OptionTypeError
        For a refused dtype, a value numpy cannot read, or the wrong number of dimensions.
    """
    if isinstance(value, (str, bytes)) or value is None:
        msg = f"`{name}` must be an array of ints, got {describe(value)}"
        raise OptionTypeError(msg)
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError, BufferError, RuntimeError) as exc:
        msg = f"`{name}` must be an array of ints: {exc}"
        raise OptionTypeError(msg) from None
    if array.ndim != ndim:
        msg = f"`{name}` must be a {ndim}-D array of ints, got shape {array.shape}"
        raise OptionTypeError(msg)
    if isinstance(value, (list, tuple)) and array.dtype.kind in "iu" and _holds_a_bool(value):
        # numpy reads [0, True, 2] as int64: a bool among ints is refused like a bool array
        msg = f"`{name}` must be an array of ints, got a bool among its values: {value!r:.60}"
        raise OptionTypeError(msg)
    if array.size == 0 and array.dtype.kind in "fO":
        # an empty list reads as float64; it holds no value of the wrong type
        return np.zeros(array.shape, dtype=np.int64)
    if array.dtype.kind == "u":
        if array.size and int(array.max()) > np.iinfo(np.int64).max:
            msg = f"`{name}` has a value above the int64 range: {int(array.max())}"
            raise OptionError(msg)
    elif array.dtype.kind != "i":
        msg = (
            f"`{name}` must be an array of ints, got dtype {array.dtype}; "
            "bool, float and object arrays are refused (cast to int64 first if you mean it)"
        )
        raise OptionTypeError(msg)
    return np.ascontiguousarray(array, dtype=np.int64).copy()


def _holds_a_bool(values: list[object] | tuple[object, ...]) -> bool:
    """Whether a list (of any depth) holds a ``bool`` or ``numpy.bool_``."""
    for item in values:
        if isinstance(item, (bool, np.bool_)):
            return True
        if isinstance(item, (list, tuple)) and _holds_a_bool(item):
            return True
    return False


def as_offsets(name: str, value: object, *, total: int | None = None) -> Int64Array:
    """``value`` as int64 offsets: 1-D, at least one value, starting at 0, non-decreasing.

    The dtype is checked and the values converted to int64 before any difference is taken, so an
    unsigned array cannot wrap into a huge positive step. ``total``, when given, must be the last
    offset.

    Raises
    ------
    OptionTypeError
        As :func:`as_index_array`.
    OptionError
        Empty, not starting at 0, decreasing, or not ending at ``total``.
    """
    offsets = as_index_array(name, value)
    if len(offsets) == 0 or offsets[0] != 0:
        first = "nothing" if len(offsets) == 0 else int(offsets[0])
        msg = f"`{name}` must start at 0, got {first}"
        raise OptionError(msg)
    steps = np.diff(offsets)
    if steps.size and int(steps.min()) < 0:
        at = int(np.argmin(steps))
        msg = (
            f"`{name}` must be non-decreasing: offset {at + 1} ({int(offsets[at + 1])}) "
            f"is below offset {at} ({int(offsets[at])})"
        )
        raise OptionError(msg)
    if total is not None and int(offsets[-1]) != total:
        msg = f"`{name}` must end at {total}, got {int(offsets[-1])}"
        raise OptionError(msg)
    return offsets


def as_choice(name: str, value: object, allowed: Any) -> str:
    """``value`` as one of the strings of the ``Literal`` type ``allowed`` (exactly, no coercion).

    Raises
    ------
    OptionTypeError
        For a value that is not a ``str``.
    OptionError
        For a string outside the choices; the message lists them.
    """
    choices = get_args(allowed)
    expected = f"expected one of: {', '.join(map(repr, choices))}"
    if not isinstance(value, str):
        msg = f"`{name}` must be a str, got {describe(value)}; {expected}"
        raise OptionTypeError(msg)
    if value not in choices:
        msg = f"invalid `{name}`: {value!r:.40}; {expected}"
        raise OptionError(msg)
    return value


def as_path(name: str, value: object) -> str:
    """``value`` as a path: a ``str`` or an ``os.PathLike`` of a str, not empty, without NUL.

    Raises
    ------
    OptionTypeError
        For ``None``, bytes, a number, a bool, a list or any other object.
    OptionError
        For an empty path or one holding a NUL character.
    """
    if not isinstance(value, (str, os.PathLike)):
        msg = f"`{name}` must be a path (a str or an os.PathLike), got {describe(value)}"
        raise OptionTypeError(msg)
    path = os.fspath(value)
    if not isinstance(path, str):
        msg = f"`{name}` must name a path with a str, got {describe(path)}"
        raise OptionTypeError(msg)
    if not path or "\0" in path:
        msg = f"`{name}` must be a non-empty path without NUL characters, got {path!r:.40}"
        raise OptionError(msg)
    return path
