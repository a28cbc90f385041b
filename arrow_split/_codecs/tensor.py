"""The ``per_sample_tensor`` codec: one ``[rows, *trailing]`` array per sample.

The trailing shape becomes nested ``fixed_size_list`` types, so it travels with the column:
``large_list<fixed_size_list<fixed_size_list<value_type, top_k>, layers>>``. Every sample must
have the same trailing shape; an empty sample takes the shape of the others.

Narrow storage (``ColumnSpec(storage="narrow")``, the routed experts): the values are checked
against ``value_type`` (the logical type), then stored in the first of
:attr:`~arrow_split.schema.ColumnSpec.storage_types` that holds the batch's smallest and largest
value: uint8 for expert ids < 256, uint16 below 65536, else int32 (negative ids too). The bounds
come from one min/max pass per sample array (none for a uint8 array, which fits anyway), and the
samples are concatenated straight into the narrow buffer: a wide input is never copied wide.
:meth:`TensorCodec.decode` gives back ``value_type`` arrays whatever the storage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from arrow_split._codecs._arrow import numpy_dtype, ragged_values, split_by_offsets
from arrow_split._codecs._base import Codec, EncodeOptions, FlatNumbers, TypeFields, stored_type
from arrow_split._codecs._checks import flatten_nested, locate_python_value
from arrow_split._codecs._numeric import (
    as_array,
    check_array_dtype,
    exact_integers,
    finish,
    is_array,
    offsets_from_lengths,
    target_dtype,
)
from arrow_split._codecs._take import take_runs
from arrow_split._codecs._types import is_list, leaf_type, list_type, nest, trailing_shape
from arrow_split.errors import ColumnTypeError, RaggedLengthError
from arrow_split.schema import ColumnSpec

__all__ = ["TensorCodec"]


def _locate_nested(spec: ColumnSpec, sample: int, value: object, dtype: np.dtype) -> None:
    """For nested Python lists numpy could not type as numbers: raise on the first bad value."""
    numbers = "biuf" if target_dtype(spec).kind == "f" else "biu"
    if is_array(value) or dtype.kind in numbers:
        return
    locate_python_value(
        spec.name,
        [flatten_nested(value)],
        target=target_dtype(spec),
        flag=spec.flag,
        ragged=True,
        cause=f"an array of dtype {dtype}",
        start=sample,
    )


def _tensor_array(spec: ColumnSpec, sample: int, value: object) -> np.ndarray:
    array = as_array(value, spec.name, f"sample {sample}")
    if array.size and array.ndim:
        _locate_nested(spec, sample, value, array.dtype)
    if array.ndim == 0:
        msg = (
            f"sample {sample}: `{spec.name}` must be an array of shape [rows, ...] per sample, "
            f"got the scalar {value!r:.40}"
        )
        raise ColumnTypeError(msg)
    if array.size and array.dtype.kind not in "biuf":
        msg = (
            f"sample {sample}: `{spec.name}` must hold numbers, got an array of dtype "
            f"{array.dtype} (None values, or rows of different lengths?)"
        )
        raise ColumnTypeError(msg)
    if array.size:
        check_array_dtype(spec, array.dtype, f"sample {sample}")
    return array


def _tensor_arrays(spec: ColumnSpec, samples: Sequence[object]) -> list[np.ndarray]:
    """Per-sample arrays of one trailing shape (empty samples reshaped to it)."""
    arrays = [_tensor_array(spec, sample, value) for sample, value in enumerate(samples)]
    shaped = [(i, a) for i, a in enumerate(arrays) if a.size or a.ndim > 1]
    trailing = shaped[0][1].shape[1:] if shaped else ()
    for sample, array in shaped:
        if array.shape[1:] != trailing:
            msg = (
                f"sample {sample}: `{spec.name}` has trailing shape {array.shape[1:]} but sample "
                f"{shaped[0][0]} has {trailing}; every sample must have the same shape after the "
                "first axis"
            )
            raise RaggedLengthError(msg)
    if 0 in trailing:
        msg = (
            f"sample {shaped[0][0]}: `{spec.name}` has trailing shape {trailing}; every axis after "
            "the first must have at least one element (an empty sample is shape [0, ...])"
        )
        raise RaggedLengthError(msg)
    target = target_dtype(spec)
    return [
        array if array.size else np.empty((len(array), *trailing), dtype=target) for array in arrays
    ]


def _bounds(arrays: Sequence[np.ndarray]) -> tuple[int, int]:
    """The smallest and largest value of integer arrays (0, 0 for arrays that fit uint8)."""
    low = high = 0
    for array in arrays:
        if np.can_cast(array.dtype, np.uint8):
            continue
        low, high = min(low, int(array.min())), max(high, int(array.max()))
    return low, high


def _fits(arrow_type: pa.DataType, low: int, high: int) -> bool:
    info = np.iinfo(numpy_dtype(arrow_type))
    return bool(info.min <= low and high <= info.max)


def _narrow_values(spec: ColumnSpec, arrays: Sequence[np.ndarray]) -> pa.Array | None:
    """The flat values in the narrowest storage type; ``None`` if one is out of range."""
    filled = [array for array in arrays if array.size]
    low, high = _bounds(filled)
    if not _fits(spec.storage_types[-1], low, high):
        return None  # the exact path locates the value and raises
    storage = next(t for t in spec.storage_types if _fits(t, low, high))
    dtype = numpy_dtype(storage)
    count = sum(array.size for array in filled)
    buffer = pa.allocate_buffer(count * dtype.itemsize)
    flat = np.frombuffer(buffer, dtype=dtype)
    if filled:
        np.concatenate([a.reshape(-1) for a in filled], out=flat, casting="unsafe")
    return pa.Array.from_buffers(storage, count, [None, buffer])


class TensorCodec(Codec):
    """Per-sample arrays whose trailing shape lives in the Arrow type."""

    tensor_role = "ragged"

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        arrays = _tensor_arrays(spec, samples)
        trailing: tuple[int, ...] = arrays[0].shape[1:] if arrays else ()
        rows = np.fromiter((len(array) for array in arrays), dtype=np.int64, count=len(arrays))
        offsets = offsets_from_lengths(rows)
        child = _narrow_values(spec, arrays) if spec.storage == "narrow" else None
        if child is None:
            target = target_dtype(spec)
            filled = [array for array in arrays if array.size]  # an empty one must not upcast
            if target.kind in "iu":
                filled = exact_integers(spec.name, filled, arrays)
            stacked = np.concatenate(filled) if filled else np.empty(0, dtype=target)
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
        if not is_list(arrow_type):
            return None
        return TypeFields(storage=leaf_type(arrow_type), trailing=trailing_shape(arrow_type))

    def lengths(self, array: pa.Array) -> np.ndarray:
        offsets: np.ndarray = array.offsets.to_numpy()
        lengths: np.ndarray = offsets[1:] - offsets[:-1]
        return lengths

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        values, offsets = ragged_values(array)
        width = int(np.prod(values.shape[1:], dtype=np.int64))
        return FlatNumbers(values.reshape(-1), offsets * width)

    def take(self, array: pa.Array, indices: np.ndarray) -> pa.Array:
        return take_runs(array, indices)
