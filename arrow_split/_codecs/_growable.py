"""Growable Arrow columns: the builder appends encoded chunks and takes one array at ``finish``.

The parts a kind's growth is made of (``Codec.growable``), by Arrow type: pool buffers grown by
doubling, handed over without a copy. A tensor column's shape is its first chunk's with a value.
"""

from __future__ import annotations

import abc

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import leaf_type, list_type, nest, numpy_dtype, trailing_shape
from arrow_split.errors import SchemaError

__all__ = ["Growable", "ShapeMismatch", "growable_for"]

_MIN_CAPACITY = 64
_ZERO = np.zeros(1, dtype=np.int64)  # the first offset


class _Buffer:
    """A run of fixed-width values in a resizable pool buffer, grown by doubling."""

    __slots__ = ("_buffer", "_view", "capacity", "dtype", "size")

    def __init__(self, dtype: np.dtype, capacity: int = 0) -> None:
        self.dtype = dtype
        self.capacity = capacity
        self.size = 0
        self._buffer: pa.ResizableBuffer | None = None
        self._view = np.empty(0, dtype=dtype)

    def extend(self, values: np.ndarray) -> None:
        """Append ``values`` (cast to the buffer's dtype)."""
        end = self.size + len(values)
        if end > len(self._view):  # the view is the whole block: a new block, or a larger one
            if self._buffer is None:  # first use, or first use after a hand-over: keep capacity
                self.capacity = max(end, self.capacity, _MIN_CAPACITY)
                size = self.capacity * self.dtype.itemsize
                self._buffer = pa.allocate_buffer(size, resizable=True)
            else:
                self.capacity = max(end, 2 * self.capacity)
                self._view = np.empty(0, dtype=self.dtype)  # no view may outlive the old block
                self._buffer.resize(self.capacity * self.dtype.itemsize)
            self._view = np.frombuffer(self._buffer, dtype=self.dtype)
        self._view[self.size : end] = values
        self.size = end

    def last(self) -> int:
        """The last value (the buffer must not be empty)."""
        return int(self._view[self.size - 1])

    def values(self) -> np.ndarray:
        """A read-only view of the values so far (valid until the next append)."""
        view = self._view[: self.size]
        view.flags.writeable = False
        return view

    def take(self) -> pa.Buffer:
        """Hand the values over as an Arrow buffer; the next append starts a new block."""
        if self._buffer is None:
            return pa.allocate_buffer(0)
        buffer, self._buffer = self._buffer, None
        self._view = np.empty(0, dtype=self.dtype)
        buffer.resize(self.size * self.dtype.itemsize, shrink_to_fit=True)
        self.size = 0
        return buffer

    def clear(self) -> None:
        """Forget the values, keep the block."""
        self.size = 0


class Growable(abc.ABC):
    """An Arrow array being built from appended chunks of one type."""

    type: pa.DataType  # the Arrow type of the finished array

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """Rows appended so far."""

    def check(self, array: pa.Array) -> None:  # noqa: B027 - most columns take any chunk
        """Raise :class:`ShapeMismatch` if ``array`` cannot be appended; change nothing."""

    @abc.abstractmethod
    def append(self, array: pa.Array) -> None:
        """Append ``array``'s rows (its type is this one's, or :meth:`check` accepted it)."""

    @abc.abstractmethod
    def finish(self) -> pa.Array:
        """The array of every row appended; the growable is empty again, its capacity kept."""


def _array_offsets(array: pa.Array) -> np.ndarray:
    """The ``length + 1`` int64 offsets of a large list or binary array (slice honoured)."""
    buffer = array.buffers()[1]
    if buffer is None:  # an array of no rows may have no buffers
        return np.zeros(1, dtype=np.int64)
    return np.frombuffer(buffer, dtype=np.int64, count=len(array) + 1, offset=array.offset * 8)


class _OffsetsGrowable(Growable):
    """A column of int64 offsets from 0 over its values: a large list or large binary."""

    def __init__(self) -> None:
        self._offsets = _Buffer(np.dtype(np.int64))
        self._offsets.extend(_ZERO)

    @property
    def length(self) -> int:
        return self._offsets.size - 1

    def _append_offsets(self, offsets: np.ndarray) -> None:
        self._offsets.extend(offsets[1:] + (self._offsets.last() - int(offsets[0])))

    def _take_offsets(self) -> pa.Buffer:
        buffer = self._offsets.take()
        self._offsets.extend(_ZERO)
        return buffer


class _BinaryGrowable(_OffsetsGrowable):
    """``large_binary`` / ``large_string``: offsets, bytes and (if any null) a validity map."""

    def __init__(self, value_type: pa.DataType) -> None:
        super().__init__()
        self.type = value_type
        self._data = _Buffer(np.dtype(np.uint8))
        self._valid = _Buffer(np.dtype(np.bool_))
        self._nulls = 0

    def append(self, array: pa.Array) -> None:
        offsets = _array_offsets(array)
        start, stop = int(offsets[0]), int(offsets[-1])
        data = array.buffers()[2]
        if stop > start and data is not None:
            self._data.extend(np.frombuffer(data, dtype=np.uint8)[start:stop])
        self._append_offsets(offsets)
        self._valid.extend(np.asarray(array.is_valid().to_numpy(zero_copy_only=False)))
        self._nulls += array.null_count

    def finish(self) -> pa.Array:
        count = self.length
        bits = np.packbits(self._valid.values(), bitorder="little")
        validity = pa.py_buffer(bits) if self._nulls else None
        offsets, data = self._take_offsets(), self._data.take()
        self._valid.clear()
        nulls, self._nulls = self._nulls, 0
        return pa.Array.from_buffers(self.type, count, [validity, offsets, data], null_count=nulls)


