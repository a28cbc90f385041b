"""Numpy views of Arrow columns.

:func:`ragged_values` is the one place that reads a list column's values and offsets: it honours
a slice offset (``ListArray.values`` ignores it, ``offsets[0]`` does not) and returns numpy views,
not copies. A view of read-only memory (the object store's) is read-only.

The takes (a list row's values copied as one run) are :mod:`arrow_split._codecs._take`'s.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

__all__ = [
    "child_nulls",
    "data_buffer",
    "numpy_dtype",
    "numpy_view",
    "ragged_values",
    "split_by_offsets",
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
