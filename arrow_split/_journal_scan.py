"""A journal file read as input: its frames, its whole records, its damage and its torn tail.

Every frame and payload is checked (docs/journal.md, "The files" and "Recovery rules"); a torn
tail is found, other damage listed, a file that is no journal refused. Format 1 (0.3.0's) is
read here too: its frames up to the first bad one.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple, NoReturn

import pyarrow as pa
import xxhash

from arrow_split._record import Payload, Record, decode_record
from arrow_split.errors import JournalError

__all__ = ["FRAME", "JournalDamage", "Scan", "scan_file", "write_record"]

_MAGIC = b"ASJ2"
FRAME = struct.Struct("<4s8sQQQI")  # magic, id, sequence, length, payload and frame checks
_HEAD = struct.Struct("<4s8sQQQ")
_MAGIC_V1 = b"ASJ1"
_FRAME_V1 = struct.Struct("<4sQI")  # format 1: magic, payload length, CRC-32 of the payload
_IOV_MAX = 512  # pieces per gathered write (Linux allows 1024)
_MAX_PAYLOAD = 1 << 48


@dataclass(frozen=True, slots=True)
class JournalDamage:
    """Bytes of a journal file that are not a whole record of it, or a record out of place."""

    path: str
    offset: int
    size: int
    reason: str
    expected: str | None = None  # the record or journal due there, if one was
    got: str | None = None  # the record or journal found instead

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
    torn_at: int | None = None

    @property
    def expected(self) -> int:
        """The sequence number of the next record."""
        return self.records[-1].sequence + 1 if self.records else 0


def _head_check(head: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF


def write_record(descriptor: int, journal_id: bytes, sequence: int, payload: Payload) -> None:
    """The frame, then the payload's pieces, in gathered writes (none lost to a short write)."""
    digest = xxhash.xxh3_64()
    for piece in payload.pieces:
        digest.update(piece)
    head = _HEAD.pack(_MAGIC, journal_id, sequence, payload.size, digest.intdigest())
    views = [memoryview(head + struct.pack("<I", _head_check(head))), *payload.pieces]
    first = 0
    while first < len(views):
        written = os.writev(descriptor, views[first : first + _IOV_MAX])
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if written:
            views[first] = views[first][written:]


class _Frame(NamedTuple):
    """A frame whose magic and own check hold, at ``offset`` (its payload not checked yet)."""

    offset: int
    journal_id: bytes
    sequence: int
    length: int
    checksum: int

    @property
    def end(self) -> int:
        return self.offset + FRAME.size + self.length


def _frame_at(view: memoryview, offset: int) -> _Frame | None:
    if offset + FRAME.size > len(view) or view[offset : offset + 4] != _MAGIC:
        return None
    (check,) = struct.unpack_from("<I", view, offset + _HEAD.size)
    if _head_check(view[offset : offset + _HEAD.size]) != check:
        return None
    frame = _Frame(offset, *_HEAD.unpack_from(view, offset)[1:])
    return frame if frame.length < _MAX_PAYLOAD else None


def _whole(view: memoryview, frame: _Frame) -> bool:
    payload = view[frame.offset + FRAME.size : frame.end]
    return frame.end <= len(view) and bool(xxhash.xxh3_64_intdigest(payload) == frame.checksum)


def scan_file(path: str) -> Scan:
    """A journal file's whole records, damage and torn tail (a JournalError if it is none)."""
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
    if first is None or first.sequence != 0 or not _whole(view, first):
        _not_a_journal(path, view)
    scan.journal_id = first.journal_id
    _scan_v2(scan, buffer, view)
    if not scan.records or scan.records[0].kind != "open" or scan.records[0].sequence != 0:
        _not_a_journal(path, view, scan)
    return scan


def _not_a_journal(path: str, view: memoryview, scan: Scan | None = None) -> NoReturn:
    what = "is empty" if not len(view) else "does not start with a whole `open` record"
    if scan is not None and scan.damage and scan.damage[0].offset == 0:
        what += f" ({scan.damage[0].reason})"
    msg = f"not a rollout journal, or its first record is damaged: it {what}"
    fix = "no record of it can be trusted: move the file away to start afresh"
    raise JournalError(msg, path=path, offset=0, fix=fix)


