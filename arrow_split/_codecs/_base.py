"""The Arrow layout the kinds speak: list types, numpy views, and the take kernels.

A list column is ``large_list<item>``, a tensor's item one ``fixed_size_list`` per trailing axis.
Takes copy into fresh pool buffers, never a slice of the parent (a pickle ships its own bytes).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc  # Arrow's take needs it: loaded with the core, not in a first call

from arrow_split._codecs._buffers import number_lists, number_view

__all__ = [
    "EncodeOptions",
    "RunsMemo",
    "arrow_take",
    "child_nulls",
    "data_buffer",
    "is_list",
    "leaf_type",
    "list_type",
    "nest",
    "numpy_dtype",
    "numpy_view",
    "parts",
    "ragged_values",
    "short_type",
    "split_by_offsets",
    "take_fixed",
    "take_runs",
    "trailing_shape",
]


@dataclasses.dataclass(frozen=True, slots=True)
class EncodeOptions:
    """Switches of :meth:`RolloutBatch.from_train_data` that change how values are checked."""

    allow_nonfinite: bool = False  # keep NaN and infinity in float columns
    exact_floats: bool = False  # reject a float a float32 column would round (else rounded)
    first_sample: int = 0  # the batch's index of the first sample encoded (a builder's group)


# --- Arrow types ---------------------------------------------------------------------------------


def is_list(arrow_type: pa.DataType) -> bool:
    """Whether ``arrow_type`` is a list column's type (``large_list``, the only one made)."""
    return bool(pa.types.is_large_list(arrow_type))


def list_type(value_type: pa.DataType, trailing: Sequence[int] = ()) -> pa.DataType:
    """``large_list`` of ``value_type`` items, nested in one ``fixed_size_list`` per axis."""
    item = value_type
    for size in reversed(trailing):
        item = pa.list_(item, size)
    return pa.large_list(item)


def nest(values: pa.Array, trailing: Sequence[int]) -> pa.Array:
    """Flat ``values`` wrapped in one ``fixed_size_list`` level per trailing axis."""
    for size in reversed(trailing):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    return values


def trailing_shape(arrow_type: pa.DataType) -> tuple[int, ...]:
    """The sizes of the ``fixed_size_list`` levels under a list type (``()`` for none)."""
    sizes: list[int] = []
    child = arrow_type.value_type
    while pa.types.is_fixed_size_list(child):
        sizes.append(child.list_size)
        child = child.value_type
    return tuple(sizes)


def leaf_type(arrow_type: pa.DataType) -> pa.DataType:
    """The type of the numbers under a list type's ``fixed_size_list`` levels."""
    child = arrow_type.value_type
    while pa.types.is_fixed_size_list(child):
        child = child.value_type
    return child


def parts(array: pa.Array) -> list[pa.Array] | None:
    """The arrays a nested column is made of, to compare part by part; ``None`` for a flat one.

    A list: its lengths and its values; a fixed-size list: its values; a struct: its fields.
    """
    arrow_type = array.type
    if pa.types.is_struct(arrow_type):
        return [array.field(i) for i in range(arrow_type.num_fields)]
    if pa.types.is_fixed_size_list(arrow_type):
        return [array.flatten()]
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [pc.list_value_length(array), array.flatten()]
    return None


def short_type(arrow_type: pa.DataType) -> str:
    """``large_list<int32[4,2]>`` for a list of fixed-size lists, the Arrow name otherwise."""
    if pa.types.is_large_list(arrow_type) or pa.types.is_list(arrow_type):
        prefix = "large_list" if pa.types.is_large_list(arrow_type) else "list"
        return f"{prefix}<{short_type(arrow_type.value_type)}>"
    dims = []
    while pa.types.is_fixed_size_list(arrow_type):
        dims.append(str(arrow_type.list_size))
        arrow_type = arrow_type.value_type
    return f"{arrow_type}[{','.join(dims)}]" if dims else str(arrow_type)


# --- numpy views ---------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def numpy_dtype(value_type: pa.DataType) -> np.dtype:
    """The numpy dtype of a primitive Arrow type (cached; never imports pandas)."""
    dtype: np.dtype = pa.array([], type=value_type).to_numpy(zero_copy_only=False).dtype
    return dtype


def numpy_view(array: pa.Array) -> np.ndarray:
    """A numpy view of a primitive array without nulls (booleans are unpacked: a copy)."""
    view = number_view(array)  # numbers without a validity buffer: read from it
    if view is not None:
        return view
    if pa.types.is_boolean(array.type):
        return _unpack_bits(array)
    return np.asarray(array.to_numpy(zero_copy_only=True))


