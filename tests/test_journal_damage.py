"""Journal damage (issue 29): corruption reported, never repaired by deletion; locks; identity."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pytest
import xxhash
from hypothesis import event, given, settings
from hypothesis import strategies as st

from arrow_split import (
    ArrowSplitError,
    JournalError,
    OptionTypeError,
    RolloutBatchBuilder,
    SchemaError,
)
from tests.error_facts import assert_facts, raises_facts

REPO_ROOT = Path(__file__).resolve().parent.parent


def _group(first: int, count: int = 2) -> dict[str, list[object]]:
    return {
        "tokens": [[first + i, 2, 3] for i in range(count)],
        "response_lengths": [1] * count,
        "rewards": [float(i) for i in range(count)],
        "sample_indices": list(range(first, first + count)),
    }


def _journal(folder: Path, groups: int = 3) -> Path:
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    for index in range(groups):
        builder.extend(_group(2 * index))
    builder.close()
    return folder / "step-000000.journal"


def _offsets(path: Path) -> list[int]:
    import struct

    frame = struct.Struct("<4s8sQQQI")
    data, offsets, at = path.read_bytes(), [], 0
    while at < len(data):
        offsets.append(at)
        at += frame.size + frame.unpack_from(data, at)[3]
    return offsets


def test_one_bad_byte_is_reported_not_truncated(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    offsets = _offsets(path)
    data = bytearray(path.read_bytes())
    data[offsets[1] + 60] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(tmp_path)
    assert_facts(caught.value, {"path": str(path), "offset": offsets[1]})
    assert path.read_bytes() == bytes(data)
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    assert len(salvaged) == 4
    assert len(salvaged.salvaged) >= 1
    assert (tmp_path / "step-000000.journal.damaged").read_bytes() == bytes(data)


def test_a_duplicated_record_is_reported_and_salvaged_once(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    offsets = _offsets(path)
    data = path.read_bytes()
    path.write_bytes(data + data[offsets[1] : offsets[2]])
    due = {"expected": f"record {len(offsets)}", "got": "record 1"}  # record 1 again
    with raises_facts(JournalError, path=str(path), offset=len(data), **due):
        RolloutBatchBuilder.recover(tmp_path)
    assert len(RolloutBatchBuilder.recover(tmp_path, salvage=True)) == 6


def test_a_record_spliced_from_another_journal_is_refused(tmp_path: Path) -> None:
    path = _journal(tmp_path / "a")
    other = _journal(tmp_path / "b")
    spliced = other.read_bytes()[_offsets(other)[1] : _offsets(other)[2]]
    own = path.read_bytes()
    path.write_bytes(own + spliced)
    ids = {"expected": f"journal {own[4:12].hex()}", "got": f"journal {spliced[4:12].hex()}"}
    with raises_facts(JournalError, path=str(path), offset=len(own), **ids):
        RolloutBatchBuilder.recover(tmp_path / "a")


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_damage_is_recovered_or_named_never_dropped(data: st.DataObject) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = _journal(Path(folder))
        original = path.read_bytes()
        damaged = bytearray(original)
        how = data.draw(st.sampled_from(["flip", "cut", "swap"]))
        offsets = _offsets(path)
        if how == "flip":
            damaged[data.draw(st.integers(0, len(original) - 1))] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            damaged = damaged[: data.draw(st.integers(offsets[1], len(original) - 1))]
        else:
            a, b, c = offsets[1], offsets[2], offsets[3]
            damaged = damaged[:a] + damaged[b:c] + damaged[a:b] + damaged[c:]
        path.write_bytes(bytes(damaged))
        try:
            builder = RolloutBatchBuilder.recover(folder)
        except JournalError:
            assert path.read_bytes() == bytes(damaged)  # nothing changed
            return
        kept = path.read_bytes()
        assert bytes(damaged).startswith(kept)  # only a torn tail was cut
        whole = sum(offset + 1 <= len(kept) for offset in offsets[1:])
        if how != "cut":
            assert len(builder) == 6
        else:
            assert len(builder) >= 2 * (whole - 1)
        builder.close()


def test_two_builders_on_one_folder_second_gets_a_typed_error(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys
        from arrow_split import ArrowSplitError, JournalError, RolloutBatchBuilder
        try:
            RolloutBatchBuilder.recover(sys.argv[1])
        except JournalError as error:
            print("refused", error)
        """
    )
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    builder.extend(_group(0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        env=env,
    )
    assert done.stdout.startswith("refused"), done.stderr
    assert f"in use by process {os.getpid()} on host" in done.stdout
    # The same process: the message says so, not "process <our own pid>".
    with raises_facts(JournalError, got=str(os.getpid()), errno=errno.EBUSY) as caught:
        RolloutBatchBuilder(journal=tmp_path)
    assert "another builder of this process" in str(caught.value)  # the wording is the claim
    builder.extend(_group(2))
    builder.close()
    assert len(RolloutBatchBuilder.recover(tmp_path)) == 4


def test_an_existing_step_dump_is_never_overwritten(tmp_path: Path) -> None:
    _journal(tmp_path, 1)
    (tmp_path / "step-000001.arrow").write_bytes(b"keep me")
    builder = RolloutBatchBuilder.recover(tmp_path)
    builder.finish()
    builder.extend(_group(10))
    builder.finish()
    assert (tmp_path / "step-000001.arrow").read_bytes() == b"keep me"
    assert (tmp_path / "step-000002.arrow").exists()


@pytest.mark.parametrize("identity", ["nope", "raw_reward", "", "tokens"])
def test_the_identity_key_is_checked_when_the_builder_is_made(identity: str) -> None:
    with pytest.raises(SchemaError) as caught:
        RolloutBatchBuilder(identity=identity)
    assert_facts(caught.value, {"key": "identity"})


def test_a_sample_without_identity_is_refused() -> None:
    builder = RolloutBatchBuilder(identity="sample_indices")
    group = _group(0)
    group["sample_indices"] = [None, None]
    with raises_facts(ArrowSplitError, key="sample_indices", sample=0, got="None"):
        builder.extend(group)
    assert len(builder) == 0


@pytest.mark.parametrize("journal", [None, 123, True, ["a"], b"folder"])
def test_bad_journal_arguments_are_typed_errors(journal: object) -> None:
    with pytest.raises(OptionTypeError) as caught:
        RolloutBatchBuilder.recover(journal)  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "journal"})
    if journal is not None:
        with pytest.raises(OptionTypeError) as caught:
            RolloutBatchBuilder(journal=journal)  # type: ignore[arg-type]
        assert_facts(caught.value, {"key": "journal"})


