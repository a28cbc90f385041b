"""A journal record's payload: its kind, its JSON and its columns, as bytes and back.

Two payloads (docs/journal.md, "The files"): a *buffer record* (format 3, a group's columns) is a
small head, the columns' Arrow schema, the JSON, the columns' nodes and then their own buffers,
written by reference (no byte copied to encode it); any other record is an Arrow IPC stream of one
record batch whose schema metadata holds the JSON. Decoding reads both, checks every length, and
validates every column in full: a file is input, never trusted.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa

from arrow_split._codecs._layout import Layout, column_names, lay_out, rebuild
from arrow_split.errors import JournalError

__all__ = ["Payload", "Record", "decode_record", "encode_record"]

_META = b"arrow_split.journal"
_BUFFERS = b"ASB3"  # a buffer record's first bytes (an IPC stream's are ff ff ff ff)
_BUFFERS_HEAD = struct.Struct("<4sIII")  # magic; sizes of the schema, the JSON, the nodes
_ZEROS = bytes(8)
_PADS = [memoryview(_ZEROS[:count]) for count in range(8)]  # to a multiple of 8
_CACHE_SIZE = 4096
_TEXT: dict[tuple[int, ...], tuple[list[object], str, dict[str, object] | None, bytes]] = {}
"""By the ids of a ``specs`` list's dicts: the list (kept alive: an id is never reused), its JSON,
the other fields if they are names only, and the whole JSON made last with them."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back: its kind, its JSON, its columns, sequence number and offset."""

    kind: str
    meta: dict[str, Any]
    arrays: list[pa.Array]
    sequence: int = -1  # -1: a format-1 record (no sequence numbers)
    offset: int = 0
    size: int = 0  # its bytes in the file, frame included


class Payload(io.RawIOBase):
    """A record's bytes as pieces (Arrow buffers by reference): a write-only file object."""

    def __init__(self) -> None:
        super().__init__()
        self.pieces: list[memoryview] = []
        self.size = 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.pieces.append(view)
        self.size += view.nbytes
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def writable(self) -> bool:
        return True


def encode_record(kind: str, meta: Mapping[str, object], arrays: Sequence[pa.Array]) -> Payload:
    """A record's payload: a buffer record if it has columns of laid-out types, else IPC."""
    text = _meta_text(kind, meta)
    layout = lay_out(arrays) if arrays else None
    if layout is not None:
        return _buffer_record(text, layout)
    record_batch = pa.RecordBatch.from_arrays(list(arrays), names=column_names(len(arrays)))
    schema = record_batch.schema.with_metadata({_META: text})
    payload = Payload()
    with pa.PythonFile(payload, mode="w") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(record_batch)
    return payload


def _buffer_record(text: bytes, layout: Layout) -> Payload:
    # the nodes' JSON: a list of lists of ints prints as JSON
    nodes = str([layout.nodes, layout.sizes]).encode()
    head = _BUFFERS_HEAD.pack(_BUFFERS, len(layout.schema), len(text), len(nodes))
    start = b"".join((head, layout.schema, text, nodes))
    payload = Payload()
    payload.write(start + _ZEROS[: -len(start) & 7])
    pieces = payload.pieces
    for buffer in layout.buffers:  # by reference: each column buffer is written as itself
        pad = -buffer.size & 7
        pieces.append(memoryview(buffer))
        if pad:
            pieces.append(_PADS[pad])
        payload.size += buffer.size + pad
    return payload


def _meta_text(kind: str, meta: Mapping[str, object]) -> bytes:
    """The record's JSON; a ``specs`` list of shared spec dicts encoded once per list.

    A JSON whose other fields are lists of names and empty objects (a group record's, most
    often) is made once and found again by ``==``: two lists of ``str`` are equal only if their
    JSON is the same.
    """
    specs = meta.get("specs")
    if not isinstance(specs, list) or not specs:
        return json.dumps({"kind": kind, **meta}, allow_nan=False).encode()
    key = tuple(map(id, specs))
    rest = {"kind": kind, **{name: value for name, value in meta.items() if name != "specs"}}
    cached = _TEXT.get(key)
    if cached is not None and cached[2] == rest:
        return cached[3]
    specs_text = json.dumps(specs, allow_nan=False) if cached is None else cached[1]
    text = json.dumps(rest, allow_nan=False)
    encoded = f'{text[:-1]}, "specs": {specs_text}}}'.encode()
    if len(_TEXT) >= _CACHE_SIZE:
        _TEXT.clear()
    names_only = all(_names_or_empty(value) for value in rest.values())
    _TEXT[key] = (list(specs), specs_text, rest if names_only else None, encoded)
    return encoded


