"""The parts every growable column is built from: the buffer, the interface, the binary column.

:class:`Buffer` is a run of fixed-width values in a resizable buffer of Arrow's memory pool, grown
by doubling and handed over without a copy; :class:`Growable` is the interface of a column being
built (:mod:`arrow_split._codecs._growable` has the numeric, boolean and list columns and picks
one for an Arrow type); :class:`BinaryGrowable` is the ``large_binary`` / ``large_string`` column,
which the column of objects stored once (:mod:`arrow_split._codecs._growable_once`) keeps its
distinct values in; :func:`array_offsets` reads the offsets of a list or binary chunk.
"""

from __future__ import annotations

import abc

import numpy as np
import pyarrow as pa

__all__ = ["BinaryGrowable", "Buffer", "Growable", "array_offsets"]

_MIN_CAPACITY = 64


class Buffer:
    """A run of fixed-width values in a resizable pool buffer, grown by doubling."""

    __slots__ = ("_buffer", "_view", "capacity", "dtype", "size")

    def __init__(self, dtype: np.dtype, capacity: int = 0) -> None:
        self.dtype = dtype
        self.capacity = capacity
        self.size = 0
        self._buffer: pa.ResizableBuffer | None = None
        self._view = np.empty(0, dtype=dtype)

    def _reserve(self, needed: int) -> None:
        if self._buffer is None:  # first use, or first use after a hand-over: keep the capacity
            self.capacity = max(needed, self.capacity, _MIN_CAPACITY)
            self._buffer = pa.allocate_buffer(self.capacity * self.dtype.itemsize, resizable=True)
        elif needed > self.capacity:
            self.capacity = max(needed, 2 * self.capacity)
            self._view = np.empty(0, dtype=self.dtype)  # no view may outlive the old block
            self._buffer.resize(self.capacity * self.dtype.itemsize)
        else:
            return
        self._view = np.frombuffer(self._buffer, dtype=self.dtype)

    def extend(self, values: np.ndarray) -> None:
        """Append ``values`` (cast to the buffer's dtype)."""
        end = self.size + len(values)
        if end > len(self._view):
            self._reserve(end)
        self._view[self.size : end] = values
        self.size = end

    def append_one(self, value: int) -> None:
        """Append one value."""
        if self.size >= len(self._view):
            self._reserve(self.size + 1)
        self._view[self.size] = value
        self.size += 1

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

    @property
    @abc.abstractmethod
    def type(self) -> pa.DataType:
        """The Arrow type of the finished array."""

    @property
    @abc.abstractmethod
    def length(self) -> int:
        """Rows appended so far."""

    @abc.abstractmethod
    def check(self, array: pa.Array) -> None:
        """Raise :class:`ShapeMismatch` if ``array`` cannot be appended; change nothing."""

    @abc.abstractmethod
    def append(self, array: pa.Array) -> None:
        """Append ``array``'s rows (its type is this one's, or :meth:`check` accepted it)."""

    @abc.abstractmethod
    def finish(self) -> pa.Array:
        """The array of every row appended; the growable is empty again, its capacity kept."""


def array_offsets(array: pa.Array) -> np.ndarray:
    """The ``length + 1`` int64 offsets of a large list or binary array (slice honoured)."""
    buffer = array.buffers()[1]
    if buffer is None:  # an array of no rows may have no buffers
        return np.zeros(1, dtype=np.int64)
    return np.frombuffer(buffer, dtype=np.int64, count=len(array) + 1, offset=array.offset * 8)


class BinaryGrowable(Growable):
    """``large_binary`` / ``large_string``: offsets, bytes and (if any null) a validity map."""

    def __init__(self, value_type: pa.DataType) -> None:
        self._type = value_type
        self._offsets = Buffer(np.dtype(np.int64))
        self._offsets.append_one(0)
        self._data = Buffer(np.dtype(np.uint8))
        self._valid = Buffer(np.dtype(np.bool_))
        self._nulls = 0

    @property
    def type(self) -> pa.DataType:
        return self._type

    @property
    def length(self) -> int:
        return self._offsets.size - 1

    def check(self, array: pa.Array) -> None:
        return None

    def append(self, array: pa.Array) -> None:
        offsets = array_offsets(array)
        start, stop = int(offsets[0]), int(offsets[-1])
        data = array.buffers()[2]
        if stop > start and data is not None:
            self._data.extend(np.frombuffer(data, dtype=np.uint8)[start:stop])
        self._offsets.extend(offsets[1:] + (self._offsets.last() - start))
        self._valid.extend(np.asarray(array.is_valid().to_numpy(zero_copy_only=False)))
        self._nulls += array.null_count

    def offsets(self) -> np.ndarray:
        """The ``length + 1`` offsets so far (a view valid until the next append)."""
        return self._offsets.values()

    def data(self) -> np.ndarray:
        """The bytes so far (a view valid until the next append)."""
        return self._data.values()

    def finish(self) -> pa.Array:
        count = self.length
        validity = None
        if self._nulls:
            validity = pa.py_buffer(np.packbits(self._valid.values(), bitorder="little"))
        offsets, data = self._offsets.take(), self._data.take()
        self._offsets.append_one(0)
        self._valid.clear()
        nulls, self._nulls = self._nulls, 0
        return pa.Array.from_buffers(self.type, count, [validity, offsets, data], null_count=nulls)