class ShapeMismatch(Exception):  # noqa: N818 - internal signal, turned into a library error
    """A chunk's trailing shape differs from the column's (see the module docstring)."""

    def __init__(self, row: int, shape: tuple[int, ...], first_row: int, first: tuple[int, ...]):
        super().__init__(row, shape, first_row, first)
        self.row, self.shape, self.first_row, self.first = row, shape, first_row, first


def growable_for(value_type: pa.DataType) -> Growable:
    """A growable for arrays of ``value_type`` (the types the codecs produce)."""
    if pa.types.is_large_list(value_type):
        return _ListGrowable(value_type)
    if pa.types.is_large_binary(value_type) or pa.types.is_large_string(value_type):
        return _BinaryGrowable(value_type)
    numbers = pa.types.is_integer(value_type) or pa.types.is_floating(value_type)
    if numbers or pa.types.is_boolean(value_type):
        return _PrimitiveGrowable(value_type)
    msg = f"no growable column for Arrow type {value_type}"  # pragma: no cover - codec types only
    raise SchemaError(msg)


class _PrimitiveGrowable(Growable):
    """Numbers, or booleans (one byte each while growing)."""

    def __init__(self, value_type: pa.DataType) -> None:
        self.type = value_type
        self._values = _Buffer(numpy_dtype(value_type))

    @property
    def length(self) -> int:
        return self._values.size

    def append(self, array: pa.Array) -> None:
        values = np.asarray(array.to_numpy(zero_copy_only=False))  # a copy for bools only
        if values.dtype != self._values.dtype:
            self._widen(values.dtype)
        self._values.extend(values)

    def _widen(self, dtype: np.dtype) -> None:
        """Hold a wider ``dtype`` too (narrow ids grew): the batch takes the widest chunk type."""
        wider = np.promote_types(self._values.dtype, dtype)
        if wider == self._values.dtype:
            return  # a narrower chunk: its values are cast as they are copied in
        old = self._values
        self._values = _Buffer(wider, old.capacity)
        self._values.extend(old.values())
        self.type = pa.from_numpy_dtype(wider)

    def finish(self) -> pa.Array:
        if pa.types.is_boolean(self.type):  # one byte each while growing: packed into bits here
            array = pa.array(self._values.values(), type=self.type)
            self._values.clear()
            return array
        count = self._values.size
        return pa.Array.from_buffers(self.type, count, [None, self._values.take()])


def _first_filled(offsets: np.ndarray) -> int:
    """The first row with a value (0 if none)."""
    return int(np.argmax(np.diff(offsets) > 0))


def _same_shape(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether two list types have one trailing shape and integer leaves (storage may differ)."""
    leaves = leaf_type(left), leaf_type(right)
    integers = all(pa.types.is_integer(leaf) for leaf in leaves)
    return integers and trailing_shape(left) == trailing_shape(right)


class _ListGrowable(_OffsetsGrowable):
    """``large_list``: int64 offsets and a child; a tensor column's shape fixed by its values.

    A tensor's ``fixed_size_list`` levels (its trailing shape) are the type's: their leaf values
    grow flat in the child, which may widen (narrow ids), and are nested again at the finish.
    """

    def __init__(self, value_type: pa.DataType) -> None:
        super().__init__()
        self._set_type(value_type)
        self._shape_row: int | None = None  # the first row whose chunk fixed the trailing shape

    def _set_type(self, value_type: pa.DataType) -> None:
        self.type, self.trailing = value_type, trailing_shape(value_type)
        self.child = growable_for(leaf_type(value_type))
        self._child_type = self.child.type

    def _informative(self, array: pa.Array) -> bool:
        """Whether a chunk says what the trailing shape is (a shaped type, or any value)."""
        offsets = _array_offsets(array)
        return bool(trailing_shape(array.type)) or int(offsets[-1]) > int(offsets[0])

    def check(self, array: pa.Array) -> None:
        if self._shape_row is None or array.type.equals(self.type):
            return
        if self._informative(array) and not _same_shape(array.type, self.type):
            row = self.length + _first_filled(_array_offsets(array))
            shape, first = trailing_shape(array.type), self.trailing
            raise ShapeMismatch(row, shape, self._shape_row, first)

    def append(self, array: pa.Array) -> None:
        informative = self._informative(array)
        if not array.type.equals(self.type):
            if not informative:  # only empty samples without a shape: offsets alone
                self._offsets.extend(np.full(len(array), self._offsets.last(), dtype=np.int64))
                return
            if self._shape_row is None or not _same_shape(array.type, self.type):
                self._set_type(array.type)  # the first shape seen
        offsets = _array_offsets(array)
        if informative and self._shape_row is None:
            self._shape_row = self.length + _first_filled(offsets)
        start, stop = int(offsets[0]), int(offsets[-1])
        values = array.values.slice(start, stop - start)
        for _ in self.trailing:
            values = values.flatten()
        self.child.append(values)
        if self.child.type is not self._child_type:  # the child widened
            self._child_type = self.child.type
            self.type = list_type(self.child.type, self.trailing)
        self._append_offsets(offsets)

    def finish(self) -> pa.Array:
        count = self.length
        if self._shape_row is None and self.trailing:  # a shape of an earlier step
            self._set_type(list_type(leaf_type(self.type)))
        child = nest(self.child.finish(), self.trailing)
        offsets = pa.Array.from_buffers(pa.int64(), count + 1, [None, self._take_offsets()])
        self._shape_row = None
        return pa.LargeListArray.from_arrays(offsets, child)
