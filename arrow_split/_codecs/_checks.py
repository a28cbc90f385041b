"""Value checks on flat numpy columns, and the errors that point at the offending sample.

The converters in the codecs turn a column into one flat numpy array of values (plus
offsets for ragged columns) and hand it here: every check is one vectorised pass, and only when a
check fails is the first bad value located and reported by sample index, position and value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NoReturn, cast

import numpy as np

from arrow_split.errors import ColumnTypeError, ValueRangeError

__all__ = [
    "check_finite",
    "check_flag",
    "check_float32_exact",
    "check_int_range",
    "check_list_samples",
    "flatten_nested",
    "locate_python_value",
    "where",
]


def where(offsets: np.ndarray | None, flat_index: int) -> str:
    """Describe a flat value index as ``sample i`` or ``sample i, position j``."""
    if offsets is None:
        return f"sample {flat_index}"
    sample = int(np.searchsorted(offsets, flat_index, side="right")) - 1
    return f"sample {sample}, position {flat_index - int(offsets[sample])}"


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
        msg = (
            f"{where(offsets, index)}: `{name}` value {values[index].item()!r} is out of range for "
            f"{target} [{info.min}, {info.max}]; fix the value, or declare the column with a wider "
            "`value_type` in a ColumnSpec"
        )
        raise ValueRangeError(msg)


def check_finite(
    name: str,
    values: np.ndarray,
    offsets: np.ndarray | None,
    *,
    counted: np.ndarray | None = None,
    mask_name: str | None = None,
) -> None:
    """Raise :class:`ValueRangeError` on the first NaN or infinity the loss counts.

    ``counted`` (one value per value, aligned) is the loss mask of a response-aligned column
    named ``mask_name``: NaN and infinity are refused only where it is not 0. Without it they are
    refused everywhere; ``mask_name`` then says the column is response-aligned but the batch has
    no loss mask.
    """
    if values.size == 0 or values.dtype.kind != "f":
        return
    bad = ~np.isfinite(values)
    if counted is not None:
        bad &= counted != 0
    if not bad.any():
        return
    index = int(np.argmax(bad))
    if counted is not None:
        msg = (
            f"{where(offsets, index)}: `{name}` holds {values[index].item()!r} where "
            f"`{mask_name}` is {counted[index].item()!r}; NaN and infinity are refused on tokens "
            f"that count toward the loss (allowed where `{mask_name}` is 0); fix the producer, "
            "or pass `allow_nonfinite=True` to `from_train_data` to keep them everywhere"
        )
    else:
        unmasked = (
            f" (the batch has no `{mask_name}`: every response token counts)" if mask_name else ""
        )
        msg = (
            f"{where(offsets, index)}: `{name}` holds {values[index].item()!r}{unmasked}; NaN "
            "and infinity are rejected by default; fix the producer, or pass "
            "`allow_nonfinite=True` to `from_train_data` to keep them"
        )
    raise ValueRangeError(msg)


def check_flag(name: str, values: np.ndarray, offsets: np.ndarray | None) -> None:
    """Raise :class:`ValueRangeError` on the first value that is not 0 or 1."""
    if values.size == 0 or values.dtype.kind == "b":
        return
    bad = (values != 0) & (values != 1)
    if bad.any():
        index = int(np.argmax(bad))
        msg = (
            f"{where(offsets, index)}: `{name}` must hold 0/1 (or bool) values, got "
            f"{values[index].item()!r}"
        )
        raise ValueRangeError(msg)


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
            f"{where(offsets, index)}: `{name}` value {values[index].item()!r} is not exactly a "
            "float32 and the column is float32 while `exact_floats=True`; drop `exact_floats` to "
            "round to the nearest float32 (what `torch.tensor(..., dtype=torch.float32)` does), "
            "or declare the column float64 with a ColumnSpec to keep every bit"
        )
        raise ValueRangeError(msg)


def _convert_hint(kind: str) -> str:
    """The Python conversion that makes one value fit a column of ``kind``."""
    if kind == "float":
        return "`float(v)`"
    if kind == "integer":
        return "`int(v)`"
    return "`int(bool(v))`"


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


def _article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def _is_list_sample(values: object) -> bool:
    """Whether a sample of a ragged column is an ordered sequence of values (not text, a set...)."""
    return type(values) is list or (
        isinstance(values, Sequence) and not isinstance(values, (str, bytes, bytearray))
    )


def check_list_samples(name: str, samples: Sequence[object]) -> None:
    """Raise :class:`ColumnTypeError` on the first sample that is not a list of values.

    pyarrow would read a ``bytes`` sample as its byte values and a ``set`` in arbitrary order;
    neither is a sample of a ragged column.
    """
    for sample, values in enumerate(samples):
        if not _is_list_sample(values):
            msg = (
                f"sample {sample}: `{name}` must be a list of numbers per sample, got "
                f"{type(values).__name__} {values!r:.40}; pass a list or a 1-D numpy array"
            )
            raise ColumnTypeError(msg)


def _numbered(
    samples: Sequence[object], *, ragged: bool, name: str, start: int
) -> Iterator[tuple[str, object]]:
    """Yield ``(where, value)`` for every value of a Python column, checking ragged samples."""
    if ragged:
        check_list_samples(name, samples)
    for sample, values in enumerate(samples, start=start):
        if not ragged:
            yield f"sample {sample}", values
            continue
        for position, value in enumerate(cast("Sequence[object]", values)):
            yield f"sample {sample}, position {position}", value


def flatten_nested(value: object) -> list[object]:
    """The leaves of nested lists and tuples, in row-major order (a non-list is one leaf)."""
    if not isinstance(value, (list, tuple)):
        return [value]
    leaves: list[object] = []
    for item in value:
        leaves.extend(flatten_nested(item))
    return leaves


def locate_python_value(
    name: str,
    samples: Sequence[object],
    *,
    target: np.dtype,
    flag: bool,
    ragged: bool,
    cause: str,
    start: int = 0,
) -> NoReturn:
    """Find the first value of a Python column that its numeric column cannot hold, and raise.

    ``cause`` is what the fast conversion reported; it is shown if the scan finds nothing more
    precise. ``start`` is the number of the first sample in ``samples``.
    """
    integer = target.kind in "iub"
    kind = "flag (0/1)" if flag else "integer" if integer else "float"
    bounds = np.iinfo(target) if target.kind in "iu" else np.iinfo(np.int64)
    for location, value in _numbered(samples, ragged=ragged, name=name, start=start):
        if (
            integer
            and isinstance(value, (int, np.integer))
            and not bounds.min <= value <= bounds.max
        ):
            msg = (
                f"{location}: `{name}` value {value!r} is out of range for "
                f"{bounds.dtype} [{bounds.min}, {bounds.max}]; fix the value, or declare the "
                "column with a wider `value_type` in a ColumnSpec"
            )
            raise ValueRangeError(msg)
        if not integer and isinstance(value, int) and not bounds.min <= value <= bounds.max:
            msg = (
                f"{location}: `{name}` value {value!r:.40} is an int outside int64 in a float "
                "column; pass floats (`float(v)`, where it fits a float64)"
            )
            raise ValueRangeError(msg)
        problem = _bad_python_value(value, integer=integer, flag=flag)
        if problem is not None:
            msg = (
                f"{location}: `{name}` is {_article(kind)} {kind} column but holds {problem} "
                f"({value!r:.40}); "
                f"pass {kind} values (convert in the producer, e.g. {_convert_hint(kind)} or "
                "`np.asarray(v, dtype=...)`), or declare the column's type with a ColumnSpec"
            )
            raise ColumnTypeError(msg)
    msg = f"`{name}` could not be converted to a {kind} column: {cause}"
    raise ColumnTypeError(msg)
