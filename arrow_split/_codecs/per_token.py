"""The ``per_token`` kind: a ragged list of numbers per sample, one value per token.

Stored as ``large_list<value_type>``; a take copies each row's values as one run, a padding row
gets the padding value at every token, and the tensor is its values and offsets.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import (
    EncodeOptions,
    RunsMemo,
    is_list,
    leaf_type,
    list_type,
    nest,
    ragged_values,
    split_by_offsets,
    take_runs,
    trailing_shape,
)
from arrow_split._codecs._checks import At, check_list_samples
from arrow_split._codecs._kind import FlatNumbers, NumbersCodec, TensorRole, TypeFields, stored_type
from arrow_split._codecs._numeric import (
    as_array,
    finish,
    flat_from_arrays,
    flat_from_python,
    is_array,
)

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec

__all__ = ["RaggedCodec"]


class RaggedCodec(NumbersCodec):
    """Ragged lists of numbers; a take copies each row's values as one run."""

    text = "one value per token"

    tensor_role: ClassVar[TensorRole] = "ragged"
    takes_length = True  # so do its subclasses, lists per token and tensors

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        # the common case: plain lists (in a list, or in a numpy object array); an empty column
        # goes the array way, which takes an empty list and an empty 2-D array alike
        if len(samples) and all(type(sample) is list for sample in samples):
            values, offsets = flat_from_python(spec, samples)
        elif all(is_array(sample) for sample in samples):
            values, offsets = flat_from_arrays(spec, samples)
        else:
            mixed = [
                as_array(s, spec.name, At(sample=i)).tolist() if is_array(s) else s
                for i, s in enumerate(samples)
            ]
            check_list_samples(spec.name, mixed)
            values, offsets = flat_from_python(spec, mixed)
        values = finish(spec, values, offsets, options)
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        values, offsets = ragged_values(array)
        return [part.tolist() for part in split_by_offsets(values, offsets)]

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return list_type(stored_type(spec, fields))

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        if not is_list(arrow_type) or trailing_shape(arrow_type):
            return None
        return TypeFields(storage=arrow_type.value_type)

    def lengths(self, array: pa.Array) -> np.ndarray:
        return np.diff(array.offsets.to_numpy())

    def flat_numbers(self, array: pa.Array) -> FlatNumbers:
        return FlatNumbers(*ragged_values(array))

    def take(self, array: pa.Array, indices: np.ndarray, memo: RunsMemo | None = None) -> pa.Array:
        return take_runs(array, indices, memo)

    def tensor_values(self, array: pa.Array) -> FlatNumbers:
        return FlatNumbers(*ragged_values(array))

    def fill(self, array: pa.Array, rows: np.ndarray, value: int) -> pa.Array:
        values, offsets = ragged_values(array)
        filled = values.copy()
        filled[np.repeat(rows, np.diff(offsets))] = value
        child = pa.array(filled.reshape(-1), type=leaf_type(array.type))
        offsets_array = pa.array(offsets, type=pa.int64())
        return pa.LargeListArray.from_arrays(offsets_array, nest(child, filled.shape[1:]))