def test_a_crafted_journal_value_runs_no_code(tmp_path: Path) -> None:
    import base64
    import pickle

    from arrow_split._journal_content import unpickle_v1

    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self) -> tuple[object, ...]:
            return (os.system, (f"touch {marker}",))

    text = base64.b64encode(pickle.dumps(Evil())).decode()
    with raises_facts(JournalError, got="NotPlainData"):  # refused, not run
        unpickle_v1(text)
    assert not marker.exists()


def test_a_header_flag_that_is_not_a_bool_is_refused(tmp_path: Path) -> None:
    from arrow_split._journal_content import parse_header

    header = {
        "journal_version": "3",
        "library_version": "x",
        "declared": [],
        "step": 0,
        "allow_nonfinite": "False",
        "exact_floats": False,
        "identity": None,
    }
    with pytest.raises(JournalError) as caught:
        parse_header(header, "f", 0)
    assert_facts(caught.value, {"key": "allow_nonfinite"})


def test_recovered_step_decodes_plain_objects_only_unless_trusted(tmp_path):
    from arrow_split import RolloutBatchBuilder

    group = {
        "tokens": [[1, 2, 3]],
        "response_lengths": [1],
        "metadata": [{"source": "a"}],
    }
    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(group)
    builder.close()
    recovered = RolloutBatchBuilder.recover(tmp_path)
    batch = recovered.finish()
    assert batch.trust_objects is False
    assert batch.to_train_data()["metadata"] == [{"source": "a"}]
    recovered.extend(group)
    assert recovered.finish().trust_objects is True
    recovered.close()
    builder = RolloutBatchBuilder(journal=tmp_path / "other")
    builder.extend(group)
    builder.close()
    trusted = RolloutBatchBuilder.recover(tmp_path / "other", trust_objects=True)
    assert trusted.finish().trust_objects is True
    trusted.close()


