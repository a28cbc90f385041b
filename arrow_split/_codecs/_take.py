"""The takes of numeric columns: a row's values copied as one run, a few microseconds per call.

A rank's take runs once per step on a fresh batch, so nothing here is cached per batch: what a
call costs beyond copying its bytes is what it does in Python, and at 64 rows that is most of it
unless every step is one numpy or pyarrow call. Both takes read the column's buffers directly
(``Array.buffers()``, no intermediate arrays), copy into buffers of Arrow's memory pool (so that
``pyarrow.total_allocated_bytes()`` counts them) and build the result with one
``Array.from_buffers`` per level:

- :func:`take_runs`: a ``large_list`` of fixed-width numbers (any ``fixed_size_list`` nesting)
  without nulls: each selected row's values are one contiguous run of the leaf buffer, copied
  whole by one ``np.concatenate`` of views; the new offsets are one ``cumsum``.
- :func:`take_fixed`: a column of fixed-width numbers without nulls: one ``np.take``.

Anything else (nulls, booleans, strings, dictionaries) is Arrow's own ``take``. Either way the
result owns new buffers: never a slice view of its parent, so pickling it ships only its own
bytes.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pyarrow as pa

__all__ = ["arrow_take", "take_fixed", "take_runs"]


def arrow_take(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """Arrow's own take (fresh buffers): the path for anything the numpy takes do not cover."""
    return array.take(pa.array(indices, type=pa.int64()))


@functools.lru_cache(maxsize=256)
def _fixed_width(arrow_type: pa.DataType) -> np.dtype | None:
    """The numpy dtype of an integer or float Arrow type of whole bytes, else ``None``."""
    if not (pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type)):
        return None
    if arrow_type.bit_width % 8:  # pragma: no cover - every integer and float type is whole bytes
        return None
    dtype: np.dtype = pa.array([], type=arrow_type).to_numpy(zero_copy_only=False).dtype
    return dtype


@functools.lru_cache(maxsize=256)
def _run_layout(list_type: pa.DataType) -> tuple[np.dtype, tuple[pa.DataType, ...], int] | None:
    """How a list column's runs lie: leaf dtype, the types from the item down, values per row.

    ``None`` unless ``list_type`` is a ``large_list`` whose leaf (under any ``fixed_size_list``
    levels) is a fixed-width number.
    """
    if not pa.types.is_large_list(list_type):
        return None
    levels = [list_type.value_type]
    per_row = 1
    while pa.types.is_fixed_size_list(levels[-1]):
        per_row *= levels[-1].list_size
        levels.append(levels[-1].value_type)
    dtype = _fixed_width(levels[-1])
    if dtype is None:
        return None
    return dtype, tuple(levels), per_row


def _pool(count: int, dtype: np.dtype) -> tuple[pa.Buffer, np.ndarray]:
    """A new buffer of Arrow's memory pool for ``count`` values, and a writable view of it."""
    buffer = pa.allocate_buffer(count * dtype.itemsize)
    return buffer, np.frombuffer(buffer, dtype=dtype, count=count)


def take_fixed(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` (checked int64) of a column of numbers: one ``np.take``."""
    dtype = _fixed_width(array.type)
    if dtype is None or array.null_count:
        return arrow_take(array, indices)
    start = array.offset * dtype.itemsize
    values = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=start)
    buffer, out = _pool(len(indices), dtype)
    np.take(values, indices, out=out)
    return pa.Array.from_buffers(array.type, len(indices), [None, buffer])


def _leaf_start(array: pa.Array) -> tuple[pa.Array, int]:
    """The leaf array under a list column, and the leaf index of its child's first element.

    Each level's own ``offset`` counts: an item at child position ``j`` starts at leaf index
    ``j * per_row + start``.
    """
    child = array.values
    start = child.offset
    while pa.types.is_fixed_size_list(child.type):
        size = child.type.list_size
        child = child.values
        start = start * size + child.offset
    return child, start


def take_runs(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` (checked int64) of a list column of numbers, each row as one run."""
    layout = _run_layout(array.type)
    if layout is None or array.null_count:
        return arrow_take(array, indices)
    dtype, levels, per_row = layout
    leaf, base = _leaf_start(array)
    if leaf.null_count or any(level.null_count for level in _items(array, len(levels) - 1)):
        return arrow_take(array, indices)
    offsets = np.frombuffer(
        array.buffers()[1], dtype=np.int64, count=len(array) + 1, offset=array.offset * 8
    )
    starts = offsets[indices]
    ends = offsets[indices + 1]
    offsets_buffer, new_offsets = _pool(len(indices) + 1, np.dtype(np.int64))
    new_offsets[0] = 0
    np.cumsum(ends - starts, out=new_offsets[1:])
    rows = int(new_offsets[-1])
    flat = np.frombuffer(leaf.buffers()[1], dtype=dtype)
    values_buffer, gathered = _pool(rows * per_row, dtype)
    if rows:
        lo = (starts * per_row + base).tolist()
        hi = (ends * per_row + base).tolist()
        np.concatenate([flat[a:b] for a, b in zip(lo, hi, strict=True)], out=gathered)
    return _assemble(array.type, levels, offsets_buffer, values_buffer, len(indices), rows)


def _items(array: pa.Array, depth: int) -> list[pa.Array]:
    """The ``fixed_size_list`` levels under a list column (``depth`` of them), outermost first."""
    found = []
    child = array.values
    for _ in range(depth):
        found.append(child)
        child = child.values
    return found


def _assemble(
    list_type: pa.DataType,
    levels: tuple[pa.DataType, ...],
    offsets: pa.Buffer,
    values: pa.Buffer,
    length: int,
    rows: int,
) -> pa.Array:
    """A ``list_type`` column of ``length`` rows over gathered offsets and leaf values."""
    count = rows * math.prod(level.list_size for level in levels[:-1])
    child = pa.Array.from_buffers(levels[-1], count, [None, values])
    for level in reversed(levels[:-1]):
        count //= level.list_size
        child = pa.Array.from_buffers(level, count, [None], children=[child])
    return pa.Array.from_buffers(list_type, length, [None, offsets], children=[child])