def _names_or_empty(value: object) -> bool:
    """A ``str``, a list of them, or an empty dict: compared by ``==`` only if its JSON is too."""
    if type(value) is list:
        return all(type(item) is str for item in value)
    return type(value) is str or (type(value) is dict and not value)


def _no_constant(name: str) -> NoReturn:
    msg = f"its JSON holds `{name}`; a journal holds finite numbers only"
    raise JournalError(msg)


def decode_record(
    payload: pa.Buffer, sequence: int = -1, offset: int = 0, frame: int = 0
) -> Record:
    """The record a payload holds (else a :class:`JournalError`); ``frame``: its frame's size."""
    view = memoryview(payload)
    try:
        if view[: len(_BUFFERS)] == _BUFFERS:
            meta, columns = _read_buffer_record(payload, view)
        else:
            reader = pa.ipc.open_stream(payload)
            record_batch = reader.read_next_batch()
            record_batch.validate(full=True)
            meta = json.loads(_journal_text(reader.schema), parse_constant=_no_constant)
            columns = list(record_batch.columns)
    except (pa.ArrowException, ValueError, KeyError, OSError, StopIteration, RecursionError) as exc:
        msg = f"its payload is not a record: {type(exc).__name__}: {exc}"
        raise JournalError(msg, got=type(exc).__name__) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("kind"), str):
        msg = "its JSON is not an object with a `kind`"
        raise JournalError(msg)
    kind = meta.pop("kind")
    return Record(kind, meta, columns, sequence, offset, frame + payload.size)


def _journal_text(schema: pa.Schema) -> bytes:
    """An IPC record's JSON: its schema's one metadata member (any other is refused)."""
    metadata = schema.metadata or {}
    for member in metadata:
        if member != _META:
            msg = f"its schema metadata has a member {member!r:.40} the format does not define"
            raise JournalError(msg, key=member.decode(errors="replace")[:40])
    text: bytes = metadata[_META]
    return text


def _read_buffer_record(payload: pa.Buffer, view: memoryview) -> tuple[object, list[pa.Array]]:
    """A buffer record's JSON and columns (a JournalError or an ArrowException if it is none)."""
    if len(view) < _BUFFERS_HEAD.size:
        raise _broken(
            "a buffer record shorter than its head", f"at least {_BUFFERS_HEAD.size}", view
        )
    _, *sizes = _BUFFERS_HEAD.unpack_from(view)
    start = _BUFFERS_HEAD.size
    ends = [start + sum(sizes[:count]) for count in range(1, 4)]
    if ends[-1] > len(view):
        raise _broken("a buffer record whose head runs past its end", f"at least {ends[-1]}", view)
    schema = pa.ipc.read_schema(payload.slice(start, sizes[0]))
    meta = json.loads(bytes(view[ends[0] : ends[1]]), parse_constant=_no_constant)
    nodes, buffer_sizes = _layout(json.loads(bytes(view[ends[1] : ends[2]])))
    at = ends[2] + (-ends[2] & 7)
    buffers: list[pa.Buffer | None] = []
    for size in buffer_sizes:
        if size < 0:
            buffers.append(None)
            continue
        if at + size > len(view):
            raise _broken("a buffer runs past the record's end", f"at least {at + size}", view)
        buffers.append(payload.slice(at, size))
        at += size + (-size & 7)
    if at != len(view):
        raise _broken(f"{len(view) - at} bytes after the record's last buffer", str(at), view)
    try:
        columns = rebuild(schema.types, nodes, buffers)
    except JournalError as exc:
        raise _broken(str(exc)) from None
    pa.RecordBatch.from_arrays(columns, schema=schema)  # as many rows in every column
    return meta, columns


def _layout(item: object) -> tuple[list[list[int]], list[int]]:
    """The nodes and buffer sizes of a buffer record, every number checked (never coerced)."""
    if isinstance(item, list) and len(item) == 2:
        nodes, sizes = item
        if (
            isinstance(nodes, list)
            and isinstance(sizes, list)
            and all(isinstance(node, list) and len(node) == 2 for node in nodes)
            and all(type(n) is int and n >= 0 for node in nodes for n in node)
            and all(type(size) is int and size >= -1 for size in sizes)
        ):
            return nodes, sizes
    raise _broken("its nodes are not `[[[length, offset], ...], [size, ...]]` of whole numbers")


def _broken(
    reason: str, expected: str | None = None, view: memoryview | None = None
) -> JournalError:
    """The payload is no record; ``expected`` and ``got``: its size in bytes, where that is why."""
    got = None if view is None else str(len(view))
    return JournalError(f"its payload is not a record: {reason}", expected=expected, got=got)