# -- records whose frame is valid (length and checks recomputed) but whose content is crafted

_FRAME_HEAD = struct.Struct("<4s8sQQQ")  # docs/journal.md: magic, id, sequence, length, XXH3-64
_META_KEY = b"arrow_split.journal"


def _frames(data: bytes) -> list[tuple[int, bytes, int, bytes]]:
    """Each record of a journal (formats 2 and 3 share the frame): offset, id, sequence, payload."""
    records, at = [], 0
    while at < len(data):
        _, journal_id, sequence, length, _ = _FRAME_HEAD.unpack_from(data, at)
        start = at + _FRAME_HEAD.size + 4
        records.append((at, journal_id, sequence, data[start : start + length]))
        at = start + length
    return records


def _framed(journal_id: bytes, sequence: int, payload: bytes) -> bytes:
    """A record with a valid frame, made from the documented format (not the library's code)."""
    head = _FRAME_HEAD.pack(
        b"ASJ2", journal_id, sequence, len(payload), xxhash.xxh3_64_intdigest(payload)
    )
    return head + struct.pack("<I", xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF) + payload


def _read_payload(payload: bytes) -> tuple[dict[str, Any], list[pa.Array]]:
    if payload[:4] == _BUFFERS_MAGIC:
        parts = _buffer_parts(payload)
        return parts.meta, _arrays_from(parts)
    reader = pa.ipc.open_stream(pa.py_buffer(bytearray(payload)))
    batch = reader.read_next_batch()
    return json.loads(reader.schema.metadata[_META_KEY]), list(batch.columns)


_BUFFERS_MAGIC = b"ASB3"
_BUFFERS_HEAD = struct.Struct("<4sIII")  # docs/journal.md: magic, sizes of schema, JSON, nodes


class _BufferParts(NamedTuple):
    meta: dict[str, Any]
    schema: bytes
    nodes: list[Any]
    sizes: list[Any]
    buffers: list[bytes]  # the present buffers' bytes, without their padding


def _buffer_parts(payload: bytes) -> _BufferParts:
    """A buffer record's parts, read from the documented format (not the library's code)."""
    _, schema_size, text_size, nodes_size = _BUFFERS_HEAD.unpack_from(payload)
    at = _BUFFERS_HEAD.size
    schema = payload[at : at + schema_size]
    at += schema_size
    meta = json.loads(payload[at : at + text_size])
    at += text_size
    nodes, sizes = json.loads(payload[at : at + nodes_size])
    at += nodes_size + (-(at + nodes_size) % 8)
    buffers = []
    for size in sizes:
        if size >= 0:
            buffers.append(payload[at : at + size])
            at += size + (-size % 8)
    assert at == len(payload)
    return _BufferParts(meta, schema, nodes, sizes, buffers)


def _arrays_from(parts: _BufferParts) -> list[pa.Array]:
    """The columns of a buffer record: each node's buffers, then its child's, depth first."""
    nodes = iter(parts.nodes)
    present = iter(parts.buffers)
    buffers = iter([None if size < 0 else pa.py_buffer(next(present)) for size in parts.sizes])

    def one(arrow_type: pa.DataType) -> pa.Array:
        length, offset = next(nodes)
        own = [next(buffers) for _ in range(arrow_type.num_buffers)]
        nested = isinstance(arrow_type, (pa.ListType, pa.LargeListType, pa.FixedSizeListType))
        children = [one(arrow_type.value_type)] if nested else None
        return pa.Array.from_buffers(arrow_type, length, own, -1, offset, children)

    schema = pa.ipc.read_schema(pa.py_buffer(parts.schema))
    return [one(arrow_type) for arrow_type in schema.types]


