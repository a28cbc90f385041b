"""Numpy views of Arrow columns, and the take that copies a list row's values as one run.

:func:`ragged_values` is the one place that reads a list column's values and offsets: it honours
a slice offset (``ListArray.values`` ignores it, ``offsets[0]`` does not) and returns numpy views,
not copies. A view of read-only memory (the object store's) is read-only.

Arrow's ``take`` on a list column gathers the child values one by one; a rollout sample is one
contiguous run of thousands of values, so :func:`take_runs` copies each selected row's run whole
(one ``np.concatenate`` of views into a buffer of Arrow's memory pool, so that
``pyarrow.total_allocated_bytes()`` counts it). The result owns new buffers: never a slice view
of its parent, so pickling it ships only its own bytes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from arrow_split._codecs._types import is_list, leaf_type, nest, trailing_shape

__all__ = [
    "child_nulls",
    "data_buffer",
    "numpy_dtype",
    "numpy_view",
    "ragged_values",
    "split_by_offsets",
    "take_runs",
]


@functools.lru_cache(maxsize=64)
def numpy_dtype(value_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a primitive Arrow type (cached; never imports pandas).

    ``DataType.to_pandas_dtype`` needs pandas on older pyarrow (16): an empty array's
    ``to_numpy`` gives the same dtype without it.
    """
    dtype: np.dtype = pa.array([], type=value_type).to_numpy(zero_copy_only=False).dtype
    return dtype


def numpy_view(array: pa.Array) -> np.ndarray:
    """A numpy view of a primitive array without nulls (booleans are unpacked: a copy)."""
    if pa.types.is_boolean(array.type):
        return _unpack_bits(array)
    return np.asarray(array.to_numpy(zero_copy_only=True))


def _unpack_bits(array: pa.Array) -> np.ndarray:
    """A boolean array without nulls as a numpy ``bool`` array, unpacked by numpy.

    Not ``to_numpy``: pyarrow unpacks booleans into a buffer of Arrow's process-wide C++ pool,
    which ignores ``pyarrow.set_memory_pool``; a process's first such buffer maps that pool's
    arena and faults in a huge page (milliseconds on a virtual machine, in a rank's first step).
    numpy's memory comes from the heap that :func:`arrow_split.ray.warm_up` keeps.
    """
    length = len(array)
    bitmap = array.buffers()[1]
    if bitmap is None or length == 0:
        return np.zeros(length, dtype=np.bool_)
    first, shift = divmod(array.offset, 8)
    packed = np.frombuffer(bitmap, dtype=np.uint8)[first : first + -(-(shift + length) // 8)]
    return np.unpackbits(packed, bitorder="little")[shift : shift + length].view(np.bool_)


def ragged_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(values, offsets)`` of a list column as numpy, offsets starting at 0.

    For a ``per_sample_tensor`` column the values have shape ``[rows, *trailing]``, with the
    trailing shape read from the nested ``fixed_size_list`` types.
    """
    raw_offsets = array.offsets.to_numpy()
    start, stop = int(raw_offsets[0]), int(raw_offsets[-1])
    child = array.values.slice(start, stop - start)
    trailing: list[int] = []
    while pa.types.is_fixed_size_list(child.type):
        trailing.append(child.type.list_size)
        child = child.flatten()
    values = numpy_view(child).reshape(-1, *trailing) if trailing else numpy_view(child)
    offsets = raw_offsets - start if start else raw_offsets
    return values, offsets


def child_nulls(array: pa.Array) -> int:
    """Nulls in the values of a list column, at any level of nesting (0 for a flat column)."""
    count = 0
    while pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.values
        count += array.null_count
    return count


def data_buffer(array: pa.Array) -> pa.Buffer | None:
    """The buffer that holds a column's numbers (the innermost child's data buffer)."""
    while pa.types.is_large_list(array.type) or pa.types.is_fixed_size_list(array.type):
        array = array.values
    return array.buffers()[1]


def split_by_offsets(values: np.ndarray, offsets: np.ndarray) -> Iterator[np.ndarray]:
    """Yield one view of ``values`` per sample."""
    for begin, end in itertools.pairwise(offsets.tolist()):
        yield values[begin:end]


def copies_runs(array: pa.Array) -> bool:
    """Whether a column is a ``large_list`` of fixed-width numbers without nulls."""
    if not is_list(array.type) or array.null_count:
        return False
    leaf = leaf_type(array.type)
    return (pa.types.is_integer(leaf) or pa.types.is_floating(leaf)) and not leaf.bit_width % 8


def _pool_array(shape: tuple[int, ...], dtype: np.dtype) -> tuple[pa.Buffer, np.ndarray]:
    """A writable numpy view of a new buffer from Arrow's memory pool (counted and aligned)."""
    buffer = pa.allocate_buffer(math.prod(shape) * dtype.itemsize)
    return buffer, np.frombuffer(buffer, dtype=dtype).reshape(shape)


def _rebuild(list_type: pa.DataType, offsets: pa.Array, values: pa.Buffer, count: int) -> pa.Array:
    """Wrap gathered leaf values (``count`` of them) and offsets as a column of ``list_type``."""
    child = pa.Array.from_buffers(leaf_type(list_type), count, [None, values])
    return pa.LargeListArray.from_arrays(offsets, nest(child, trailing_shape(list_type)))


def take_runs(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` of a list column of numbers, each row's values copied as one run."""
    if not copies_runs(array):
        return array.take(pa.array(indices, type=pa.int64()))
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
