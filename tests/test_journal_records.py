"""A journal record's payload: group columns written as their own buffers, read back whole.

The format is in docs/journal.md, "The files"; tests/test_journal_damage.py reads and crafts it from
that text. Here: the round trip of every type a buffer record lays out (sliced, with nulls,
nested), the promise that encoding copies no column byte, and the IPC stream for the rest.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import JournalError
from arrow_split._codecs._layout import lay_out
from arrow_split._record import decode_record, encode_record
from tests.error_facts import raises_facts

_LEAVES: list[tuple[pa.DataType, st.SearchStrategy[Any]]] = [
    (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    (pa.uint8(), st.integers(0, 255)),
    (pa.float32(), st.floats(width=32, allow_nan=False)),
    (pa.float64(), st.floats(allow_nan=False)),
    (pa.bool_(), st.booleans()),
    (pa.large_string(), st.text(max_size=6)),
    (pa.large_binary(), st.binary(max_size=6)),
    (pa.string(), st.text(max_size=6)),
]


@st.composite
def _columns(draw: st.DrawFn) -> list[pa.Array]:
    """Columns of one length, of laid-out types, some with nulls, some sliced."""
    rows = draw(st.integers(0, 6))
    columns = []
    for _ in range(draw(st.integers(1, 4))):
        leaf_type, leaf = draw(st.sampled_from(_LEAVES))
        arrow_type, value = leaf_type, st.none() | leaf
        for wrap in draw(st.lists(st.sampled_from(["large_list", "list", "fixed"]), max_size=2)):
            if wrap == "fixed":
                arrow_type, value = pa.list_(arrow_type, 2), st.lists(value, min_size=2, max_size=2)
            else:
                maker = pa.large_list if wrap == "large_list" else pa.list_
                arrow_type, value = maker(arrow_type), st.lists(value, max_size=3)
        before, after = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        values = draw(st.lists(st.none() | value, min_size=rows + before + after))
        array = pa.array(values[: rows + before + after], arrow_type)
        columns.append(array.slice(before, rows))
    return columns


def _round_trip(arrays: list[pa.Array]) -> tuple[bytes, list[pa.Array]]:
    payload = encode_record("group", {"n": 1}, arrays)
    data = b"".join(bytes(piece) for piece in payload.pieces)
    assert len(data) == payload.size
    record = decode_record(pa.py_buffer(data))
    assert (record.kind, record.meta) == ("group", {"n": 1})
    return data, record.arrays


@given(_columns())
def test_every_laid_out_type_round_trips_through_a_buffer_record(arrays: list[pa.Array]) -> None:
    data, back = _round_trip(arrays)
    assert data[:4] == b"ASB3"
    assert len(back) == len(arrays)
    for got, want in zip(back, arrays, strict=True):
        assert got.type == want.type
        assert got.to_pylist() == want.to_pylist()
        assert got.null_count == want.null_count  # counted from the bitmaps on the way in


def test_a_buffer_record_writes_the_columns_own_buffers_without_a_copy() -> None:
    arrays = [
        pa.array([[1, 2, 3], [4]], pa.large_list(pa.int32())),
        pa.array([0.5, None], pa.float64()),
        pa.array(['{"a": 1}', "{}"], pa.large_string()),
    ]
    payload = encode_record("group", {}, arrays)
    layout = lay_out(arrays)
    assert layout is not None
    written = {piece.obj.address for piece in payload.pieces if isinstance(piece.obj, pa.Buffer)}
    own = {buffer.address for array in arrays for buffer in array.buffers() if buffer is not None}
    assert own == {buffer.address for buffer in layout.buffers}
    assert own <= written  # every column buffer goes to the file as itself, none copied first


def test_a_buffer_record_is_read_as_slices_of_the_file_buffer() -> None:
    arrays = [pa.array([[1, 2, 3], [4]], pa.large_list(pa.int64()))]
    payload = encode_record("group", {}, arrays)
    data = pa.py_buffer(b"".join(bytes(piece) for piece in payload.pieces))
    (column,) = decode_record(data).arrays
    inside = [b for b in column.values.buffers() + column.buffers() if b is not None and b.size]
    assert all(data.address <= b.address < data.address + data.size for b in inside)


def test_columns_of_other_types_take_an_ipc_stream() -> None:
    arrays = [pa.array(["a", "b", "a"]).dictionary_encode(), pa.array([1, 2, 3])]
    assert lay_out(arrays) is None
    data, back = _round_trip(arrays)
    assert data[:4] == b"\xff\xff\xff\xff"
    assert [a.to_pylist() for a in back] == [a.to_pylist() for a in arrays]


def test_records_without_columns_stay_ipc_streams() -> None:
    """The ``open`` record too: a reader of format 2 still finds the version it cannot read."""
    payload = encode_record("open", {"journal_version": "3"}, [])
    assert bytes(payload.pieces[0])[:4] == b"\xff\xff\xff\xff"


@pytest.mark.parametrize(
    ("cut", "expected"),
    [
        (lambda data: data[:10], lambda size: "at least 16"),  # shorter than its head
        (lambda data: data + b"\0" * 8, str),  # bytes after the last buffer
        (lambda data: data[:-8], lambda size: f"at least {size}"),  # the last buffer runs past
    ],
)
def test_a_buffer_record_cut_or_padded_is_a_journal_error(cut: Any, expected: Any) -> None:
    arrays = [pa.array([[1, 2, 3], [4]], pa.large_list(pa.int64()))]
    payload = encode_record("group", {}, arrays)
    data = b"".join(bytes(piece) for piece in payload.pieces)
    # the last buffer (4 int64 values, 32 bytes: no padding) ends the record
    facts = {"expected": expected(len(data)), "got": str(len(cut(data)))}  # the record's size
    with raises_facts(JournalError, **facts):
        decode_record(pa.py_buffer(cut(data)))


def test_json_nested_past_the_parsers_depth_is_a_journal_error() -> None:
    payload = encode_record("group", {}, [pa.array([1, 2], pa.int64())])
    data = b"".join(bytes(piece) for piece in payload.pieces)
    schema_size, text_size, nodes_size = struct.unpack_from("<III", data, 4)
    schema = data[16 : 16 + schema_size]
    nodes_at = 16 + schema_size + text_size
    nodes = data[nodes_at : nodes_at + nodes_size]
    buffers = data[nodes_at + nodes_size + (-(nodes_at + nodes_size) % 8) :]
    deep = b"[" * 100_000
    crafted = struct.pack("<4sIII", b"ASB3", schema_size, len(deep), nodes_size)
    crafted += schema + deep + nodes
    crafted += bytes(-len(crafted) % 8) + buffers
    with raises_facts(JournalError, got="RecursionError"):
        decode_record(pa.py_buffer(crafted))


def test_a_list_type_keeps_its_item_name_after_a_record_of_an_equal_type() -> None:
    """``equals`` ignores a list's item name; the record's schema must not."""
    named = pa.large_list(pa.field("x", pa.int32()))
    for arrow_type in (pa.large_list(pa.int32()), named, pa.large_list(pa.int32())):
        _, (back,) = _round_trip([pa.array([[1, 2], [3]], arrow_type)])
        assert back.type.value_field.name == arrow_type.value_field.name


@pytest.mark.parametrize(
    ("first", "then"),
    [(1, 1.0), (1, True), (0, False), ([1], [1.0]), ({"k": 1}, {"k": 1.0}), (["a"], ["a", "b"])],
)
def test_a_records_json_is_its_own_after_an_equal_but_other_json(first: Any, then: Any) -> None:
    """``1 == 1.0 == True``: a JSON made once and found again by ``==`` must not serve both."""
    specs = [{"name": "a"}, {"name": "b"}]
    for other in (first, then):
        meta = {"names": ["a", "b"], "other": other, "specs": specs}
        payload = encode_record("group", meta, [pa.array([1, 2], pa.int64())])
        record = decode_record(pa.py_buffer(b"".join(bytes(piece) for piece in payload.pieces)))
        assert record.meta == meta
        assert json.dumps(record.meta["other"]) == json.dumps(other)


def _with_nodes(data: bytes, nodes: list[list[int]]) -> bytes:
    """A buffer record with its nodes replaced (docs/journal.md: head, schema, JSON, nodes)."""
    schema_size, text_size, nodes_size = struct.unpack_from("<III", data, 4)
    nodes_at = 16 + schema_size + text_size
    layout = json.loads(data[nodes_at : nodes_at + nodes_size])
    text = json.dumps([nodes, layout[1]]).encode()
    buffers = data[nodes_at + nodes_size + (-(nodes_at + nodes_size) % 8) :]
    crafted = struct.pack("<4sIII", b"ASB3", schema_size, text_size, len(text))
    crafted += data[16:nodes_at] + text
    return crafted + bytes(-len(crafted) % 8) + buffers


def _rewritten_validates(arrays: list[pa.Array]) -> None:
    """The columns written as a batch (what a dump does) read back valid."""
    record_batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, record_batch.schema) as writer:
        writer.write_batch(record_batch)
    pa.ipc.open_stream(sink.getvalue()).read_all().validate(full=True)


_FIXED = [
    pa.array([[1, 2], [3, 4], [5, 6]], pa.list_(pa.int32(), 2)),
    pa.array([[[1, 2], [3, 4]], [[5, 6]]], pa.large_list(pa.list_(pa.int32(), 2))),
    pa.array([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], pa.list_(pa.list_(pa.int64(), 2), 2)),
]


@pytest.mark.parametrize("array", _FIXED, ids=["fixed", "list_of_fixed", "fixed_of_fixed"])
def test_fixed_size_list_offsets_past_their_values_are_refused(array: pa.Array) -> None:
    """Crafted node offsets: a JournalError, or columns that a dump writes and reads back valid.

    Arrow's own full validation accepts a fixed-size list whose offset runs past its values.
    """
    data = b"".join(bytes(piece) for piece in encode_record("group", {}, [array]).pieces)
    nodes = lay_out([array]).nodes  # type: ignore[union-attr]
    refused = 0
    for level in range(len(nodes)):
        for offset in range(8):
            crafted = [list(node) for node in nodes]
            crafted[level][1] = offset
            try:
                record = decode_record(pa.py_buffer(_with_nodes(data, crafted)))
            except JournalError:
                refused += 1
                continue
            for column in record.arrays:
                column.validate(full=True)
            _rewritten_validates(record.arrays)
    assert refused
