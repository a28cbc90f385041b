"""Growable Arrow columns: append encoded chunks, hand over one array at the end.

The streaming builder (:mod:`arrow_split._builder`) encodes every appended group with the
codecs, then appends the group's arrays here. A growable column mirrors the Arrow layout of the
arrays the codecs produce, and nothing else: fixed-width numbers, booleans, ``large_binary`` /
``large_string``, ``fixed_size_list`` and ``large_list`` of those, and dictionaries of
``large_binary`` (:mod:`arrow_split._codecs._growable_once`). It never looks at a column's
kind, only at Arrow types. :func:`growable_for` picks the growable of an Arrow type; the buffer,
the interface and the binary column, which the once-growable is built from too, are in
:mod:`arrow_split._codecs._growable_base`, below both.

Memory. Values go into resizable buffers of Arrow's memory pool, grown by doubling (a pool
``realloc``: no second copy alive while growing). :meth:`Growable.finish` shrinks each buffer to
its length and hands it over to the finished array (no copy, or one copy where the allocator
moves a shrunk block), so the builder holds at most twice the batch's bytes; the next step starts
with new buffers of the same capacity (allocated at its first append), not from zero.

Shapes. A ``large_list`` whose items are ``fixed_size_list`` (a per-sample tensor) may see a first
chunk without a trailing shape (only empty samples): it takes the shape of the first chunk that
has one. Two chunks of different shapes raise :class:`ShapeMismatch`, which the builder turns into
the library's error.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from arrow_split._codecs import leaf_type, numpy_dtype, trailing_shape
from arrow_split._codecs._growable_base import BinaryGrowable, Buffer, Growable, array_offsets
from arrow_split._codecs._growable_once import OnceGrowable
from arrow_split.errors import SchemaError

__all__ = ["Growable", "ShapeMismatch", "growable_for"]


class ShapeMismatch(Exception):  # noqa: N818 - internal signal, turned into a library error
    """A chunk's trailing shape differs from the column's (see the module docstring)."""

    def __init__(self, row: int, shape: tuple[int, ...], first_row: int, first: tuple[int, ...]):
        super().__init__(row, shape, first_row, first)
        self.row, self.shape, self.first_row, self.first = row, shape, first_row, first


def growable_for(value_type: pa.DataType) -> Growable:
    """A growable for arrays of ``value_type`` (the types the codecs produce)."""
    if pa.types.is_large_list(value_type):
        return _ListGrowable(growable_for(value_type.value_type))
    if pa.types.is_fixed_size_list(value_type):
        return _FixedSizeGrowable(value_type.list_size, growable_for(value_type.value_type))
    if pa.types.is_large_binary(value_type) or pa.types.is_large_string(value_type):
        return BinaryGrowable(value_type)
    if pa.types.is_dictionary(value_type):  # objects stored once
        return OnceGrowable(value_type)
    if pa.types.is_boolean(value_type):
        return _BoolGrowable()
    if pa.types.is_integer(value_type) or pa.types.is_floating(value_type):
        return _PrimitiveGrowable(value_type)
    msg = f"no growable column for Arrow type {value_type}"  # pragma: no cover - codec types only
    raise SchemaError(msg)


class _PrimitiveGrowable(Growable):
    def __init__(self, value_type: pa.DataType) -> None:
        self._type = value_type
        self._values = Buffer(numpy_dtype(value_type))

    @property
    def type(self) -> pa.DataType:
        return self._type

    @property
    def length(self) -> int:
        return self._values.size

    def check(self, array: pa.Array) -> None:
        return None

    def append(self, array: pa.Array) -> None:
        values = np.asarray(array.to_numpy(zero_copy_only=True))
        if values.dtype != self._values.dtype:
            self._widen(values.dtype)
        self._values.extend(values)

    def _widen(self, dtype: np.dtype) -> None:
        """Hold values of ``dtype`` too: a narrow-stored id column whose values grew this step.

        The codecs store such a column in the narrowest of uint8 / uint16 / int32 that holds a
        chunk; the batch's type is the narrowest that holds every chunk, which is the widest of
        the chunks' types (those types nest). The values so far are cast once; this happens at
        most twice a step.
        """
        wider = np.promote_types(self._values.dtype, dtype)
        if wider == self._values.dtype:
            return  # a narrower chunk: its values are cast as they are copied in
        old = self._values
        self._values = Buffer(wider, old.capacity)
        self._values.extend(old.values())
        self._type = pa.from_numpy_dtype(wider)

    def finish(self) -> pa.Array:
        count = self._values.size
        return pa.Array.from_buffers(self.type, count, [None, self._values.take()])


class _BoolGrowable(Growable):
    """Booleans one byte each while growing; packed into bits (one small copy) at the end."""

    def __init__(self) -> None:
        self._values = Buffer(np.dtype(np.bool_))

    @property
    def type(self) -> pa.DataType:
        return pa.bool_()

    @property
    def length(self) -> int:
        return self._values.size

    def check(self, array: pa.Array) -> None:
        return None

    def append(self, array: pa.Array) -> None:
        self._values.extend(np.asarray(array.to_numpy(zero_copy_only=False)))

    def finish(self) -> pa.Array:
        array = pa.array(self._values.values(), type=pa.bool_())
        self._values.clear()
        return array


def _same_shape(left: pa.DataType, right: pa.DataType) -> bool:
    """Whether two list types have one trailing shape and integer leaves (storage may differ)."""
    leaves = leaf_type(left), leaf_type(right)
    integers = all(pa.types.is_integer(leaf) for leaf in leaves)
    return integers and trailing_shape(left) == trailing_shape(right)


class _FixedSizeGrowable(Growable):
    def __init__(self, size: int, child: Growable) -> None:
        self.size = size
        self.child = child
        self._types = (child.type, pa.list_(child.type, size))

    @property
    def type(self) -> pa.DataType:
        child = self.child.type  # it may widen: the list type follows (built once per child type)
        if child is not self._types[0]:
            self._types = (child, pa.list_(child, self.size))
        return self._types[1]

    @property
    def length(self) -> int:
        return self.child.length // self.size if self.size else 0

    def check(self, array: pa.Array) -> None:
        return None

    def append(self, array: pa.Array) -> None:
        self.child.append(array.flatten())

    def finish(self) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(self.child.finish(), self.size)


class _ListGrowable(Growable):
    """``large_list``: int64 offsets and a child; a tensor column's shape fixed by its values."""

    def __init__(self, child: Growable) -> None:
        self._set_child(child)
        self._offsets = Buffer(np.dtype(np.int64))
        self._offsets.append_one(0)
        self._shape_row: int | None = None  # the first row whose chunk fixed the trailing shape

    def _set_child(self, child: Growable) -> None:
        self.child = child
        self._types = (child.type, pa.large_list(child.type))

    @property
    def type(self) -> pa.DataType:
        child = self.child.type  # it may widen (narrow ids): the list type follows, built once
        if child is not self._types[0]:
            self._types = (child, pa.large_list(child))
        return self._types[1]

    @property
    def length(self) -> int:
        return self._offsets.size - 1

    def _informative(self, array: pa.Array) -> bool:
        """Whether a chunk says what the trailing shape is (a shaped type, or any value)."""
        offsets = array_offsets(array)
        return bool(trailing_shape(array.type)) or int(offsets[-1]) > int(offsets[0])

    def check(self, array: pa.Array) -> None:
        if array.type.equals(self.type) or not self._informative(array):
            return
        if self._shape_row is not None and _same_shape(array.type, self.type):
            return  # only the integer storage differs: the child widens
        if self._shape_row is not None:
            rows = np.diff(array_offsets(array))
            first = int(np.argmax(rows > 0)) if rows.any() else 0
            current = trailing_shape(self.type)
            raise ShapeMismatch(
                self.length + first, trailing_shape(array.type), self._shape_row, current
            )

    def append(self, array: pa.Array) -> None:
        informative = self._informative(array)
        if not array.type.equals(self.type):
            if not informative:  # only empty samples without a shape: offsets alone
                self._offsets.extend(np.full(len(array), self._offsets.last(), dtype=np.int64))
                return
            if self._shape_row is None or not _same_shape(array.type, self.type):
                self._set_child(growable_for(array.type.value_type))  # the first shape seen
        offsets = array_offsets(array)
        if informative and self._shape_row is None:
            rows = np.diff(offsets)
            self._shape_row = self.length + (int(np.argmax(rows > 0)) if rows.any() else 0)
        start, stop = int(offsets[0]), int(offsets[-1])
        base = self.child.length
        self.child.append(array.values.slice(start, stop - start))
        self._offsets.extend(offsets[1:] + (base - start))

    def finish(self) -> pa.Array:
        count = self.length
        if self._shape_row is None and trailing_shape(self.type):  # a shape of an earlier step
            self._set_child(growable_for(leaf_type(self.type)))
        child = self.child.finish()
        offsets = pa.Array.from_buffers(pa.int64(), count + 1, [None, self._offsets.take()])
        self._offsets.append_one(0)
        self._shape_row = None
        return pa.LargeListArray.from_arrays(offsets, child)
