"""A journal file's records: their frames, their payloads (Arrow IPC streams) and how to read them.

The format is described in :mod:`arrow_split._journal`. A payload is made as pieces
(:class:`Payload`: the columns' own buffers, by reference) and written with gathered writes
(:func:`write_record`); :func:`scan_file` reads a file back and says what it holds: its whole
records in order, the damage it found (anything that is neither a whole record nor a torn
tail) and where a torn tail starts. Nothing here trusts a byte of the file.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import pyarrow as pa
import xxhash

from arrow_split._dump_meta import spec_from_json as _spec_from_json
from arrow_split._dump_meta import spec_to_json as _spec_to_json
from arrow_split.errors import DumpError, JournalError
from arrow_split.schema import ColumnSpec

__all__ = [
    "FRAME",
    "JournalDamage",
    "Payload",
    "Record",
    "Scan",
    "decode_record",
    "encode_record",
    "scan_file",
    "spec_from_json",
    "spec_to_json",
    "write_record",
]

_MAGIC = b"ASJ2"
FRAME = struct.Struct("<4s8sQQQI")
"""A record's frame: magic, journal id, sequence number, payload length, payload XXH3-64, and
the low 32 bits of the XXH3-64 of the frame's first 36 bytes (the frame's own check)."""
_HEAD = struct.Struct("<4s8sQQQ")
_MAGIC_V1 = b"ASJ1"
_FRAME_V1 = struct.Struct("<4sQI")  # format 1: magic, payload length, CRC-32 of the payload
_IOV_MAX = 512  # pieces per gathered write (Linux allows 1024)
_META = b"arrow_split.journal"
_MAX_PAYLOAD = 1 << 48


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


@dataclass(frozen=True, slots=True)
class Record:
    """One record read back: its kind, its JSON, its columns, sequence number and offset."""

    kind: str
    meta: dict[str, Any]
    arrays: list[pa.Array]
    sequence: int = -1  # -1: a format-1 record (no sequence numbers)
    offset: int = 0


@dataclass(frozen=True, slots=True)
class JournalDamage:
    """Bytes of a journal file that are not a whole record of it, or a record out of place.

    ``offset`` and ``size`` are in bytes; ``reason`` says what was found there.
    """

    path: str
    offset: int
    size: int
    reason: str

    def __str__(self) -> str:
        return f"`{self.path}` bytes {self.offset}..{self.offset + self.size}: {self.reason}"


@dataclass(slots=True)
class Scan:
    """What a journal file holds: its records in order, its damage, where a torn tail starts."""

    path: str
    version: int
    size: int
    journal_id: bytes = b""
    records: list[Record] = field(default_factory=list)
    damage: list[JournalDamage] = field(default_factory=list)
    torn_at: int | None = None  # the offset of a torn tail (a last record cut short)

    @property
    def end(self) -> int:
        """Where appends resume: after the last whole record (a torn tail dropped)."""
        return self.size if self.torn_at is None else self.torn_at


class Payload:
    """A record's payload as the IPC writer produced it: its pieces, their size and checksum.

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

    def checksum(self) -> int:
        """The XXH3-64 of the payload's bytes."""
        digest = xxhash.xxh3_64()
        for piece in self.pieces:
            digest.update(piece)
        return digest.intdigest()

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


def decode_record(payload: pa.Buffer, sequence: int = -1, offset: int = 0) -> Record:
    """The record a payload holds.

    Raises
    ------
    JournalError
        The payload is not one Arrow IPC stream of one record batch with the record's JSON.
    """
    try:
        reader = pa.ipc.open_stream(payload)
        record_batch = reader.read_next_batch()
        record_batch.validate(full=True)
        meta = json.loads((reader.schema.metadata or {})[_META])
        columns = list(record_batch.columns)
    except (pa.ArrowException, ValueError, KeyError, OSError, StopIteration) as exc:
        msg = f"its payload is not a record: {type(exc).__name__}: {exc}"
        raise JournalError(msg) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("kind"), str):
        msg = "its JSON is not an object with a `kind`"
        raise JournalError(msg)
    kind = meta.pop("kind")
    return Record(kind, meta, columns, sequence, offset)


