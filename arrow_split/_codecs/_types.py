"""The Arrow types the codecs make, and the walk back from such a type to what it holds.

A list column is ``large_list<item>``; a per-sample tensor's item nests one ``fixed_size_list``
per trailing axis: ``large_list<fixed_size_list<fixed_size_list<value_type, top_k>, layers>>``.
This module is the one place that builds that nesting (:func:`list_type`, :func:`nest`) and walks
it back (:func:`leaf_type`, :func:`trailing_shape`); the codecs, the growable columns and the
summary of a batch (:func:`short_type`) use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["is_list", "leaf_type", "list_type", "nest", "parts", "short_type", "trailing_shape"]


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