def _buffer_payload(parts: _BufferParts, tail: bytes = b"") -> bytes:
    """A buffer record made from its parts, as docs/journal.md lays it out."""
    text, layout = json.dumps(parts.meta).encode(), json.dumps([parts.nodes, parts.sizes]).encode()
    out = bytearray(_BUFFERS_HEAD.pack(_BUFFERS_MAGIC, len(parts.schema), len(text), len(layout)))
    out += parts.schema + text + layout
    out += bytes(-len(out) % 8)
    for buffer in parts.buffers:
        out += buffer + bytes(-len(buffer) % 8)
    return bytes(out + tail)


def _payload(meta: object, arrays: list[pa.Array]) -> bytes:
    names = [f"c{i}" for i in range(len(arrays))]
    schema = pa.schema([pa.field(n, a.type) for n, a in zip(names, arrays, strict=True)])
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    batch = batch.replace_schema_metadata({_META_KEY: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


class _RunsCode:
    """A pickle that would create ``path`` if it were ever loaded as anything but plain data."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (os.system, (f"touch {self.path}",))


def _crafted_group(first: int, count: int = 2) -> dict[str, list[object]]:
    group: dict[str, list[object]] = dict(_group(first, count))
    group["metadata"] = [{"i": first + i} for i in range(count)]
    group["raw_reward"] = [0.5] * count
    return group


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_GARBAGE_ARRAYS = st.sampled_from(
    [
        pa.array([1, 2], pa.int64()),
        pa.array([1], pa.int32()),
        pa.array([None, None], pa.int64()),
        pa.array([1.5, float("nan")]),
        pa.array(["a", "b"]),
        pa.array([b"\x80\x04N.", b"junk"], pa.large_binary()),
        pa.array([[1, 2], [3]], pa.large_list(pa.int32())),
        pa.array([[1, 2], None], pa.list_(pa.int64())),
        pa.array([[[1]], [[2, 3]]]),
        pa.array([{"x": 1}, {"x": 2}]),
        pa.array([True, False]),
        pa.array([], pa.int64()),
        pa.array([1, 2]).dictionary_encode(),
        pa.array([0, 1], pa.int8()),
        pa.array([2**40, -1], pa.int64()),
        pa.nulls(2),
    ]
)


def _sized(array: pa.Array, rows: int) -> pa.Array:
    """``array`` repeated or cut to ``rows`` rows (a record's columns all have the same rows)."""
    if not len(array):
        return pa.nulls(rows, array.type)
    return pa.concat_arrays([array] * rows).slice(0, rows)


def _bad_offsets() -> pa.Array:
    """A list array whose offsets run backwards and past its values (an invalid array)."""
    offsets = pa.py_buffer(struct.pack("<3q", 0, 9, 2))
    values = pa.array([1, 2, 3], pa.int32())
    return pa.LargeListArray.from_buffers(
        pa.large_list(pa.int32()), 2, [None, offsets], children=[values]
    )


_CRAFTS = [
    "drop",
    "extra",
    "swap",
    "kind",
    "value",
    "array",
    "offsets",
    "evil",
    "length",
    "columns",
    "reorder_names",
    "not_an_object",
    "duplicate",
    "reorder",
    "spliced",
]


def _craft(
    how: str,
    data: st.DataObject,
    meta: dict[str, Any],
    arrays: list[pa.Array],
    evil: bytes,
) -> tuple[object, list[pa.Array]] | bytes:
    """Crafted content for one record: new JSON and columns, or a whole payload."""
    meta, arrays = dict(meta), list(arrays)
    keys = sorted(meta)
    if how == "drop" and keys:
        del meta[data.draw(st.sampled_from(keys))]
    elif how == "extra":
        meta[data.draw(st.text(max_size=8))] = data.draw(_JSON)
    elif how == "swap" and len(keys) > 1:
        a, b = data.draw(st.lists(st.sampled_from(keys), min_size=2, max_size=2, unique=True))
        meta[a], meta[b] = meta[b], meta[a]
    elif how == "kind":
        meta["kind"] = data.draw(st.sampled_from(["open", "group", "global", "", "GROUP"]) | _JSON)
    elif how == "value" and keys:
        key = data.draw(st.sampled_from(keys))
        meta[key] = data.draw(_JSON | st.just(_mutated(data, meta[key])))
    elif how == "array" and arrays:
        arrays[data.draw(st.integers(0, len(arrays) - 1))] = _sized(
            data.draw(_GARBAGE_ARRAYS), len(arrays[0])
        )
    elif how == "offsets" and arrays:
        arrays[0] = _bad_offsets()
    elif how == "evil" and arrays:
        count = len(arrays[0])
        arrays[data.draw(st.integers(0, len(arrays) - 1))] = pa.array(
            [evil] * count, pa.large_binary()
        ).dictionary_encode()
    elif how == "length" and arrays:  # every column of a record has the same rows
        rows = data.draw(st.integers(0, len(arrays[0])))
        arrays = [array.slice(0, rows) for array in arrays]
    elif how == "columns" and arrays:
        if data.draw(st.booleans()):
            arrays.pop(data.draw(st.integers(0, len(arrays) - 1)))
        else:
            arrays.append(_sized(data.draw(_GARBAGE_ARRAYS), len(arrays[0])))
    elif how == "reorder_names" and isinstance(meta.get("names"), list):
        meta["names"] = list(reversed(meta["names"]))
    elif how == "not_an_object":
        return _payload(data.draw(_JSON), arrays)
    return meta, arrays


_BUFFER_CRAFTS = ["nodes", "sizes", "types", "bytes_after", "cut_buffer", "head"]
"""Crafts of a buffer record's own parts (a group record's; the others are IPC streams)."""
_OTHER_TYPES = st.sampled_from(
    [
        pa.int32(),
        pa.int64(),
        pa.float64(),
        pa.bool_(),
        pa.large_string(),
        pa.large_binary(),
        pa.large_list(pa.int64()),
        pa.large_list(pa.float32()),
        pa.list_(pa.int32()),
        pa.large_list(pa.list_(pa.int32(), 2)),
        pa.dictionary(pa.int8(), pa.string()),
        pa.struct([("x", pa.int32())]),
        pa.null(),
    ]
)


def _craft_buffers(how: str, data: st.DataObject, payload: bytes) -> bytes:
    """A buffer record with one of its parts crafted (other records are left as they are)."""
    if payload[:4] != _BUFFERS_MAGIC:
        return payload
    parts = _buffer_parts(payload)
    if how == "nodes":
        return _buffer_payload(parts._replace(nodes=_mutated(data, parts.nodes)))
    if how == "sizes":
        return _buffer_payload(parts._replace(sizes=_mutated(data, parts.sizes)))
    if how == "types":
        schema = pa.ipc.read_schema(pa.py_buffer(parts.schema))
        index = data.draw(st.integers(0, len(schema.types) - 1))
        schema = schema.set(index, pa.field(schema.names[index], data.draw(_OTHER_TYPES)))
        return _buffer_payload(parts._replace(schema=schema.serialize().to_pybytes()))
    if how == "bytes_after":
        return _buffer_payload(parts, tail=data.draw(st.binary(min_size=1, max_size=16)))
    if how == "cut_buffer":
        index = data.draw(st.integers(0, len(parts.buffers) - 1))
        buffers = list(parts.buffers)
        buffers[index] = buffers[index][: data.draw(st.integers(0, len(buffers[index])))]
        return _buffer_payload(parts._replace(buffers=buffers))
    raw = bytearray(payload)  # "head": one of the head's sizes set to any u32
    struct.pack_into(
        "<I", raw, 4 * data.draw(st.integers(1, 3)), data.draw(st.integers(0, 2**32 - 1))
    )
    return bytes(raw)


def _mutated(data: st.DataObject, value: object) -> object:
    """A near miss of a stored field: one item dropped, doubled or replaced, a type changed."""
    if isinstance(value, list) and value:
        index = data.draw(st.integers(0, len(value) - 1))
        choice = data.draw(st.sampled_from(["drop", "double", "replace"]))
        if choice == "drop":
            return value[:index] + value[index + 1 :]
        if choice == "double":
            return [*value, value[index]]
        return [*value[:index], _mutated(data, value[index]), *value[index + 1 :]]
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        return {**value, key: _mutated(data, value[key])}
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return data.draw(st.sampled_from([value + 1, -1, 2**64, float(value), str(value), None]))
    if isinstance(value, str):
        return data.draw(st.sampled_from(["", value + "x", value.upper(), "int_map", "large_list"]))
    return data.draw(_JSON)


@settings(max_examples=25, deadline=None)
@pytest.mark.parametrize("how", _CRAFTS + _BUFFER_CRAFTS)
@given(data=st.data())
def test_a_valid_frame_with_crafted_content_is_recovered_whole_or_a_journal_error(
    how: str, data: st.DataObject
) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        folder, other_folder = Path(scratch) / "j", Path(scratch) / "other"
        marker = Path(scratch) / "code-ran"
        builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
        for index in range(3):
            builder.extend(_crafted_group(2 * index))
        builder.set_global("dynamic_global_batch_size", 6)
        builder.close()
        other = RolloutBatchBuilder(journal=other_folder, exact_floats=True)
        other.extend({"tokens": [[7, 8]], "response_lengths": [1], "loss_masks": [[1]]})
        other.set_global("dynamic_global_batch_size", 1)
        other.close()
        path = folder / "step-000000.journal"
        original = path.read_bytes()
        records = _frames(original)
        assert b"".join(_framed(*record[1:]) for record in records) == original  # as documented
        spliced = [
            payload for *_, payload in _frames((other_folder / "step-000000.journal").read_bytes())
        ]
        evil = pickle.dumps(_RunsCode(marker))
        target = data.draw(st.integers(0, len(records) - 1), label="record")
        payloads = {index: payload for index, (*_, payload) in enumerate(records)}
        if how in ("duplicate", "reorder"):  # another record's content at this place
            other_index = data.draw(st.sampled_from(sorted(set(payloads) - {target})))
            if how == "reorder":
                payloads[other_index] = records[target][3]
            payloads[target] = records[other_index][3]
            rewritten = {target, other_index}
        elif how == "spliced":  # a record of another journal, framed as one of this one
            payloads[target] = data.draw(st.sampled_from(spliced))
            rewritten = {target}
        elif how in _BUFFER_CRAFTS:
            payloads[target] = _craft_buffers(how, data, payloads[target])
            rewritten = {target}
        else:
            crafted = _craft(how, data, *_read_payload(payloads[target]), evil)
            payloads[target] = crafted if isinstance(crafted, bytes) else _payload(*crafted)
            rewritten = {target}
        damaged = b"".join(
            _framed(journal_id, sequence, payloads[index])
            for index, (_, journal_id, sequence, _) in enumerate(records)
        )
        path.write_bytes(damaged)
        try:
            recovered = RolloutBatchBuilder.recover(folder)
        except JournalError:
            event("a JournalError")
            assert path.read_bytes() == damaged  # nothing changed, nothing cut
            assert not marker.exists()
            return
        event("recovered")
        assert path.read_bytes() == damaged  # a valid frame is never a torn tail: never cut
        try:
            batch = recovered.finish()
        except ArrowSplitError:  # a crafted batch-global that a call could have set too
            recovered.close()
            assert 0 not in rewritten
            assert not marker.exists()
            return
        recovered.close()
        with contextlib.suppress(ArrowSplitError):  # objects decode as plain data only
            batch.to_train_data()
        held = set(batch.column("sample_indices").to_pylist())
        untouched = {
            2 * (number - 1) + i
            for number in (1, 2, 3)
            if number not in rewritten
            for i in range(2)
        }
        assert untouched <= held  # every acknowledged record not rewritten is recovered
        assert not marker.exists()


def _rewritten(path: Path, change: Any) -> bytes:
    """The journal at ``path`` with each record's JSON passed through ``change(meta)`` (IPC)."""
    rewritten = []
    for _, journal_id, sequence, payload in _frames(path.read_bytes()):
        if payload[:4] == _BUFFERS_MAGIC:
            parts = _buffer_parts(payload)
            meta, arrays = parts.meta, _arrays_from(parts)
        else:
            meta, arrays = _read_payload(payload)
        change(meta)
        rewritten.append(_framed(journal_id, sequence, _payload(meta, arrays)))
    return b"".join(rewritten)


def test_a_journal_of_format_2_which_no_release_wrote_is_refused(tmp_path: Path) -> None:
    """Format 2 (every record an IPC stream) was written between releases only: refused, named."""
    path = _journal(tmp_path / "j")

    def as_format_2(meta: dict[str, Any]) -> None:
        if meta["kind"] == "open":
            meta["journal_version"] = "2"

    old = tmp_path / "format-2"
    old.mkdir()
    written = old / path.name
    format_2 = _rewritten(path, as_format_2)
    written.write_bytes(format_2)
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(old)
    assert_facts(caught.value, {"path": str(written), "key": "journal_version", "got": "2"})
    assert caught.value.fix
    assert written.read_bytes() == format_2


@pytest.mark.parametrize("kind", ["open", "group", "global"])
def test_a_record_with_a_member_the_format_does_not_define_is_refused(
    tmp_path: Path, kind: str
) -> None:
    """Refused naming the file, the record's offset and the member; salvage skips a group's."""
    folder = tmp_path / "j"
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    builder.extend(_group(0))
    builder.set_global("dynamic_global_batch_size", 2)
    builder.extend(_group(2))
    builder.close()
    path = folder / "step-000000.journal"
    offsets = _offsets(path)
    crafted_at = {"open": 0, "group": 1, "global": 2}[kind]

    def extra_member(meta: dict[str, Any]) -> None:
        if meta["kind"] == kind and not extra_member.done:  # type: ignore[attr-defined]
            meta["comment"] = "added by hand"
            extra_member.done = True  # type: ignore[attr-defined]

    extra_member.done = False  # type: ignore[attr-defined]
    damaged = _rewritten(path, extra_member)
    path.write_bytes(damaged)
    offset = _offsets(path)[crafted_at] if crafted_at else 0
    assert len(offsets) == len(_offsets(path))
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(folder)
    assert_facts(caught.value, {"path": str(path), "offset": offset, "key": "comment"})
    assert path.read_bytes() == damaged
    if kind == "open":
        return
    salvaged = RolloutBatchBuilder.recover(folder, salvage=True)
    assert [damage.offset for damage in salvaged.salvaged] == [offset]
    assert len(salvaged) == (2 if kind == "group" else 4)
    salvaged.close()


def test_an_ipc_records_schema_metadata_member_the_format_does_not_define_is_damage(
    tmp_path: Path,
) -> None:
    path = _journal(tmp_path)
    records = _frames(path.read_bytes())
    meta, arrays = _read_payload(records[0][3])
    batch = pa.RecordBatch.from_arrays(arrays, names=[f"c{i}" for i in range(len(arrays))])
    batch = batch.replace_schema_metadata(
        {_META_KEY: json.dumps(meta).encode(), b"note": b"added by hand"}
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    crafted = _framed(records[0][1], 0, bytes(sink.getvalue()))
    path.write_bytes(crafted + b"".join(_framed(*record[1:]) for record in records[1:]))
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(tmp_path)
    assert_facts(caught.value, {"path": str(path), "offset": 0})


@pytest.mark.parametrize("value_type", [[], {}, 3, "int64", True])
def test_a_global_records_spec_with_a_value_type_of_another_json_kind_is_a_journal_error(
    tmp_path: Path, value_type: object
) -> None:
    """Found by the crafted-record test: such a spec once raised an untyped AttributeError."""
    folder = tmp_path / "j"
    builder = RolloutBatchBuilder(journal=folder)
    builder.extend(_crafted_group(0))
    builder.set_global("dynamic_global_batch_size", 2)
    builder.close()
    path = folder / "step-000000.journal"
    records = _frames(path.read_bytes())
    _, journal_id, sequence, payload = records[-1]
    meta, arrays = _read_payload(payload)
    assert meta["kind"] == "global"
    meta["spec"]["value_type"] = value_type
    crafted = _framed(journal_id, sequence, _payload(meta, arrays))
    damaged = b"".join(_framed(*record[1:]) for record in records[:-1]) + crafted
    path.write_bytes(damaged)
    with pytest.raises(JournalError):
        RolloutBatchBuilder.recover(folder)
    assert path.read_bytes() == damaged


def test_salvage_skips_a_whole_record_that_breaks_a_rule(tmp_path: Path) -> None:
    # the record's frame and checksum are right; its content is not a batch's: without salvage
    # a JournalError naming the file and the offset, with salvage the record is skipped
    from arrow_split._journal_content import global_record
    from arrow_split.schema import KNOWN_COLUMNS

    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.append({"tokens": [1, 2]})
    spec = KNOWN_COLUMNS["dynamic_global_batch_size"]
    assert builder._journal is not None
    builder._journal.write("global", global_record(spec.name, spec, -3), [])
    builder.append({"tokens": [3]})
    builder.close()
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(tmp_path)
    assert caught.value.path is not None
    assert caught.value.path.endswith(".journal")
    assert caught.value.offset is not None
    assert caught.value.offset > 0
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    assert len(salvaged) == 2
    assert [damage.offset for damage in salvaged.salvaged] == [caught.value.offset]
    assert "breaks a rule" in salvaged.salvaged[0].reason
    salvaged.close()
    again = RolloutBatchBuilder.recover(tmp_path)  # the journal was rewritten without it
    assert len(again) == 2
    assert "dynamic_global_batch_size" not in again.finish().batch_globals
    again.close()


_FORKING_WRITER = """
import os, sys, time
from arrow_split import RolloutBatchBuilder
builder = RolloutBatchBuilder(journal=sys.argv[1], identity="sample_indices")
builder.extend({"tokens": [[1, 2]], "response_lengths": [1], "sample_indices": [0]})
child = os.fork()
if child == 0:
    time.sleep(60)
    os._exit(0)
print(child, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork only")
def test_a_child_forked_by_the_writer_keeps_no_lock_once_the_writer_is_killed(
    tmp_path: Path,
) -> None:
    import signal

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PYTHONWARNINGS": "ignore"}
    child = 0
    with subprocess.Popen(
        [sys.executable, "-c", _FORKING_WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    ) as writer:
        try:
            assert writer.stdout is not None
            child = int(writer.stdout.readline())
            with pytest.raises(JournalError):  # the writer holds the folder
                RolloutBatchBuilder.recover(tmp_path)
            writer.send_signal(signal.SIGKILL)
            writer.wait(timeout=10)
            os.kill(child, 0)  # the child lives on
            recovered = RolloutBatchBuilder.recover(tmp_path)  # the lock is free at once
            assert len(recovered) == 1
            recovered.close()
        finally:
            writer.kill()
            if child:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
