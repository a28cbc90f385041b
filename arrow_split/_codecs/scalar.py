"""One value per sample (:class:`ScalarCodec`), and one value per batch.

Batch-global values are never split: checked once against their documented shape, kept as
Python values and numpy arrays beside the record batch, carried whole by every shard.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from arrow_split._codecs._base import (
    Codec,
    EncodeOptions,
    FlatNumbers,
    TypeFields,
    numpy_view,
    stored_type,
)
from arrow_split._codecs._numeric import (
    ARROW_ERRORS,
    At,
    array_1d,
    finish,
    is_array,
    is_bool_value,
    is_flag,
    python_locator,
    scalars_from_list,
    target_dtype,
)
from arrow_split.errors import ColumnTypeError, SchemaError, ValueRangeError
from arrow_split.schema import ColumnSpec

__all__ = [
    "ScalarCodec",
    "check_batch_global",
    "check_per_sample_values",
    "global_to_python",
    "unpadded_samples",
]


class ScalarCodec(Codec):
    """One number per sample; the input is copied (the batch never shares the caller's memory)."""

    tensor_role = "scalar"

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        if is_array(samples):
            array = array_1d(spec, samples, At(), "(one number per sample)")
            values = np.array(array, copy=True)
        else:
            values = _scalars_from_python(spec, samples)
        return pa.array(finish(spec, values, None, options)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        return list(numpy_view(array).tolist())

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return stored_type(spec, fields)

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        return TypeFields(storage=arrow_type)

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        return FlatNumbers(numpy_view(array), None)


def _scalars_from_python(spec: ColumnSpec, samples: Sequence[object]) -> np.ndarray:
    target = target_dtype(spec)
    locate = python_locator(spec, samples, ragged=False)
    if is_flag(spec):  # bools, 0/1 ints, or both mixed
        try:
            flags = np.asarray(samples) if len(samples) else np.zeros(0, dtype=np.bool_)
        except ARROW_ERRORS as exc:
            locate(str(exc))
        if flags.ndim != 1 or flags.dtype.kind not in "biu":
            locate("values that are neither bool nor int")
        return flags
    if not all(map(_is_number, samples)):
        locate("a value that is not a number (a list, an array of ndim > 0, a complex, a str)")
    fast = scalars_from_list(target, samples)
    if fast is not None:
        return fast
    integer = target.kind != "f"
    wide = pa.int64() if integer else pa.float64()
    try:
        array = pa.array(samples, type=wide)
    except ARROW_ERRORS as exc:
        locate(str(exc))
    if array.null_count:
        locate("null values")
    if integer and not all(map(_is_plain_int, samples)):
        locate("a value that is not an int among integer values")  # pyarrow truncates floats
    if not integer and any(map(is_bool_value, samples)):
        locate("a bool among float values")  # pyarrow would store 0.0 or 1.0 silently
    return np.asarray(array.to_numpy(zero_copy_only=False))


def _is_number(value: object) -> bool:
    """Whether ``value`` is a real number: Python, numpy or a 0-d array (numpy, torch) of one."""
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return True
    dtype = getattr(value, "dtype", None)
    kind = getattr(dtype, "kind", None)  # numpy dtypes have a kind; torch dtypes do not
    if kind is None and dtype is not None:
        kind = "f" if getattr(dtype, "is_floating_point", False) else None
        kind = kind or ("c" if getattr(dtype, "is_complex", False) else "i")
    return getattr(value, "ndim", None) == 0 and kind in ("b", "i", "u", "f")


def _is_plain_int(value: object) -> bool:
    """An int, a numpy integer or a 0-d integer array; not a bool, not a float."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "iu"
    return _is_int(value)


# --- batch-global values -------------------------------------------------------------------------


_SHAPE_TEXT = {
    "int": "one int",
    "int_list": "a list of ints",
    "int_map": "a dict of int keys to non-negative int values",
    "str_list": "a list of str",
    "float_per_sample": "one number per sample of the whole batch",
}


def _shape_error(spec: ColumnSpec, value: object, detail: str) -> SchemaError:
    expected = _SHAPE_TEXT[spec.global_shape or "int"]
    msg = (
        f"batch-global key `{spec.name}` must be {expected}, got {type(value).__name__} "
        f"{value!r:.60}: {detail}"
    )
    return SchemaError(msg, key=spec.name, expected=expected, got=f"{value!r:.60}")


_NOT_REAL = (bool, np.bool_, complex, np.complexfloating)


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _as_list(spec: ColumnSpec, value: object) -> list[object]:
    if isinstance(value, np.ndarray):
        if value.ndim != 1:
            raise _shape_error(spec, value, f"an array of shape {value.shape}")
        return list(value.tolist())
    if not isinstance(value, (list, tuple)):
        raise _shape_error(spec, value, "not a list")
    return list(value)


def _per_sample_floats(
    spec: ColumnSpec, items: list[object], num_samples: int, allow_nonfinite: bool
) -> np.ndarray:
    """A per-sample global's items as a read-only float64 array, refused unless real numbers."""
    if len(items) != num_samples:
        msg = (
            f"batch-global key `{spec.name}` has {len(items)} values but the batch has "
            f"{num_samples} samples; it holds one value per sample of the WHOLE batch"
        )
        raise SchemaError(msg, key=spec.name)
    for sample, item in enumerate(items):
        if isinstance(item, _NOT_REAL) or not isinstance(item, (int, float, np.number)):
            msg = (
                f"`{spec.name}` must hold real numbers (int or float), got "
                f"{type(item).__name__} {item!r:.40}"
            )
            raise ColumnTypeError(msg, key=spec.name, sample=sample)
    floats = _floats(spec, items)
    if not allow_nonfinite and not np.isfinite(floats).all():
        sample = int(np.argmin(np.isfinite(floats)))
        msg = (
            f"`{spec.name}` holds {items[sample]!r}; NaN and infinity are "
            "rejected by default; pass `allow_nonfinite=True` to keep them"
        )
        raise ValueRangeError(msg, key=spec.name, sample=sample)
    floats.flags.writeable = False
    return floats


def _floats(spec: ColumnSpec, items: list[object]) -> np.ndarray:
    """The items as float64; an int too large for a float64 is a :class:`ValueRangeError`."""
    try:
        return np.asarray(items, dtype=np.float64)
    except OverflowError:
        sample = next(i for i, item in enumerate(items) if not _fits_float64(item))
        msg = (
            f"`{spec.name}` value {items[sample]!r:.60} is too large for a "
            "float64; fix the value in the producer"
        )
        raise ValueRangeError(msg, key=spec.name, sample=sample) from None


def _fits_float64(item: object) -> bool:
    try:
        float(item)  # type: ignore[arg-type]
    except OverflowError:
        return False
    return True


def check_per_sample_values(spec: ColumnSpec, value: object, allow_nonfinite: bool) -> None:
    """The checks of a per-sample global that need no batch size (its length comes later)."""
    items = _as_list(spec, value)
    _per_sample_floats(spec, items, len(items), allow_nonfinite)


def check_batch_global(
    spec: ColumnSpec, value: object, num_samples: int, allow_nonfinite: bool
) -> object:
    """A private copy of a batch-global value, checked once against ``spec.global_shape``.

    Raises SchemaError (shape), ColumnTypeError or ValueRangeError (a per-sample global's value).
    """
    shape = spec.global_shape
    if shape == "float_per_sample":
        return _per_sample_floats(spec, _as_list(spec, value), num_samples, allow_nonfinite)
    if shape == "int":
        if not _is_int(value):
            raise _shape_error(spec, value, "not an int")
        if int(value) < 0:  # type: ignore[call-overload]
            raise _shape_error(spec, value, "a negative count")
        return int(value)  # type: ignore[call-overload]
    if shape == "int_map":
        return _check_int_map(spec, value)
    items = _as_list(spec, value)
    wanted = _is_int if shape == "int_list" else (lambda item: isinstance(item, str))
    for position, item in enumerate(items):
        if not wanted(item):
            raise _shape_error(spec, value, f"item {position} is {item!r:.40}")
    return [int(item) for item in items] if shape == "int_list" else items  # type: ignore[call-overload]


def _check_int_map(spec: ColumnSpec, value: object) -> dict[int, int]:
    """A dict of int keys to non-negative int values, copied with plain ints."""
    if not isinstance(value, Mapping):
        raise _shape_error(spec, value, "not a dict")
    checked: dict[int, int] = {}
    for key, item in value.items():
        if not _is_int(key):
            raise _shape_error(spec, value, f"key {key!r:.40} is not an int")
        if not _is_int(item) or int(item) < 0:
            raise _shape_error(spec, value, f"the value of key {key!r} is {item!r:.40}")
        checked[int(key)] = int(item)
    return checked


def unpadded_samples(num_samples: int, columns: Mapping[str, pa.Array], marker: str | None) -> int:
    """The samples a per-sample global covers: every row but :func:`~arrow_split.pad_to_dp`'s.

    ``marker`` is the padding column's name (``Roles.padding``), resolved once by the caller.
    """
    if marker is None or marker not in columns:
        return num_samples
    flags = columns[marker]
    return num_samples - int(pc.sum(flags.fill_null(False)).as_py() or 0)


def global_to_python(values: Mapping[str, object]) -> dict[str, object]:
    """Return the batch-global values in the classic layout (lists, ints), as fresh objects."""
    return {
        key: value.tolist() if isinstance(value, np.ndarray) else _copy(value)
        for key, value in values.items()
    }


def _copy(value: object) -> object:
    if isinstance(value, dict):
        return dict(value)
    return list(value) if isinstance(value, list) else value
