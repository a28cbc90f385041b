"""A column as named Arrow buffers, and some of its rows read back as byte ranges of them.

:func:`column_buffers` lays a column out as a tree of nodes (an Arrow array and its children),
each with its buffers; :func:`read_rows` rebuilds the rows of sorted runs ``[start, end)`` from
the byte ranges that hold them, asking a ``reader`` for the bytes one round at a time (a list
column's offsets come before its values; a dictionary column's indices before the entries
they use, its only entries read). Bitmaps (validity, booleans) are read by the byte that holds
a run's bits and re-packed; everything else is read to the byte. :func:`node_problem` checks a
node tree read from outside against its Arrow type.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pyarrow as pa

from arrow_split.errors import mistake

__all__ = ["Node", "Ranges", "column_buffers", "node_problem", "read_rows", "runs", "supported"]

Ranges = tuple[str, np.ndarray, np.ndarray]
"""One read: a buffer's key, the start of each range in it and its size (int64, no empty one);
the reader returns the ranges' bytes back to back."""

Reader = Callable[[list[Ranges]], list[np.ndarray]]
_Step = Generator[list[Ranges], list[np.ndarray], pa.Array]


@dataclass(frozen=True, slots=True)
class Node:
    """One Arrow array of a column: its buffers (key and size, ``None`` if absent), its children."""

    buffers: tuple[tuple[str, int] | None, ...]
    children: tuple[Node, ...]
    entries: int = 0
    """A dictionary's number of entries (rows hold indices into it; 0 for any other node)."""


