"""Gather rows of a record batch into fresh, compact buffers.

Arrow's ``take`` on a list column gathers the child values one by one; a rollout sample is one
contiguous run of thousands of values, so this module copies each selected row's run whole
(``np.concatenate`` of views into a buffer of Arrow's memory pool, so that
``pyarrow.total_allocated_bytes()`` still counts it), which is several times faster on token-sized
rows. It handles the
columns the library builds for numbers: ``large_list`` of a primitive type, possibly nested in
``fixed_size_list`` (per-sample tensors), without nulls. Every other column (strings, pickled
objects, scalars) goes through Arrow's own ``take``. Either way the result owns new buffers:
never a slice view of its parent, so pickling it ships only its own bytes.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from arrow_split.decode import ragged_values

__all__ = ["take_record_batch"]


def _leaf_type(list_type: pa.DataType) -> pa.DataType:
    child = list_type.value_type
    while pa.types.is_fixed_size_list(child):
        child = child.value_type
    return child


def _copies_runs(array: pa.Array) -> bool:
    """Whether a column is a ``large_list`` of fixed-width numbers without nulls."""
    if not pa.types.is_large_list(array.type) or array.null_count:
        return False
    leaf = _leaf_type(array.type)
    return (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)) and not leaf.bit_width % 8


def _pool_array(shape: tuple[int, ...], dtype: np.dtype) -> tuple[pa.Buffer, np.ndarray]:
    """A writable numpy view of a new buffer from Arrow's memory pool (counted and aligned)."""
    buffer = pa.allocate_buffer(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return buffer, np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _rebuild(list_type: pa.DataType, offsets: pa.Array, values: pa.Buffer, count: int) -> pa.Array:
    """Wrap gathered leaf values (``count`` of them) and offsets as a column of ``list_type``."""
    child = pa.Array.from_buffers(_leaf_type(list_type), count, [None, values])
    sizes = []
    nested = list_type.value_type
    while pa.types.is_fixed_size_list(nested):
        sizes.append(nested.list_size)
        nested = nested.value_type
    for size in reversed(sizes):
        child = pa.FixedSizeListArray.from_arrays(child, size)
    return pa.LargeListArray.from_arrays(offsets, child)


def _take_runs(array: pa.Array, indices: np.ndarray) -> pa.Array:
    values, offsets = ragged_values(array)
    starts, ends = offsets[indices], offsets[indices + 1]
    offsets_buffer, new_offsets = _pool_array((len(indices) + 1,), np.dtype(np.int64))
    new_offsets[0] = 0
    np.cumsum(ends - starts, out=new_offsets[1:])
    rows = int(new_offsets[-1])
    values_buffer, gathered = _pool_array((rows, *values.shape[1:]), values.dtype)
    runs = [values[start:end] for start, end in zip(starts.tolist(), ends.tolist(), strict=True)]
    if runs:
        np.concatenate(runs, out=gathered)
    arrow_offsets = pa.Array.from_buffers(pa.int64(), len(indices) + 1, [None, offsets_buffer])
    return _rebuild(array.type, arrow_offsets, values_buffer, gathered.size)


def take_record_batch(record_batch: pa.RecordBatch, indices: np.ndarray) -> pa.RecordBatch:
    """The rows ``indices`` (int64) of ``record_batch``, every column in fresh buffers."""
    arrow_indices = pa.array(indices, type=pa.int64())
    columns = [
        _take_runs(column, indices) if _copies_runs(column) else column.take(arrow_indices)
        for column in record_batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)