def _scan_v2(scan: Scan, buffer: pa.Buffer, view: memoryview) -> None:
    raw: bytes | None = None  # the file's bytes, copied only to search past damage
    offset = 0
    while offset < len(view):
        frame = _frame_at(view, offset)
        if frame is not None and _whole(view, frame):
            _take(scan, buffer, frame)
            offset = frame.end
            continue
        raw = bytes(view) if raw is None else raw
        following = _next_whole(view, raw, offset + 1)
        if following is None and _is_torn(scan, view, frame, offset):
            scan.torn_at = offset
            return
        end = len(view) if following is None else following.offset
        reason = "a frame whose payload check fails" if frame else "bytes that are no frame"
        scan.damage.append(JournalDamage(scan.path, offset, end - offset, reason))
        offset = end


def _next_whole(view: memoryview, raw: bytes, start: int) -> _Frame | None:
    """The first whole record (frame and payload checks hold) at or after ``start``."""
    at = raw.find(_MAGIC, start)
    while at >= 0:
        frame = _frame_at(view, at)
        if frame is not None and _whole(view, frame):
            return frame
        at = raw.find(_MAGIC, at + 1)
    return None


def _is_torn(scan: Scan, view: memoryview, frame: _Frame | None, offset: int) -> bool:
    """Whether the bytes from ``offset`` on are the start of the next record, cut short."""
    if frame is not None:  # a whole frame: its payload runs past the end of the file
        return bool(
            frame.journal_id == scan.journal_id
            and frame.sequence == scan.expected
            and frame.end > len(view)
        )
    rest = bytes(view[offset:])
    known = _MAGIC + scan.journal_id + struct.pack("<Q", scan.expected)
    return len(rest) < FRAME.size and known[: len(rest)] == rest[: len(known)]


def _take(scan: Scan, buffer: pa.Buffer, frame: _Frame) -> None:
    """Add the whole record at ``frame``, or the damage it is (another journal's, out of order)."""
    size, expected = frame.end - frame.offset, scan.expected
    due, found = f"record {expected}", f"record {frame.sequence}"
    reason = ""
    if frame.journal_id != scan.journal_id:
        reason = f"a record of another journal (id {frame.journal_id.hex()}) spliced in"
        due, found = f"journal {scan.journal_id.hex()}", f"journal {frame.journal_id.hex()}"
    elif frame.sequence < expected:
        reason = f"record {frame.sequence} again, or out of order (record {expected} was due)"
    if reason:
        scan.damage.append(JournalDamage(scan.path, frame.offset, size, reason, due, found))
        return
    if frame.sequence > expected:
        reason = f"records {expected}..{frame.sequence - 1} are missing before this offset"
        scan.damage.append(JournalDamage(scan.path, frame.offset, 0, reason, due, found))
    try:
        payload = buffer.slice(frame.offset + FRAME.size, frame.length)
        scan.records.append(decode_record(payload, frame.sequence, frame.offset, FRAME.size))
    except JournalError as exc:
        reason = f"record {frame.sequence}: {exc}"
        scan.damage.append(JournalDamage(scan.path, frame.offset, size, reason))


def _scan_v1(path: str, buffer: pa.Buffer, view: memoryview) -> Scan:
    """A format-1 file: whole records up to the first bad frame, which must be a torn tail."""
    scan = Scan(path, 1, len(view))
    end, torn = 0, False
    while end < len(view):
        if end + _FRAME_V1.size > len(view):  # a frame cut short
            torn = True
            break
        magic, length, crc = _FRAME_V1.unpack_from(view, end)
        start = end + _FRAME_V1.size
        torn = magic == _MAGIC_V1 and start + length > len(view)  # a payload cut short
        if torn or magic != _MAGIC_V1 or zlib.crc32(view[start : start + length]) != crc:
            break
        try:
            scan.records.append(decode_record(buffer.slice(start, length), -1, end, _FRAME_V1.size))
        except JournalError:
            break
        end = start + length
    if not scan.records or scan.records[0].kind != "open":
        _not_a_journal(path, view)
    if torn:
        scan.torn_at = end
    elif end < len(view):
        reason = "a format-1 record that does not read (damaged)"
        scan.damage.append(JournalDamage(path, end, len(view) - end, reason))
    return scan
