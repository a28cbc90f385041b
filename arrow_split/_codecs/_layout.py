"""Arrays as their own buffers, by reference, and arrays rebuilt from such buffers.

The journal writes a group's columns this way (docs/journal.md, "The files"): the nodes
(length, offset) and the buffers of each array, depth first, as Arrow holds them.
No byte is copied to lay them out; rebuilding slices the file's buffer and validates in full.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa

from arrow_split.errors import JournalError

__all__ = ["Layout", "column_names", "lay_out", "rebuild"]


class Layout(NamedTuple):
    """Arrays as their types' IPC schema message, nodes ``[length, offset]`` and buffers.

    Nodes and buffers are listed depth first (a list, then its values); ``sizes`` has each
    buffer's size in bytes, ``-1`` for an absent one (no validity bitmap), and ``buffers`` the
    present ones, in order.
    """

    schema: bytes
    nodes: list[list[int]]
    sizes: list[int]
    buffers: list[pa.Buffer]


_PLANS: dict[tuple[pa.DataType, ...], tuple[tuple[int, ...], bytes] | None] = {}
_PLANS_SIZE = 1024
_RECENT: list[tuple[tuple[pa.DataType, ...], tuple[tuple[int, ...], bytes] | None]] = []
_RECENT_SIZE = 4
_LIST_TYPES = (pa.ListType, pa.LargeListType, pa.FixedSizeListType)
_BINARY_IDS = {t.id for t in (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())}
_NAMES: list[str] = []


@functools.lru_cache(maxsize=256)
def _children(arrow_type: pa.DataType) -> int | None:
    """How many child arrays a node of ``arrow_type`` has; ``None`` if it is not laid out here.

    Laid out: primitive numbers, booleans, temporals, (large) strings and binaries, and lists,
    large lists and fixed-size lists of those. Anything else (a dictionary, a struct, an
    extension type) takes Arrow's IPC format instead.
    """
    if pa.types.is_dictionary(arrow_type) or isinstance(arrow_type, pa.BaseExtensionType):
        return None
    if isinstance(arrow_type, _LIST_TYPES):
        return None if _children(arrow_type.value_type) is None else 1
    if pa.types.is_primitive(arrow_type) and not pa.types.is_null(arrow_type):
        return 0
    return 0 if arrow_type.id in _BINARY_IDS else None


def _plan(types: Sequence[pa.DataType]) -> tuple[tuple[int, ...], bytes] | None:
    """Each type's levels of children and the types' schema message (made once per types).

    The recent plans are found by :func:`_same` (a type compared in well under a microsecond,
    where hashing one takes about two); the others by hash.
    """
    for recent_types, plan in _RECENT:
        if len(recent_types) == len(types) and all(map(_same, recent_types, types)):
            return plan
    key = tuple(types)
    if key in _PLANS:
        plan = _PLANS[key]
    else:
        plan = _PLANS[key] = _new_plan(key)
        if len(_PLANS) > _PLANS_SIZE:
            _PLANS.clear()
    _RECENT.insert(0, (key, plan))
    del _RECENT[_RECENT_SIZE:]
    return plan


def _same(known: pa.DataType, arrow_type: pa.DataType) -> bool:
    """Whether two types are one (``equals`` and, at every list level, the item's name)."""
    if not known.equals(arrow_type):
        return False
    while isinstance(known, _LIST_TYPES):
        if known.value_field.name != arrow_type.value_field.name:
            return False
        known, arrow_type = known.value_type, arrow_type.value_type
    return True


def _new_plan(types: tuple[pa.DataType, ...]) -> tuple[tuple[int, ...], bytes] | None:
    levels: list[int] = []
    for arrow_type in types:
        level, item = 0, arrow_type
        while (children := _children(item)) == 1:
            level, item = level + 1, item.value_type
        if children is None:
            return None
        levels.append(level)
    fields = [pa.field(n, t) for n, t in zip(column_names(len(types)), types, strict=True)]
    return tuple(levels), pa.schema(fields).serialize().to_pybytes()


def column_names(count: int) -> list[str]:
    """A record's column names, ``c0``, ``c1``, ... (docs/journal.md)."""
    while len(_NAMES) < count:
        _NAMES.append(f"c{len(_NAMES)}")
    return _NAMES[:count]


def lay_out(arrays: Sequence[pa.Array]) -> Layout | None:
    """The layout of ``arrays`` (named ``c0``, ``c1``, ...); ``None`` if a type is not laid out."""
    plan = _plan([array.type for array in arrays])
    if plan is None:
        return None
    nodes: list[list[int]] = []
    for array, level in zip(arrays, plan[0], strict=True):
        nodes.append([len(array), array.offset])
        for _ in range(level):
            array = array.values  # the whole child, its own offset kept
            nodes.append([len(array), array.offset])
    every = [buffer for array in arrays for buffer in array.buffers()]
    sizes = [-1 if buffer is None else buffer.size for buffer in every]
    return Layout(plan[1], nodes, sizes, [buffer for buffer in every if buffer is not None])


def rebuild(
    types: Sequence[pa.DataType],
    nodes: Sequence[Sequence[int]],
    buffers: Sequence[pa.Buffer | None],
) -> list[pa.Array]:
    """Arrays of ``types`` from a layout's nodes and buffers, each validated in full.

    Null counts are counted from the validity bitmaps, never taken from the input.

    Raises
    ------
    JournalError
        The nodes or buffers do not fit the types, or an array they make is not valid Arrow.
    """
    cursor = _Cursor(nodes, buffers)
    arrays = [cursor.array(arrow_type) for arrow_type in types]
    if cursor.node < len(nodes) or cursor.buffer < len(buffers):
        msg = "more nodes or buffers than its types have"
        raise JournalError(msg)
    try:
        for array in arrays:
            array.validate(full=True)
    except pa.ArrowException as exc:
        raise JournalError(str(exc)) from None
    return arrays


class _Cursor:
    """Where :func:`rebuild` is in the nodes and buffers."""

    def __init__(self, nodes: Sequence[Sequence[int]], buffers: Sequence[pa.Buffer | None]) -> None:
        self.nodes, self.buffers = nodes, buffers
        self.node = self.buffer = 0

    def array(self, arrow_type: pa.DataType) -> pa.Array:
        children = _children(arrow_type)
        if children is None:
            msg = f"no layout for a `{arrow_type}` array"
            raise JournalError(msg)
        count = arrow_type.num_buffers
        if self.node >= len(self.nodes) or self.buffer + count > len(self.buffers):
            msg = "fewer nodes or buffers than its types have"
            raise JournalError(msg)
        length, offset = self.nodes[self.node]
        own = list(self.buffers[self.buffer : self.buffer + count])
        self.node, self.buffer = self.node + 1, self.buffer + count
        child = [self.array(arrow_type.value_type)] if children else None
        if child and pa.types.is_fixed_size_list(arrow_type):
            _check_fixed_size(arrow_type.list_size, length, offset, len(child[0]))
        try:
            return pa.Array.from_buffers(arrow_type, length, own, -1, offset, child)
        except (pa.ArrowException, TypeError, OverflowError) as exc:
            raise JournalError(str(exc)) from None


def _check_fixed_size(size: int, length: int, offset: int, values: int) -> None:
    """Refuse a fixed-size list node whose lists run past its values.

    Arrow's full validation misses such an offset: the lists would read outside the values'
    buffers, and a batch written from them would not validate.
    """
    if (offset + length) * size > values:
        msg = (
            f"a fixed-size list node of {length} lists of {size} at offset {offset} runs past "
            f"its {values} values"
        )
        raise JournalError(msg)
