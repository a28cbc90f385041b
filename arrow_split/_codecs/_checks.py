"""The checks on a numeric column's values, and the errors that say where a bad value is.

Checks are vectorised on flat numbers; only a failing one locates the value (``At``: sample,
position, item). A Python column the fast paths refuse is scanned for its first bad value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NoReturn, TypedDict, cast

import numpy as np

from arrow_split.errors import ColumnTypeError, ValueRangeError

__all__ = [
    "At",
    "check_finite",
    "check_flag",
    "check_float32_exact",
    "check_int_range",
    "check_list_samples",
    "locate_python_value",
]


class At(TypedDict, total=False):
    """Where a value is, as the fields of the error that names it (none: the whole column)."""

    sample: int
    position: int
    item: int


def _where(offsets: np.ndarray | None, flat_index: int) -> At:
    """Where a flat value index is: ``sample`` (no offsets), or ``sample`` and ``position``."""
    if offsets is None:
        return At(sample=flat_index)
    sample = int(np.searchsorted(offsets, flat_index, side="right")) - 1
    return At(sample=sample, position=flat_index - int(offsets[sample]))


def check_int_range(
    name: str, values: np.ndarray, target: np.dtype, offsets: np.ndarray | None
) -> None:
    """Raise :class:`ValueRangeError` if an integer value does not fit ``target``."""
    if values.size == 0 or np.can_cast(values.dtype, target, casting="safe"):
        return
    info = np.iinfo(target)
    bad = (values < info.min) | (values > info.max)
    if bad.any():
        index = int(np.argmax(bad))
        _out_of_range(_where(offsets, index), name, values[index].item(), info)


def _out_of_range(at: At, name: str, value: object, info: np.iinfo) -> NoReturn:
    msg = f"`{name}` value {value!r} is out of range for {info.dtype} [{info.min}, {info.max}]"
    fix = "fix the value, or declare the column with a wider `value_type` in a ColumnSpec"
    raise ValueRangeError(msg, key=name, got=repr(value), fix=fix, **at)


def check_finite(
    name: str,
    values: np.ndarray,
    offsets: np.ndarray | None,
    *,
    counted: np.ndarray | None = None,
    mask_name: str | None = None,
) -> None:
    """Raise :class:`ValueRangeError` on the first NaN or infinity the loss counts.

    ``counted`` (the loss mask ``mask_name``, aligned): refused only where it is not 0.
    """
    if values.size == 0 or values.dtype.kind != "f":
        return
    bad = ~np.isfinite(values)
    if counted is not None:
        bad &= counted != 0
    if not bad.any():
        return
    index = int(np.argmax(bad))
    got = repr(values[index].item())
    if counted is not None:
        msg = (
            f"`{name}` holds {got} where `{mask_name}` is {counted[index].item()!r}; NaN and "
            "infinity are refused on tokens that count toward the loss (allowed where "
            f"`{mask_name}` is 0)"
        )
        fix = (
            "fix the producer, or pass `allow_nonfinite=True` to `from_train_data` to keep "
            "them everywhere"
        )
    else:
        unmasked = (
            f" (the batch has no `{mask_name}`: every response token counts)" if mask_name else ""
        )
        msg = f"`{name}` holds {got}{unmasked}; NaN and infinity are rejected by default"
        fix = "fix the producer, or pass `allow_nonfinite=True` to `from_train_data` to keep them"
    raise ValueRangeError(msg, key=name, got=got, fix=fix, **_where(offsets, index))


def check_flag(name: str, values: np.ndarray, offsets: np.ndarray | None) -> None:
    """Raise :class:`ValueRangeError` on the first value that is not 0 or 1."""
    if values.size == 0 or values.dtype.kind == "b":
        return
    bad = (values != 0) & (values != 1)
    if bad.any():
        index = int(np.argmax(bad))
        expected, got = "0/1 (or bool) values", repr(values[index].item())
        raise ValueRangeError(
            f"`{name}` must hold {expected}, got {got}",
            key=name,
            expected=expected,
            got=got,
            **_where(offsets, index),
        )


def check_float32_exact(
    name: str, values: np.ndarray, rounded: np.ndarray, offsets: np.ndarray | None
) -> None:
    """Raise :class:`ValueRangeError` if ``rounded`` (float32) lost bits of wider ``values``."""
    if values.size == 0 or values.dtype == rounded.dtype:
        return
    bad = values != rounded  # compared in float64, chunk by chunk: no full temporary copy
    if bad.any():
        bad &= ~np.isnan(values)  # NaN is judged by the finiteness check
    if bad.any():
        index = int(np.argmax(bad))
        msg = (
            f"`{name}` value {values[index].item()!r} is not exactly a float32 and the column "
            "is float32 while `exact_floats=True`"
        )
        fix = (
            "drop `exact_floats` to round to the nearest float32 (what `torch.tensor(..., "
            "dtype=torch.float32)` does), or declare the column float64 with a ColumnSpec to "
            "keep every bit"
        )
        raise ValueRangeError(msg, key=name, fix=fix, **_where(offsets, index))


_HINTS = {"float": "`float(v)`", "integer": "`int(v)`", "flag (0/1)": "`int(bool(v))`"}
"""The Python conversion that makes one value fit a column of each kind."""


def _bad_python_value(value: object, *, integer: bool, flag: bool) -> str | None:
    """Say what is wrong with one Python value of a numeric column, or ``None``."""
    if value is None:
        return "None"
    if isinstance(value, (bool, np.bool_)):
        return None if flag else "a bool"
    if isinstance(value, (int, np.integer)):
        return None
    if isinstance(value, (float, np.floating)):
        return "a float" if integer else None
    return f"a {type(value).__name__}"


def check_list_samples(name: str, samples: Sequence[object]) -> None:
    """Raise on the first sample not a sequence (pyarrow reads bytes as numbers, sets unordered)."""
    for sample, values in enumerate(samples):
        text = isinstance(values, (str, bytes, bytearray))
        if type(values) is not list and (text or not isinstance(values, Sequence)):
            msg = (
                f"`{name}` must be a list of numbers per sample, got {type(values).__name__} "
                f"{values!r:.40}"
            )
            fix = "pass a list or a 1-D numpy array"
            raise ColumnTypeError(msg, key=name, sample=sample, fix=fix)


def _numbered(
    samples: Sequence[object], *, ragged: bool, name: str, start: int
) -> Iterator[tuple[At, object]]:
    """Yield ``(where, value)`` for every value of a Python column, checking ragged samples."""
    if ragged:
        check_list_samples(name, samples)
    for sample, values in enumerate(samples, start=start):
        if not ragged:
            yield At(sample=sample), values
            continue
        for position, value in enumerate(cast("Sequence[object]", values)):
            yield At(sample=sample, position=position), value


def locate_python_value(
    name: str,
    samples: Sequence[object],
    cause: str,
    *,
    target: np.dtype,
    flag: bool,
    ragged: bool,
    start: int = 0,
) -> NoReturn:
    """Raise at the first value of a Python column its numeric column cannot hold.

    ``cause`` is shown if the scan finds nothing more precise; ``start`` numbers the first sample.
    """
    integer = target.kind in "iub"
    kind = "flag (0/1)" if flag else "integer" if integer else "float"
    bounds = np.iinfo(target) if target.kind in "iu" else np.iinfo(np.int64)
    for at, value in _numbered(samples, ragged=ragged, name=name, start=start):
        if isinstance(value, (int, np.integer)) and not bounds.min <= value <= bounds.max:
            if integer:
                _out_of_range(at, name, value, bounds)
            if isinstance(value, int):  # a float column: bounds are int64's
                msg = f"`{name}` value {value!r:.40} is an int outside int64 in a float column"
                fix = "pass floats (`float(v)`, where it fits a float64)"
                raise ValueRangeError(msg, key=name, fix=fix, **at)
        problem = _bad_python_value(value, integer=integer, flag=flag)
        if problem is not None:
            msg = (
                f"`{name}` is {'an' if kind == 'integer' else 'a'} {kind} column but holds "
                f"{problem} ({value!r:.40})"
            )
            fix = (
                f"pass {kind} values (convert in the producer, e.g. {_HINTS[kind]} or "
                "`np.asarray(v, dtype=...)`), or declare the column's type with a ColumnSpec"
            )
            raise ColumnTypeError(msg, key=name, got=problem, fix=fix, **at)
    msg = f"`{name}` could not be converted to a {kind} column: {cause}"
    raise ColumnTypeError(msg, key=name)