def _unpack_bits(array: pa.Array) -> np.ndarray:
    """A boolean array without nulls as numpy ``bool``, unpacked by numpy.

    Not ``to_numpy``: Arrow's C++ pool faults in a huge page on first use (milliseconds in a
    rank's first step); numpy's memory comes from the heap :func:`arrow_split.ray.warm_up` keeps.
    """
    length = len(array)
    bitmap = array.buffers()[1]
    if bitmap is None or length == 0:
        return np.zeros(length, dtype=np.bool_)
    first, shift = divmod(array.offset, 8)
    packed = np.frombuffer(bitmap, dtype=np.uint8)[first : first + -(-(shift + length) // 8)]
    return np.unpackbits(packed, bitorder="little")[shift : shift + length].view(np.bool_)


def ragged_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of a list column as numpy views, offsets from 0.

    A tensor's values have shape ``[rows, *trailing]``; read-only over the object store's memory.
    """
    read = number_lists(array)  # lists of numbers without nulls: read from the buffers
    if read is not None:
        return read
    raw_offsets = array.offsets.to_numpy()
    start, stop = int(raw_offsets[0]), int(raw_offsets[-1])
    child = array.values.slice(start, stop - start)
    trailing = trailing_shape(array.type)
    for _ in trailing:
        child = child.flatten()
    values = numpy_view(child).reshape(-1, *trailing)
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


# --- takes ---------------------------------------------------------------------------------------


def arrow_take(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """Arrow's own take (fresh buffers): the path for anything the numpy takes do not cover."""
    return array.take(pa.array(indices, type=pa.int64()))


@functools.lru_cache(maxsize=256)
def _fixed_width(arrow_type: pa.DataType) -> np.dtype | None:
    """The numpy dtype of an integer or float Arrow type, else ``None``."""
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type):
        return numpy_dtype(arrow_type)
    return None


@functools.lru_cache(maxsize=256)
def _run_layout(list_type: pa.DataType) -> tuple[np.dtype, tuple[pa.DataType, ...], int] | None:
    """Leaf dtype, types from the item down, values per row; ``None`` unless a list of numbers."""
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
    """The rows ``indices`` (checked int64) of a column of numbers or bools: one ``np.take``."""
    dtype = _fixed_width(array.type)
    if array.null_count:
        return arrow_take(array, indices)
    if dtype is None:
        return (
            _take_bits(array, indices)
            if pa.types.is_boolean(array.type)
            else arrow_take(array, indices)
        )
    start = array.offset * dtype.itemsize
    values = np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array), offset=start)
    buffer, out = _pool(len(indices), dtype)
    np.take(values, indices, out=out)
    return pa.Array.from_buffers(array.type, len(indices), [None, buffer])


def _take_bits(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` of a bool column without nulls: its bits unpacked, taken, packed."""
    packed = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    bits = np.unpackbits(packed, count=array.offset + len(array), bitorder="little")
    taken = np.packbits(bits[array.offset :][indices], bitorder="little")
    buffer, out = _pool(len(taken), np.dtype(np.uint8))
    out[:] = taken
    return pa.Array.from_buffers(pa.bool_(), len(indices), [None, buffer])


def _leaf_start(array: pa.Array) -> tuple[pa.Array, int, bool]:
    """The leaf under a list column, the leaf index of its first item, whether a level has nulls."""
    child = array.values
    start, nulls = child.offset, False
    while pa.types.is_fixed_size_list(child.type):
        nulls = nulls or child.null_count > 0
        size = child.type.list_size
        child = child.values
        start = start * size + child.offset
    return child, start, nulls or child.null_count > 0


RunsMemo = dict[tuple[bytes, int, int], tuple[pa.Buffer, int, list[slice]]]
"""What :func:`take_runs` keeps between the columns of one take: per the rows' offsets (and
the leaf's base and values per row), the new offsets buffer, the row count and the runs."""


def take_runs(array: pa.Array, indices: np.ndarray, memo: RunsMemo | None = None) -> pa.Array:
    """The rows ``indices`` (checked int64) of a list column of numbers, each row as one run.

    Columns of one take whose rows have the same offsets (``memo``) share the new offsets
    buffer and the runs: per-token columns of one length are gathered for the price of one.
    """
    layout = _run_layout(array.type)
    if layout is None or array.null_count:
        return arrow_take(array, indices)
    dtype, levels, per_row = layout
    leaf, base, nulls = _leaf_start(array)
    if nulls:
        return arrow_take(array, indices)
    offsets = np.frombuffer(
        array.buffers()[1], dtype=np.int64, count=len(array) + 1, offset=array.offset * 8
    )
    bounds = np.stack((offsets[indices], offsets[indices + 1]), axis=1)
    key = (bounds.tobytes(), base, per_row)
    known = None if memo is None else memo.get(key)
    if known is None:
        offsets_buffer, new_offsets = _pool(len(indices) + 1, np.dtype(np.int64))
        new_offsets[0] = 0
        np.cumsum(bounds[:, 1] - bounds[:, 0], out=new_offsets[1:])
        runs = [slice(a, b) for a, b in (bounds * per_row + base).tolist()]
        known = (offsets_buffer, int(new_offsets[-1]), runs)
        if memo is not None:
            memo[key] = known
    offsets_buffer, rows, runs = known
    flat = np.frombuffer(leaf.buffers()[1], dtype=dtype)
    values_buffer, gathered = _pool(rows * per_row, dtype)
    if rows:
        np.concatenate([flat[run] for run in runs], out=gathered)
    return _assemble(array.type, levels, offsets_buffer, values_buffer, len(indices), rows)


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
