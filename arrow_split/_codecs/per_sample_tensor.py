"""The ``per_sample_tensor`` kind: one array of rows per sample, every sample one trailing shape.

The trailing shape lives in the Arrow type (``large_list`` of nested ``fixed_size_list``);
lengths count rows. Integer ids may be stored narrow (``storage="narrow"``): the narrowest type
holding every value of the batch, the logical type given back on decode.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import (
    EncodeOptions,
    is_list,
    leaf_type,
    list_type,
    nest,
    numpy_dtype,
    ragged_values,
    split_by_offsets,
    trailing_shape,
)
from arrow_split._codecs._checks import At, locate_python_value
from arrow_split._codecs._kind import NARROWABLE_TYPES, FlatNumbers, TypeFields, stored_type
from arrow_split._codecs._numeric import (
    as_array,
    check_array_dtype,
    concatenate,
    finish,
    is_array,
    offsets_from_lengths,
    target_dtype,
)
from arrow_split._codecs.per_token import RaggedCodec
from arrow_split.errors import ColumnTypeError, RaggedLengthError, SchemaError

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = ["TensorCodec"]


def _flatten_nested(value: object) -> list[object]:
    """The leaves of nested lists and tuples, in row-major order (a non-list is one leaf)."""
    if not isinstance(value, (list, tuple)):
        return [value]
    leaves: list[object] = []
    for item in value:
        leaves.extend(_flatten_nested(item))
    return leaves


def _locate_nested(spec: ColumnSpec, sample: int, value: object, dtype: np.dtype) -> None:
    """For nested Python lists numpy could not type as numbers: raise on the first bad value."""
    numbers = "biuf" if target_dtype(spec).kind == "f" else "biu"
    if is_array(value) or dtype.kind in numbers:
        return
    locate_python_value(
        spec.name,
        [_flatten_nested(value)],
        target=target_dtype(spec),
        flag=spec.flag,
        ragged=True,
        cause=f"an array of dtype {dtype}",
        start=sample,
    )


def _tensor_array(spec: ColumnSpec, sample: int, value: object) -> np.ndarray:
    array = as_array(value, spec.name, At(sample=sample))
    if array.size and array.ndim:
        _locate_nested(spec, sample, value, array.dtype)
    if array.ndim == 0:
        expected, got = "an array of shape [rows, ...] per sample", f"the scalar {value!r:.40}"
        raise ColumnTypeError(key=spec.name, sample=sample, expected=expected, got=got)
    if array.size and array.dtype.kind not in "biuf":
        expected = "numbers"
        got = f"an array of dtype {array.dtype} (None values, or rows of different lengths?)"
        msg = f"`{spec.name}` must hold {expected}, got {got}"
        raise ColumnTypeError(msg, key=spec.name, sample=sample, expected=expected, got=got)
    if array.size:
        check_array_dtype(spec, array.dtype, At(sample=sample), value)
    return array


def _tensor_arrays(spec: ColumnSpec, samples: Sequence[object]) -> list[np.ndarray]:
    """Per-sample arrays of one trailing shape (empty samples reshaped to it)."""
    arrays = [_tensor_array(spec, sample, value) for sample, value in enumerate(samples)]
    shaped = [(i, a) for i, a in enumerate(arrays) if a.size or a.ndim > 1]
    trailing = shaped[0][1].shape[1:] if shaped else ()
    for sample, array in shaped:
        if array.shape[1:] != trailing:
            msg = (
                f"`{spec.name}` has trailing shape {array.shape[1:]} but an earlier sample has "
                f"{trailing}; every sample must have the same shape after the first axis"
            )
            raise RaggedLengthError(
                msg, key=spec.name, sample=sample, expected=str(trailing), got=str(array.shape[1:])
            )
    if 0 in trailing:
        msg = (
            f"`{spec.name}` has trailing shape {trailing}; every axis after the first must have "
            "at least one element (an empty sample is shape [0, ...])"
        )
        raise RaggedLengthError(msg, key=spec.name, sample=shaped[0][0], got=str(trailing))
    target = target_dtype(spec)
    return [
        array if array.size else np.empty((len(array), *trailing), dtype=target) for array in arrays
    ]


def _fits(arrow_type: pa.DataType, low: int, high: int) -> bool:
    info = np.iinfo(numpy_dtype(arrow_type))
    return bool(info.min <= low and high <= info.max)


def _narrow_values(spec: ColumnSpec, arrays: Sequence[np.ndarray]) -> pa.Array | None:
    """The flat values in the narrowest storage type; ``None`` if one is out of range."""
    filled = [array for array in arrays if array.size]
    low = min((int(array.min()) for array in filled), default=0)
    high = max((int(array.max()) for array in filled), default=0)
    storage = next((t for t in spec.storage_types if _fits(t, low, high)), None)
    if storage is None:
        return None  # the exact path locates the value and raises
    dtype = numpy_dtype(storage)
    count = sum(array.size for array in filled)
    buffer = pa.allocate_buffer(count * dtype.itemsize)
    flat = np.frombuffer(buffer, dtype=dtype)
    if filled:
        np.concatenate([a.reshape(-1) for a in filled], out=flat, casting="unsafe")
    return pa.Array.from_buffers(storage, count, [None, buffer])


class TensorCodec(RaggedCodec):
    """Per-sample arrays whose trailing shape lives in the Arrow type (lengths count rows)."""

    text = "one tensor per sample (rows of a trailing shape)"

    def check_spec(self, spec: ColumnSpec) -> None:
        super().check_spec(spec)
        if pa.types.is_boolean(spec.value_type):
            msg = f"column `{spec.name}`: tensor columns hold integers or floats, got bool"
            raise SchemaError(msg, key=spec.name)

    def check_storage(self, spec: ColumnSpec) -> None:
        if spec.value_type not in NARROWABLE_TYPES or spec.flag:
            super().check_storage(spec)

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        arrays = _tensor_arrays(spec, samples)
        trailing: tuple[int, ...] = arrays[0].shape[1:] if arrays else ()
        rows = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
        offsets = offsets_from_lengths(rows)
        child = _narrow_values(spec, arrays) if spec.storage == "narrow" else None
        if child is None:
            stacked = concatenate(spec, arrays)
            width = int(np.prod(trailing, dtype=np.int64))
            child = pa.array(finish(spec, stacked.reshape(-1), offsets * width, options))
        return pa.LargeListArray.from_arrays(pa.array(offsets), nest(child, trailing)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        values, offsets = ragged_values(array)
        target = target_dtype(spec)
        if values.dtype != target:  # narrow storage: give back the logical type
            values = values.astype(target)
        return list(split_by_offsets(values, offsets))

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        trailing = fields.trailing if fields is not None else ()
        return list_type(stored_type(spec, fields), trailing)

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        if not is_list(arrow_type) or 0 in trailing_shape(arrow_type):  # `encode` refuses a 0 axis
            return None
        return TypeFields(storage=leaf_type(arrow_type), trailing=trailing_shape(arrow_type))

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        values, offsets = ragged_values(array)
        width = int(np.prod(values.shape[1:], dtype=np.int64))
        return FlatNumbers(values.reshape(-1), offsets * width)
