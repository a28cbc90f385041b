"""The fast path for numbers given as Python lists: one ``struct.pack`` per sample.

``struct.pack(f"{n}i", *values)`` converts a list of Python numbers to C values (and
``bytearray(values)`` a 0/1 mask) without ``pyarrow.array``'s per-value type inference, and rejects
what the column cannot hold on its own: a float or ``None`` in an integer column, a value out of
the type's range, a non-number anywhere. Only a ``bool`` in an integer column
passes unseen (``True`` is an ``int``); it can only hide where the value is 0 or 1, so those few
places are looked at one by one. A float column with a value as large as 2**53 goes the careful
way (an int that large may not be exact as a double, which ``pyarrow.array`` refuses). When
anything is off (a sample that is not a list, a value refused, too many 0/1 values to look at)
the fast path gives up and the careful path of :mod:`arrow_split._codecs._numeric` converts the
column and names the bad value.
"""

from __future__ import annotations

import struct
import warnings
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

__all__ = ["flat_from_lists", "is_bool_value", "scalars_from_list"]

_TYPECODES = {("i" if code.islower() else "u", struct.calcsize(code)): code for code in "bhiqBHIQ"}
"""``(numpy kind, item size)`` -> the typecode of that integer type (``struct``'s are the same)."""

_MAX_LOOKS = 64  # 0/1 values looked at one by one, plus one per 64 values


def _typecode(target: np.dtype, *, flag: bool) -> str | None:
    """The ``struct`` typecode that holds ``target``'s values, ``bytes`` for 0/1 masks."""
    if target.kind == "f":
        return "d"  # float64: a value a float32 column would round is judged later
    if target.kind not in "iu":
        return None
    if flag and target == np.uint8:
        return "bytes"
    return _TYPECODES.get((target.kind, target.itemsize))


def _hides_a_bool(
    samples: Sequence[list[Any]], values: np.ndarray, offsets: np.ndarray
) -> bool | None:
    """Whether a 0/1 value is a ``bool``; ``None`` if there are too many 0/1 values to look."""
    if values.dtype.kind == "f":
        candidates = np.flatnonzero((values == 0) | (values == 1))
    else:
        unsigned = values.view(np.dtype(f"u{values.dtype.itemsize}"))
        candidates = np.flatnonzero(unsigned <= 1)
    if not len(candidates):
        return False
    if len(candidates) > _MAX_LOOKS + len(values) // 64:
        return None
    rows = np.searchsorted(offsets, candidates, side="right") - 1
    for index, row in zip(candidates.tolist(), rows.tolist(), strict=True):
        if is_bool_value(samples[row][index - int(offsets[row])]):
            return True
    return False


def is_bool_value(value: object) -> bool:
    """Whether ``value`` is a bool in any container: ``bool``, ``numpy.bool_``, a 0-d bool array.

    A numpy or torch 0-d bool packs as 0 or 1 like ``True`` does: the same value gets the same
    verdict whatever holds it.
    """
    if isinstance(value, (bool, np.bool_)):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def _beyond_exact_ints(values: np.ndarray) -> bool:
    """Whether a value is as large as 2**53 (where an int may not be exact as a double)."""
    if not values.size:
        return False
    # fmax / fmin skip NaN (max would return it and hide a large value); no float64 copy
    return bool(np.fmax.reduce(values) >= 2.0**53 or np.fmin.reduce(values) <= -(2.0**53))


def _strict(code: str, pack: Callable[..., bytes], *args: Any) -> bytes:
    """``pack(*args)``, with warnings raised as errors where a float is packed (``code`` "d").

    A numpy complex packs as a float (``__float__``) as its real part with only a
    ``ComplexWarning``: that must send the column to the careful path, not drop the imaginary
    part. An integer code or a mask takes ``__index__`` only, which a complex, a float or a
    numpy bool does not have (a ``TypeError`` or ``struct.error``): no warning to catch there,
    and catching costs more than packing a group's few values.
    """
    if code != "d":
        return pack(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return pack(*args)


def _join(code: str, lists: Sequence[list[Any]]) -> bytes:
    """The C values of every list, one after the other (raises on a value refused)."""
    if code == "bytes":  # bytearray(list) takes a fast path that bytes(list) does not (3x)
        return b"".join([bytearray(values) for values in lists])
    return b"".join([struct.pack(f"{len(values)}{code}", *values) for values in lists])


def flat_from_lists(
    target: np.dtype, samples: Sequence[object], *, flag: bool
) -> tuple[np.ndarray, np.ndarray] | None:
    """Flat values and offsets of a column of Python lists, or ``None`` to take the careful path.

    Integers come in ``target``'s type, floats as float64; the caller checks and casts them.
    """
    code = _typecode(target, flag=flag)
    # len(), not truthiness: `samples` may be a numpy object array of lists
    if code is None or len(samples) == 0:
        return None
    if not all(type(sample) is list for sample in samples):
        return None
    lists = cast("Sequence[list[Any]]", samples)
    try:
        joined = _strict(code, _join, code, lists)
    except (TypeError, ValueError, OverflowError, struct.error, Warning):
        return None
    lengths = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    wide: dict[str, np.dtype] = {"d": np.dtype(np.float64), "bytes": np.dtype(np.uint8)}
    values = np.frombuffer(joined, dtype=wide.get(code, target))
    if code == "d" and _beyond_exact_ints(values):
        return None
    if not flag and _hides_a_bool(lists, values, offsets) is not False:
        return None
    return values, offsets


def scalars_from_list(target: np.dtype, samples: Sequence[object]) -> np.ndarray | None:
    """One number per sample (int64 or float64) of a list of Python numbers, or ``None``.

    ``None`` sends the column to the careful path (see the module docstring); flag columns do
    not come here.
    """
    code = "d" if target.kind == "f" else "q" if target.kind in "iu" else None
    if code is None or len(samples) == 0:
        return None
    try:
        packed = _strict(code, struct.pack, f"{len(samples)}{code}", *samples)
    except (TypeError, ValueError, OverflowError, struct.error, Warning):
        return None
    values = np.frombuffer(packed, dtype=np.float64 if code == "d" else np.int64)
    if code == "d" and _beyond_exact_ints(values):
        return None
    # A bool packs as 0 or 1 in either column: look only at those places for one.
    zero_or_one = (values == 0) | (values == 1)
    for index in np.flatnonzero(zero_or_one).tolist():
        if is_bool_value(samples[index]):
            return None
    return values
