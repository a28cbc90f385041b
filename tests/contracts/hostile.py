"""Hostile arguments, and the contract every public function keeps under them.

The contract: a call returns a correct result or raises an :class:`ArrowSplitError` subclass (or,
since the subprocess runs with ``-W error``, an :class:`ArrowSplitWarning` subclass: a documented
warning such as an unknown key's, typed and naming its fix); it never changes its arguments
(deep compare against a copy taken before); it never crashes the interpreter (the crash-prone
calls run in a subprocess, see ``_child.py``).
"""

from __future__ import annotations

import array
import copy
import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from arrow_split import ArrowSplitError, ArrowSplitWarning

__all__ = [
    "ALL_DTYPES",
    "CALLS",
    "check_contract",
    "copy_of",
    "hostile_arrays",
    "hostile_ints",
    "hostile_values",
    "same",
]

CALLS = [0]
"""How many calls :func:`check_contract` judged in this process (the child prints it)."""

ALL_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    np.object_,
]


@st.composite
def hostile_arrays(draw: st.DrawFn, *, max_size: int = 8) -> object:
    """A 1-D (or 0-d) array of any dtype, in any container: view, strided, big-endian..."""
    values = draw(
        st.lists(
            st.one_of(
                st.integers(-3, 12),
                st.sampled_from([0, 1, 2**31 - 1, 2**32, 2**63 - 1, -(2**31), 2**64 - 1]),
            ),
            max_size=max_size,
        )
    )
    dtype = np.dtype(draw(st.sampled_from(ALL_DTYPES)))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy < 2 warns where numpy 2 raises OverflowError
        try:
            base = np.array(values, dtype=dtype)
        except (OverflowError, ValueError, DeprecationWarning):
            base = np.array([v % 100 for v in values], dtype=dtype)
    form = draw(
        st.sampled_from(
            [
                "array",
                "zero-d",
                "strided",
                "big-endian",
                "list",
                "array.array",
                "memoryview",
                "torch",
            ]
        )
    )
    if form == "zero-d":
        return np.array(base[0] if len(base) else 0, dtype=dtype)
    if form == "strided":
        return np.repeat(base, 2)[::2]
    if form == "big-endian" and dtype.kind in "iuf" and dtype.itemsize > 1:
        return base.astype(dtype.newbyteorder(">"))
    if form == "list":
        return base.tolist()
    if form in ("array.array", "memoryview") and dtype.kind in "iuf" and dtype != np.float16:
        typed = array.array(dtype.char if dtype.char in "bBhHiIlLqQfd" else "q", base.tolist())
        return typed if form == "array.array" else memoryview(typed)
    if form == "torch" and dtype.kind in "biuf" and dtype not in (np.uint16, np.uint32):
        try:
            torch = __import__("torch")
        except ImportError:  # the core's contract runs without the leaves' dependencies
            return base
        return torch.from_numpy(base.copy())
    return base


def hostile_ints(*, low: int = -3, high: int = 9) -> st.SearchStrategy[object]:
    """Ints where an int goes, and everything that is almost one."""
    return st.one_of(
        st.integers(low, high),
        st.sampled_from([0, -1, 2**31 - 1, 2**63, -(2**63) - 1]),
        st.integers(low, high).map(np.int64),
        st.integers(0, high).map(np.uint64),
        st.integers(low, high).map(lambda v: np.array(v)),
        st.booleans(),
        st.sampled_from([1.0, 2.5, math.nan, math.inf, "2", "False", None, b"1", 1 + 0j]),
        st.just(np.float16(2)),
        st.just(np.bool_(True)),
    )


def hostile_values() -> st.SearchStrategy[object]:
    """Anything: for a parameter that takes a flag, a mapping, a batch."""
    return st.one_of(
        st.booleans(),
        st.sampled_from(
            [None, "False", "True", "", 0, 1, 2, 1.0, math.nan, [], {}, (), object(), b"", 1j]
        ),
        st.just(np.bool_(False)),
        hostile_arrays(),
    )


def same(left: object, right: object) -> bool:
    """Deep equality for what the suite passes (arrays by dtype, shape and bytes)."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return (
            isinstance(left, np.ndarray)
            and isinstance(right, np.ndarray)
            and left.dtype == right.dtype
            and left.shape == right.shape
            and left.tobytes() == right.tobytes()
        )
    if type(left).__module__ == "torch" and hasattr(left, "numpy"):
        return type(right) is type(left) and same(left.numpy(), right.numpy())  # type: ignore[attr-defined]
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return type(left) is type(right) and len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    if isinstance(left, memoryview) and isinstance(right, memoryview):
        return left.tobytes() == right.tobytes()
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, (array.array, np.generic, int, float, str, bytes, complex, type(None))):
        return type(left) is type(right) and (left == right or left != left)
    return True  # objects without value semantics (a batch): compared by the caller if needed


def copy_of(value: object) -> object:
    """A deep copy to compare against (a value that cannot be copied is itself)."""
    if isinstance(value, dict):
        return {key: copy_of(item) for key, item in value.items()}
    if isinstance(value, memoryview):
        return memoryview(bytes(value))
    try:
        return copy.deepcopy(value)
    except Exception:  # a value that cannot be copied is not compared
        return value


def check_contract(
    call: Callable[..., Any],
    *args: Any,
    allow: tuple[type[BaseException], ...] = (),
    mutates: bool = False,
    **kwargs: Any,
) -> object:
    """Call ``call``; raise AssertionError unless the contract holds. Returns the result or the
    typed error (or an error of the ``allow`` types: the OS errors a dump passes through, the
    tripwire that stands for Ray). ``mutates``: the call is documented to change its arguments
    (the caller compares them on failure)."""
    CALLS[0] += 1
    before = [copy_of(arg) for arg in args], {key: copy_of(v) for key, v in kwargs.items()}
    try:
        outcome: object = call(*args, **kwargs)
    except (ArrowSplitError, ArrowSplitWarning, *allow) as exc:
        outcome = exc
    except Exception as exc:
        msg = f"untyped {type(exc).__name__}: {exc}; call {call.__name__}{(args, kwargs)!r:.400}"
        raise AssertionError(msg) from exc
    if mutates:
        return outcome
    for old, new in zip(before[0], args, strict=True):
        assert same(old, new), f"{call.__name__} changed an argument: {old!r:.100}"
    for key, value in kwargs.items():
        assert same(before[1][key], value), f"{call.__name__} changed `{key}`"
    return outcome