def _head_check(head: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF


def frame_bytes(journal_id: bytes, sequence: int, payload: Payload) -> bytes:
    """The frame of a payload: see :data:`FRAME`."""
    head = _HEAD.pack(_MAGIC, journal_id, sequence, payload.size, payload.checksum())
    return head + struct.pack("<I", _head_check(head))


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


def write_record(descriptor: int, journal_id: bytes, sequence: int, payload: Payload) -> None:
    """The frame, then the payload's pieces, where the descriptor is (the file's end)."""
    frame = frame_bytes(journal_id, sequence, payload)
    _write_views(descriptor, [memoryview(frame), *payload.pieces])


class _Frame:
    """A whole, self-consistent frame header at an offset (its payload not checked yet)."""

    __slots__ = ("checksum", "journal_id", "length", "offset", "sequence")

    def __init__(self, view: memoryview, offset: int) -> None:
        _, self.journal_id, self.sequence, self.length, self.checksum = _HEAD.unpack(
            view[offset : offset + _HEAD.size]
        )
        self.offset = offset


def _frame_at(view: memoryview, offset: int) -> _Frame | None:
    """The frame header at ``offset`` if its magic and its own check hold."""
    if offset + FRAME.size > len(view) or view[offset : offset + 4] != _MAGIC:
        return None
    (check,) = struct.unpack_from("<I", view, offset + _HEAD.size)
    if _head_check(view[offset : offset + _HEAD.size]) != check:
        return None
    frame = _Frame(view, offset)
    return frame if frame.length < _MAX_PAYLOAD else None


def _whole(buffer: pa.Buffer, view: memoryview, frame: _Frame) -> bool:
    start = frame.offset + FRAME.size
    end = start + frame.length
    if end > len(view):
        return False
    return bool(xxhash.xxh3_64_intdigest(view[start:end]) == frame.checksum)


def _next_whole(buffer: pa.Buffer, view: memoryview, raw: bytes, start: int) -> _Frame | None:
    """The first whole record (frame and payload checks hold) at or after ``start``."""
    at = raw.find(_MAGIC, start)
    while at >= 0:
        frame = _frame_at(view, at)
        if frame is not None and _whole(buffer, view, frame):
            return frame
        at = raw.find(_MAGIC, at + 1)
    return None


def scan_file(path: str) -> Scan:
    """Read a journal file: its whole records, its damage, its torn tail (format 2 or 1).

    Raises
    ------
    JournalError
        The file cannot be read, or does not start with a journal's ``open`` record.
    """
    try:
        buffer = pa.memory_map(path).read_buffer()  # mapped: the page cache, not a copy
    except (OSError, pa.ArrowException) as exc:
        msg = f"cannot read the journal `{path}`: {exc}"
        raise JournalError(msg) from None
    view = memoryview(buffer)
    if bytes(view[:4]) == _MAGIC_V1:
        return _scan_v1(path, buffer, view)
    scan = Scan(path, 2, len(view))
    first = _frame_at(view, 0)
    if first is None or first.sequence != 0 or not _whole(buffer, view, first):
        _not_a_journal(path, view)
    scan.journal_id = first.journal_id
    _scan_v2(scan, buffer, view)
    if not scan.records or scan.records[0].kind != "open" or scan.records[0].sequence != 0:
        _not_a_journal(path, view)
    return scan


def _not_a_journal(path: str, view: memoryview) -> NoReturn:
    what = "is empty" if not len(view) else "does not start with a whole `open` record"
    msg = (
        f"`{path}` is not a rollout journal, or its first record is damaged: it {what}; "
        "no record of it can be trusted (move the file away to start afresh)"
    )
    raise JournalError(msg)


def _scan_v2(scan: Scan, buffer: pa.Buffer, view: memoryview) -> None:
    raw: bytes | None = None  # the file's bytes, copied only to search past damage
    offset = 0
    while offset < len(view):
        frame = _frame_at(view, offset)
        if frame is not None and _whole(buffer, view, frame):
            _take(scan, buffer, frame)
            offset = frame.offset + FRAME.size + frame.length
            continue
        if raw is None:
            raw = bytes(view)
        following = _next_whole(buffer, view, raw, offset + 1)
        if following is None and _is_torn(scan, view, frame, offset):
            scan.torn_at = offset
            return
        end = len(view) if following is None else following.offset
        reason = "a frame whose payload check fails" if frame else "bytes that are no frame"
        scan.damage.append(JournalDamage(scan.path, offset, end - offset, reason))
        offset = end


def _is_torn(scan: Scan, view: memoryview, frame: _Frame | None, offset: int) -> bool:
    """Whether the bytes from ``offset`` on are the start of the next record, cut short."""
    expected = scan.records[-1].sequence + 1 if scan.records else 0
    if frame is not None:  # a whole frame: its payload runs past the end of the file
        return bool(
            frame.journal_id == scan.journal_id
            and frame.sequence == expected
            and frame.offset + FRAME.size + frame.length > len(view)
        )
    rest = bytes(view[offset:])
    if len(rest) >= FRAME.size:
        return False
    known = _MAGIC + scan.journal_id + struct.pack("<Q", expected)
    return known[: len(rest)] == rest[: len(known)]


def _take(scan: Scan, buffer: pa.Buffer, frame: _Frame) -> None:
    """Add the whole record at ``frame``, or the damage it is (another journal's, out of order)."""
    size = FRAME.size + frame.length
    expected = scan.records[-1].sequence + 1 if scan.records else 0
    reason = ""
    if frame.journal_id != scan.journal_id:
        reason = f"a record of another journal (id {frame.journal_id.hex()}) spliced in"
    elif frame.sequence < expected:
        reason = f"record {frame.sequence} again, or out of order (record {expected} was due)"
    if reason:
        scan.damage.append(JournalDamage(scan.path, frame.offset, size, reason))
        return
    if frame.sequence > expected:
        reason = f"records {expected}..{frame.sequence - 1} are missing before this offset"
        scan.damage.append(JournalDamage(scan.path, frame.offset, 0, reason))
    try:
        payload = buffer.slice(frame.offset + FRAME.size, frame.length)
        scan.records.append(decode_record(payload, frame.sequence, frame.offset))
    except JournalError as exc:
        reason = f"record {frame.sequence}: {exc}"
        scan.damage.append(JournalDamage(scan.path, frame.offset, size, reason))


def _scan_v1(path: str, buffer: pa.Buffer, view: memoryview) -> Scan:
    """A format-1 file: whole records up to the first bad frame, which must be a torn tail."""
    scan = Scan(path, 1, len(view))
    end = 0
    while end + _FRAME_V1.size <= len(view):
        magic, length, crc = _FRAME_V1.unpack(view[end : end + _FRAME_V1.size])
        start = end + _FRAME_V1.size
        if magic != _MAGIC_V1 or start + length > len(view):
            break
        if zlib.crc32(view[start : start + length]) != crc:
            break
        try:
            scan.records.append(decode_record(buffer.slice(start, length), -1, end))
        except JournalError:
            break
        end = start + length
    if not scan.records or scan.records[0].kind != "open":
        _not_a_journal(path, view)
    if end < len(view):
        rest = len(view) - end
        torn = rest < _FRAME_V1.size
        if not torn:
            magic, length, _ = _FRAME_V1.unpack(view[end : end + _FRAME_V1.size])
            torn = magic == _MAGIC_V1 and end + _FRAME_V1.size + length > len(view)
        if torn:
            scan.torn_at = end
        else:
            reason = "a format-1 record that does not read (damaged)"
            scan.damage.append(JournalDamage(path, end, rest, reason))
    return scan
