"""A journal file's records: their frames, their payloads (Arrow IPC streams) and how to read them.

The format is described in :mod:`arrow_split._journal`: a record is a frame
``magic (b"ASJ1") | payload length (uint64, little-endian) | CRC-32 of the payload (uint32)``
and its payload, one Arrow IPC stream whose schema metadata holds the record's JSON. A payload is
made as pieces (:class:`Payload`: the columns' own buffers, by reference) and written with
gathered writes (:func:`write_record`); :func:`read_records` reads a file's whole records back
and stops at the first torn one.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from arrow_split._dump_meta import _spec_from_json, _spec_to_json
from arrow_split.errors import DumpError, JournalError
from arrow_split.schema import ColumnSpec

__all__ = [
    "FRAME",
    "Payload",
    "Record",
    "decode_record",
    "encode_record",
    "pack_value",
    "read_records",
    "spec_from_json",
    "spec_to_json",
    "unpack_value",
    "write_record",
]

_MAGIC = b"ASJ1"
FRAME = struct.Struct("<4sQI")
"""A record's frame: magic, payload length, CRC-32 of the payload."""
_IOV_MAX = 512  # pieces per gathered write (Linux allows 1024)
_META = b"arrow_split.journal"


_SPEC_JSON: dict[int, tuple[ColumnSpec, dict[str, object]]] = {}
_SPEC_JSON_SIZE = 4096


def spec_to_json(spec: ColumnSpec) -> dict[str, object]:
    """A spec as a dump stores it (shared: read it, do not change it).

    Every group record stores the specs it used, which are the builder's same objects call
    after call: their JSON is made once per object (keyed by identity, the object kept alive
    with it, so an equal spec with another Arrow field name is never given a stale JSON).
    """
    cached = _SPEC_JSON.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    stored = _spec_to_json(spec)
    if len(_SPEC_JSON) >= _SPEC_JSON_SIZE:
        _SPEC_JSON.clear()
    _SPEC_JSON[id(spec)] = (spec, stored)
    return stored


def spec_from_json(item: object, source: str) -> ColumnSpec:
    """A spec stored by :func:`spec_to_json` (a :class:`JournalError` if it is not one)."""
    try:
        return _spec_from_json(item, 0, source)
    except DumpError as exc:
        raise JournalError(str(exc)) from None


def pack_value(value: object) -> str:
    """A batch-global value as text (a base64 pickle)."""
    return base64.b64encode(pickle.dumps(value, protocol=5)).decode("ascii")


def unpack_value(text: str) -> object:
    """The value packed by :func:`pack_value`."""
    return pickle.loads(base64.b64decode(text))


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back: its kind, its JSON and its columns."""

    kind: str
    meta: dict[str, Any]
    arrays: list[pa.Array]


class Payload:
    """A record's payload as the IPC writer produced it: its pieces, their size and CRC-32.

    The pieces are the Arrow buffers by reference and the small metadata as bytes: nothing is
    copied into a payload buffer, the pieces go to the file in gathered writes. It is a
    write-only file object for :class:`pyarrow.PythonFile`.
    """

    def __init__(self) -> None:
        self.pieces: list[memoryview] = []
        self.size = 0
        self.closed = False

    def write(self, data: bytes | pa.Buffer) -> int:
        view = memoryview(data).cast("B")
        self.pieces.append(view)
        self.size += view.nbytes
        return view.nbytes

    def crc(self) -> int:
        """The CRC-32 of the payload's bytes."""
        crc = 0
        for piece in self.pieces:
            crc = zlib.crc32(piece, crc)
        return crc

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def writable(self) -> bool:
        return True


def encode_record(kind: str, meta: Mapping[str, object], arrays: Sequence[pa.Array]) -> Payload:
    """A record's payload: one Arrow IPC stream, as pieces (see :class:`Payload`)."""
    text = json.dumps({"kind": kind, **meta}, allow_nan=False).encode()
    names = [f"c{i}" for i in range(len(arrays))]
    record_batch = pa.RecordBatch.from_arrays(list(arrays), names=names)
    record_batch = record_batch.replace_schema_metadata({_META: text})
    payload = Payload()
    with (
        pa.PythonFile(payload, mode="w") as sink,
        pa.ipc.new_stream(sink, record_batch.schema) as writer,
    ):
        writer.write_batch(record_batch)
    return payload


def decode_record(payload: pa.Buffer) -> Record:
    reader = pa.ipc.open_stream(payload)
    record_batch = reader.read_next_batch()
    meta = json.loads((reader.schema.metadata or {})[_META])
    return Record(str(meta.pop("kind")), meta, list(record_batch.columns))


def read_records(path: str) -> tuple[list[Record], int]:
    """The whole records of a journal file, and the byte offset where the last one ends.

    Raises
    ------
    JournalError
        The file does not start with an ``open`` record: it is not a journal.
    """
    data = pa.memory_map(path).read_buffer()  # mapped: the page cache, not a copy in fresh memory
    records: list[Record] = []
    end = 0
    while end + FRAME.size <= data.size:
        magic, length, crc = FRAME.unpack(data.slice(end, FRAME.size).to_pybytes())
        start = end + FRAME.size
        if magic != _MAGIC or start + length > data.size:
            break
        payload = data.slice(start, length)
        if zlib.crc32(memoryview(payload)) != crc:
            break
        try:
            records.append(decode_record(payload))
        except (pa.ArrowException, ValueError, KeyError, OSError):
            break
        end = start + length
    if not records or records[0].kind != "open":
        msg = f"`{path}` is not a rollout journal (no `open` record); remove it"
        raise JournalError(msg)
    return records, end


def _write_views(descriptor: int, views: list[memoryview]) -> None:
    """``views`` one after the other, in gathered writes (none lost to a short write)."""
    first = 0
    while first < len(views):
        written = os.writev(descriptor, views[first : first + _IOV_MAX])
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if written:
            views[first] = views[first][written:]


def write_record(descriptor: int, payload: Payload) -> None:
    """The frame, then the payload's pieces, where the descriptor is (the file's end)."""
    frame = FRAME.pack(_MAGIC, payload.size, payload.crc())
    _write_views(descriptor, [memoryview(frame), *payload.pieces])
