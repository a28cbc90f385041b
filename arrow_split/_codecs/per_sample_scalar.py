"""The ``per_sample_scalar`` kind: one number per sample (a flat Arrow array of ``value_type``).

The input is copied (the batch never shares the caller's memory); a padding row gets the
padding value; the tensor is the 1-D values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import EncodeOptions, numpy_view
from arrow_split._codecs._checks import At
from arrow_split._codecs._kind import FlatNumbers, NumbersCodec, TypeFields, stored_type
from arrow_split._codecs._numeric import (
    ARROW_ERRORS,
    array_1d,
    finish,
    flat_from_lists,
    is_array,
    is_bool_value,
    is_flag,
    python_locator,
    target_dtype,
)

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = [
    "ScalarCodec",
    "is_int",
]


class ScalarCodec(NumbersCodec):
    """One number per sample; the input is copied (the batch never shares the caller's memory)."""

    text = "one value per sample"

    tensor_role = "scalar"
    one_number = True

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

    def tensor_values(self, array: pa.Array) -> FlatNumbers:
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
    fast = flat_from_lists(target, [list(samples)], flag=False)  # the samples as one list
    if fast is not None:
        return fast[0]
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
    return is_int(value)


def is_int(value: object) -> bool:
    """Whether ``value`` is an int or a numpy integer, not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
