"""A batch's columns as read-only numpy views (for tensors), and NaN-aware equality.

Equality is a NaN-position compare: NaN equals NaN at the same place, whatever its bits, so a
batch built with ``allow_nonfinite=True`` equals itself.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TypeVar

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._codecs._base import data_buffer, numpy_view, parts
from arrow_split._codecs._kind import TensorRole
from arrow_split.errors import ColumnNotFoundError, SchemaError, SchemaTypeError
from arrow_split.schema import ColumnSpec

__all__ = [
    "ColumnValues",
    "arrays_equal",
    "column_of",
    "lengths_of",
    "numeric_columns",
    "record_batches_equal",
    "role_values",
    "values_equal",
]

_Array = TypeVar("_Array", bound=np.ndarray | None)


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnValues:
    """A numeric column as read-only numpy arrays, for the leaves that make tensors.

    ``values`` views ``buffer`` (booleans: a fresh unpacked array); ``offsets`` (int64 from 0)
    for ragged columns, else ``None``; a list per token (``token_lists``) has ``offsets`` into
    its tokens and ``token_offsets`` into ``values``. ``buffer.is_mutable``: private to this
    process.
    """

    spec: ColumnSpec
    role: TensorRole
    values: np.ndarray
    offsets: np.ndarray | None
    buffer: pa.Buffer | None
    token_offsets: np.ndarray | None = None


def numeric_columns(
    record_batch: pa.RecordBatch, specs: Mapping[str, ColumnSpec]
) -> list[ColumnValues]:
    """The columns of ``record_batch`` a tensor can be made of (its codec says), in order."""
    found = []
    for name, array in zip(record_batch.schema.names, record_batch.columns, strict=True):
        codec = codec_for(specs[name])
        tensor = codec.tensor_values(array)
        if tensor is None:
            continue
        found.append(
            ColumnValues(
                specs[name],
                codec.tensor_role,
                _read_only(tensor.values),
                _read_only(tensor.offsets),
                data_buffer(array),
                _read_only(tensor.token_offsets),
            )
        )
    return found


def column_of(record_batch: pa.RecordBatch, name: object) -> pa.Array:
    """The Arrow array of one per-sample key (``RolloutBatch.column``)."""
    if not isinstance(name, str):
        msg = f"`name` must be a str (a column's key), got {type(name).__name__}"
        raise SchemaTypeError(msg, key="name")
    names = record_batch.schema.names
    if name not in names:
        msg = f"no per-sample column `{name}`; the batch has: {', '.join(names)}"
        raise ColumnNotFoundError(msg, key=name)
    return record_batch.column(name)


def lengths_of(column: pa.Array) -> np.ndarray:
    """Values per sample of a list column (int64, read-only): the length source's token counts."""
    lengths: np.ndarray = np.diff(column.offsets.to_numpy()).astype(np.int64, copy=False)
    return _read_only(lengths)


def role_values(
    record_batch: pa.RecordBatch, specs: Mapping[str, ColumnSpec], name: str | None, role: str
) -> np.ndarray | None:
    """The values of the column ``name`` playing ``role`` (read-only), if one number per sample."""
    if name is None or name not in record_batch.schema.names:
        return None
    if not codec_for(specs[name]).one_number:
        msg = (
            f"role {role!r} is played by `{name}`, a {specs[name].kind} column; "
            "`role_values` gives the one value per sample of a per_sample_scalar column: "
            f"use `total_lengths` for its lengths, or `column({name!r})` for its values"
        )
        raise SchemaError(msg, key=name)
    return _read_only(numpy_view(record_batch.column(name)))  # booleans: fresh memory


def _read_only(array: _Array) -> _Array:
    """``array`` with its writeable flag cleared (a flag of this array object only), or None."""
    if array is not None:
        array.flags.writeable = False
    return array


def _holds_floats(data_type: pa.DataType) -> bool:
    if pa.types.is_floating(data_type):
        return True
    return any(_holds_floats(data_type.field(i).type) for i in range(data_type.num_fields))


def arrays_equal(left: pa.Array, right: pa.Array) -> bool:
    """Whether two Arrow arrays are equal, NaN equal to NaN at the same place."""
    if left.type != right.type or len(left) != len(right):
        return False
    if left.equals(right):
        return True
    if pa.types.is_dictionary(left.type):  # the same values, whatever each dictionary holds
        value_type = left.type.value_type
        return arrays_equal(left.cast(value_type), right.cast(value_type))
    if not _holds_floats(left.type) or not left.is_null().equals(right.is_null()):
        return False
    if pa.types.is_floating(left.type):
        return bool(
            np.array_equal(
                left.to_numpy(zero_copy_only=False),
                right.to_numpy(zero_copy_only=False),
                equal_nan=True,
            )
        )
    left_parts, right_parts = parts(left), parts(right)
    if left_parts is None or right_parts is None:
        return False
    return all(arrays_equal(a, b) for a, b in zip(left_parts, right_parts, strict=True))


def record_batches_equal(left: pa.RecordBatch, right: pa.RecordBatch) -> bool:
    """Same schema (metadata aside, as ``RecordBatch.equals``), columns by :func:`arrays_equal`."""
    return left.schema.equals(right.schema) and all(
        arrays_equal(a, b) for a, b in zip(left.columns, right.columns, strict=True)
    )


def values_equal(left: object, right: object) -> bool:
    """Python values (batch globals, decoded) equal, NaN equal to NaN; arrays by dtype too."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        if not (isinstance(left, np.ndarray) and isinstance(right, np.ndarray)):
            return False
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        nan_aware = left.dtype.kind in "fc"
        return bool(np.array_equal(left, right, equal_nan=nan_aware))
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isnan(left) and math.isnan(right))
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return (
            type(left) is type(right)
            and len(left) == len(right)
            and all(values_equal(a, b) for a, b in zip(left, right, strict=True))
        )
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(values_equal(left[k], right[k]) for k in left)
    return bool(left == right)