def supported(arrow_type: pa.DataType) -> bool:
    """Whether a column of ``arrow_type`` can be stored as buffers and read by ranges."""
    if pa.types.is_dictionary(arrow_type):
        return supported(arrow_type.index_type) and supported(arrow_type.value_type)
    if _is_offsets_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return supported(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return all(supported(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return _is_binary(arrow_type) or (
        pa.types.is_primitive(arrow_type) and not pa.types.is_null(arrow_type)
    )


def _is_offsets_list(arrow_type: pa.DataType) -> bool:
    return bool(pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type))


def _is_binary(arrow_type: pa.DataType) -> bool:
    return any(
        check(arrow_type)
        for check in (
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_string,
            pa.types.is_large_string,
        )
    )


def column_buffers(
    array: pa.Array, key: str, out: list[tuple[str, pa.Buffer]]
) -> tuple[Node, pa.Array]:
    """``array`` (compacted: every offset 0) as a node tree; each non-empty buffer goes to ``out``.

    Returns the node and the compacted array whose buffers ``out`` holds (keep it alive).
    """
    if _has_offset(array):
        array = pa.concat_arrays([array.take(pa.array(np.arange(len(array))))])
    return _node(array, key, out), array


def _has_offset(array: pa.Array) -> bool:
    if array.offset:
        return True
    if pa.types.is_dictionary(array.type):
        return _has_offset(array.indices) or _has_offset(array.dictionary)
    return any(_has_offset(child) for child in _children(array))


def _children(array: pa.Array) -> list[pa.Array]:
    arrow_type = array.type
    if _is_offsets_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return [array.values]
    if pa.types.is_struct(arrow_type):
        return [array.field(i) for i in range(arrow_type.num_fields)]
    return []


def _node(array: pa.Array, key: str, out: list[tuple[str, pa.Buffer]]) -> Node:
    if pa.types.is_dictionary(array.type):  # the indices by rows, the dictionary whole
        indices = _node(array.indices, f"{key}.i", out)
        dictionary = _node(array.dictionary, f"{key}.d", out)
        return Node((), (indices, dictionary), len(array.dictionary))
    own = array.buffers()[: array.type.num_buffers]
    buffers: list[tuple[str, int] | None] = []
    for position, buffer in enumerate(own):
        if buffer is None or buffer.size == 0:
            buffers.append(None)
            continue
        name = f"{key}.{position}"
        out.append((name, buffer))
        buffers.append((name, buffer.size))
    children = tuple(
        _node(child, f"{key}.{index}", out) for index, child in enumerate(_children(array))
    )
    return Node(tuple(buffers), children)


def node_problem(node: Node, arrow_type: pa.DataType, rows: int | None) -> str | None:
    """Why ``node`` cannot hold ``rows`` rows (``None``: a count not known) of ``arrow_type``.

    ``None`` if it can: the buffers and children ``column_buffers`` writes for the type, each
    buffer at least as large as ``rows`` rows need (a buffer a row needs present).
    """
    if pa.types.is_dictionary(arrow_type):
        if node.buffers or len(node.children) != 2:
            return f"a {arrow_type} node has no buffers and 2 children"
        index_type, value_type = arrow_type.index_type, arrow_type.value_type
        problem = node_problem(node.children[0], index_type, rows)
        return problem or node_problem(node.children[1], value_type, node.entries)
    kinds = _child_types(arrow_type)
    if (len(node.buffers), len(node.children), node.entries) != (
        arrow_type.num_buffers,
        len(kinds),
        0,
    ):
        return (
            f"a {arrow_type} node has {arrow_type.num_buffers} buffers, {len(kinds)} children "
            f"and no entries, not {len(node.buffers)}, {len(node.children)} and {node.entries}"
        )
    for position, least in enumerate(_least_sizes(arrow_type, rows)):
        buffer = node.buffers[position]
        size = 0 if buffer is None else buffer[1]
        if size < least and (buffer is not None or position > 0):  # validity may be absent
            return f"buffer {position} of a {arrow_type} node of {rows} rows holds {size} bytes"
    if pa.types.is_fixed_size_list(arrow_type):
        rows = None if rows is None else rows * arrow_type.list_size
    elif not pa.types.is_struct(arrow_type):
        rows = None  # a list's child rows are in its offsets
    for child, child_type in zip(node.children, kinds, strict=True):
        if problem := node_problem(child, child_type, rows):
            return problem
    return None


def _child_types(arrow_type: pa.DataType) -> list[pa.DataType]:
    if _is_offsets_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return [arrow_type.value_type]
    if pa.types.is_struct(arrow_type):
        return [arrow_type.field(i).type for i in range(arrow_type.num_fields)]
    return []


def _least_sizes(arrow_type: pa.DataType, rows: int | None) -> list[int]:
    """The fewest bytes each buffer of ``rows`` rows holds (validity's where present)."""
    if not rows:
        return []
    least = [(rows + 7) // 8]
    if _is_offsets_list(arrow_type) or _is_binary(arrow_type):
        least.append((rows + 1) * (8 if _is_large(arrow_type) else 4))
    elif pa.types.is_primitive(arrow_type):
        least.append((rows * arrow_type.bit_width + 7) // 8)
    return least


def read_rows(
    nodes: Sequence[tuple[Node, pa.DataType]], starts: np.ndarray, ends: np.ndarray, reader: Reader
) -> list[pa.Array]:
    """The rows of the runs ``[starts, ends)`` (sorted, disjoint) of each column, in run order.

    Every column's reads of a round go to ``reader`` together: as many rounds as the deepest
    column has levels of offsets.
    """
    steps = [_read(node, arrow_type, starts, ends) for node, arrow_type in nodes]
    results: list[pa.Array | None] = [None] * len(steps)
    pending: dict[int, list[Ranges]] = {}
    answers: dict[int, list[np.ndarray] | None] = dict.fromkeys(range(len(steps)))
    while answers:
        for index, values in answers.items():
            wants = _advance(steps[index], values, results, index)
            if wants is not None:
                pending[index] = wants
        if not pending:
            break
        got = reader([ranges for wants in pending.values() for ranges in wants])
        answers, position = {}, 0
        for index, wants in pending.items():
            answers[index] = got[position : position + len(wants)]
            position += len(wants)
        pending = {}
    return [cast(pa.Array, result) for result in results]


def _advance(
    step: _Step, values: list[np.ndarray] | None, results: list[pa.Array | None], index: int
) -> list[Ranges] | None:
    """Run ``step`` to its next round of reads; its array goes to ``results`` when done."""
    try:
        return next(step) if values is None else step.send(values)
    except StopIteration as done:
        results[index] = done.value
        return None


def _ranges(key: str, starts: np.ndarray, sizes: np.ndarray) -> Ranges:
    keep = sizes > 0
    return key, starts[keep], sizes[keep]


def _read(node: Node, arrow_type: pa.DataType, starts: np.ndarray, ends: np.ndarray) -> _Step:
    """Rows ``[starts, ends)`` of ``node``, one round of reads per yield."""
    lengths = ends - starts
    total = int(lengths.sum())
    if pa.types.is_dictionary(arrow_type):  # the rows' indices, then the entries they use
        indices = yield from _read(node.children[0], arrow_type.index_type, starts, ends)
        renumbered, used = _used(indices, node.entries)
        dictionary = yield from _read(node.children[1], arrow_type.value_type, *runs(used))
        return pa.DictionaryArray.from_arrays(renumbered, dictionary)
    wants: list[Ranges] = []
    validity = node.buffers[0] if node.buffers else None
    if validity is not None:
        wants.append(_bitmap_ranges(validity[0], starts, ends))
    data = node.buffers[1] if len(node.buffers) > 1 else None
    width = arrow_type.bit_width if pa.types.is_primitive(arrow_type) else 0
    offsets_width = 8 if _is_large(arrow_type) else 4
    if _is_offsets_list(arrow_type) or _is_binary(arrow_type):
        if data is not None:
            wants.append(_ranges(data[0], starts * offsets_width, (lengths + 1) * offsets_width))
    elif width == 1 and data is not None:
        wants.append(_bitmap_ranges(data[0], starts, ends))
    elif width and data is not None:
        wants.append(_ranges(data[0], starts * (width // 8), lengths * (width // 8)))
    got = (yield wants) if wants and total else [np.empty(0, np.uint8) for _ in wants]
    buffers: list[pa.Buffer | None] = []
    if validity is not None:
        buffers.append(pa.py_buffer(_bits(got.pop(0), starts, ends)))
    elif node.buffers:
        buffers.append(None)
    children: list[pa.Array] = []
    if _is_offsets_list(arrow_type) or _is_binary(arrow_type):
        dtype = np.int64 if offsets_width == 8 else np.int32
        stored = got.pop(0).view(dtype) if data is not None else np.zeros(0, dtype)
        offsets, child_starts, child_ends = _rebased(stored, lengths, dtype)
        buffers.append(pa.py_buffer(offsets))
        if _is_binary(arrow_type):
            blob = node.buffers[2]
            sizes = child_ends - child_starts
            if blob is not None and int(sizes.sum()):
                (values,) = yield [_ranges(blob[0], child_starts, sizes)]
            else:
                values = np.empty(0, np.uint8)
            buffers.append(pa.py_buffer(values))
        else:
            child = yield from _read(
                node.children[0], arrow_type.value_type, child_starts, child_ends
            )
            children.append(child)
    elif pa.types.is_fixed_size_list(arrow_type):
        size = arrow_type.list_size
        child = yield from _read(
            node.children[0], arrow_type.value_type, starts * size, ends * size
        )
        children.append(child)
    elif pa.types.is_struct(arrow_type):
        for index in range(arrow_type.num_fields):
            child = yield from _read(
                node.children[index], arrow_type.field(index).type, starts, ends
            )
            children.append(child)
    elif width == 1:
        buffers.append(pa.py_buffer(_bits(got.pop(0), starts, ends) if data else b""))
    elif width:
        buffers.append(pa.py_buffer(got.pop(0) if data else b""))
    return pa.Array.from_buffers(arrow_type, total, buffers, children=children or None)


def _used(indices: pa.Array, entries: int) -> tuple[pa.Array, np.ndarray]:
    """Dictionary ``indices`` renumbered into the sorted entries they use, and those entries."""
    valid = np.asarray(indices.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.asarray(indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    used, inverse = np.unique(codes[valid], return_inverse=True)
    if used.size and (used[0] < 0 or used[-1] >= entries):
        bad = int(used[0] if used[0] < 0 else used[-1])
        msg = f"a stored dictionary of {entries} entries is read at index {bad}"
        raise mistake("transport", msg, got=str(bad))
    renumbered = np.zeros(len(codes), dtype=np.int64)
    renumbered[valid] = inverse.reshape(-1)
    mask = None if valid.all() else ~valid
    return pa.array(renumbered, type=indices.type, mask=mask), used


def runs(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique ``rows`` as runs ``[starts, ends)`` of consecutive rows."""
    if not len(rows):
        return rows, rows
    cut = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = rows[np.concatenate([[0], cut])]
    ends = rows[np.concatenate([cut - 1, [len(rows) - 1]])] + 1
    return starts, ends


def _is_large(arrow_type: pa.DataType) -> bool:
    return bool(
        pa.types.is_large_list(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_large_string(arrow_type)
    )


def _bitmap_ranges(key: str, starts: np.ndarray, ends: np.ndarray) -> Ranges:
    first = starts // 8
    return _ranges(key, first, np.where(ends > starts, (ends + 7) // 8 - first, 0))


def _bits(read: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The bits of the runs, packed back to back from bit 0 (``read``: each run's bytes)."""
    lengths = ends - starts
    sizes = np.where(lengths > 0, (ends + 7) // 8 - starts // 8, 0)
    bases = 8 * (np.cumsum(sizes) - sizes) + starts % 8
    total = int(lengths.sum())
    position = np.repeat(bases - (np.cumsum(lengths) - lengths), lengths) + np.arange(total)
    bits = np.unpackbits(read, bitorder="little")
    return np.packbits(bits[position], bitorder="little")


def _rebased(
    stored: np.ndarray, lengths: np.ndarray, dtype: type[np.signedinteger]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run's ``length + 1`` offsets, read back to back, as one offsets array from 0.

    Also returns each run's range of child rows (its first and last stored offset).
    """
    if not len(lengths) or not len(stored):
        empty = np.zeros(len(lengths), np.int64)
        return np.zeros(1, dtype), empty, empty
    firsts = np.cumsum(lengths + 1) - (lengths + 1)
    lasts = firsts + lengths
    child_starts = stored[firsts].astype(np.int64)
    child_ends = stored[lasts].astype(np.int64)
    sizes = child_ends - child_starts
    bases = np.cumsum(sizes) - sizes
    keep = np.ones(len(stored), dtype=bool)
    keep[firsts] = False
    shift = np.repeat(child_starts - bases, lengths)
    offsets = np.concatenate([np.zeros(1, np.int64), stored[keep].astype(np.int64) - shift])
    return offsets.astype(dtype), child_starts, child_ends
