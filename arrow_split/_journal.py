"""The builder's journal: every accepted call on disk before it returns, recoverable after a crash.

A journal is a folder (docs/journal.md tells the story and the file format). Step ``n`` writes
``step-<n>.journal`` (six digits at least) while it is built; ``finish`` writes its dump
``step-<n>.arrow``, starts step ``n + 1``'s journal and removes the finished one. A dump is never
overwritten. The lock file ``journal.lock`` is held (``flock``) by one builder at a time and names
its holder (pid, host, time).

Format ``"2"``: a file is a sequence of records, each a 44-byte :data:`FRAME` (magic, journal
id, sequence number, payload length, XXH3-64 of the payload, check of the frame) and its payload,
one Arrow IPC stream whose schema metadata ``arrow_split.journal`` holds the record's JSON:
``open`` (the header: versions, step, declared specs, options, identity; written to a temporary
file and renamed), ``group`` (one accepted ``append``/``extend``: :class:`Group`) and ``global``
(one ``set_global``). Specs are stored as a dump stores them, batch-global values as tagged JSON
(:func:`pack_value`), never a pickle; records are written from the columns' own buffers in
gathered writes.

Files are input: :func:`scan_file` checks every frame and payload, and every field of every
record is checked with the library's rules (:func:`parse_header`, :func:`group_from_record`,
:func:`global_from_record`). A crash leaves at most a *torn tail* (the last record cut short),
which is dropped; anything else is damage: :class:`~arrow_split.errors.JournalError` naming the
file, the offset and how many whole records follow, nothing changed, or with ``salvage=True``
every whole record kept in order, the damaged file renamed ``.damaged`` and the records written
into a fresh journal. A format-1 journal (no sequence numbers, values pickled and read as plain
data only) is read likewise and rewritten in format 2 (the old file kept as ``.v1``).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import io
import json
import os
import pickle
import re
import socket
import struct
import time
import weakref
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NoReturn

import numpy as np
import pyarrow as pa
import xxhash

from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._convert import check_content
from arrow_split._codecs.scalar import check_batch_global, check_per_sample_values
from arrow_split._dump_meta import spec_from_json as _spec_from_json
from arrow_split._dump_meta import spec_to_json as _spec_to_json
from arrow_split._version import __version__
from arrow_split.batch import RolloutBatch
from arrow_split.errors import ArrowSplitError, DumpError, JournalError
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, role_column

__all__ = [
    "Group",
    "JournalDamage",
    "JournalSync",
    "OnDuplicate",
    "Record",
    "StepJournal",
    "global_from_record",
    "global_record",
    "group_from_record",
    "group_record",
    "journal_header",
    "parse_header",
    "unpickle_v1",
]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

JOURNAL_VERSION = "2"
_READABLE = ("1", JOURNAL_VERSION)
_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")
_LOCK_NAME = "journal.lock"
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


def journal_file(folder: str, step: int) -> str:
    """The journal file of step ``step``."""
    return os.path.join(folder, f"step-{step:06d}.journal")


def dump_file(folder: str, step: int) -> str:
    """The dump that step ``step``'s ``finish`` writes."""
    return os.path.join(folder, f"step-{step:06d}.arrow")


def _spec_json(spec: ColumnSpec) -> dict[str, object]:
    """A spec as a dump stores it, made once per spec object (shared: do not change it)."""
    cached = _SPEC_JSON.get(id(spec))
    if cached is not None and cached[0] is spec:  # the object kept alive: never a stale id
        return cached[1]
    stored = _spec_to_json(spec)
    if len(_SPEC_JSON) >= _SPEC_JSON_SIZE:
        _SPEC_JSON.clear()
    _SPEC_JSON[id(spec)] = (spec, stored)
    return stored


def _read_spec(item: object, source: str) -> ColumnSpec:
    """A spec stored by :func:`_spec_json` (a :class:`JournalError` if it is not one)."""
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
    """Bytes of a journal file that are not a whole record of it, or a record out of place."""

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


class _Payload:
    """A record's IPC stream as pieces (Arrow buffers by reference): a write-only file object."""

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


def _encode_record(kind: str, meta: Mapping[str, object], arrays: Sequence[pa.Array]) -> _Payload:
    text = json.dumps({"kind": kind, **meta}, allow_nan=False).encode()
    names = [f"c{i}" for i in range(len(arrays))]
    record_batch = pa.RecordBatch.from_arrays(list(arrays), names=names)
    record_batch = record_batch.replace_schema_metadata({_META: text})
    payload = _Payload()
    with (
        pa.PythonFile(payload, mode="w") as sink,
        pa.ipc.new_stream(sink, record_batch.schema) as writer,
    ):
        writer.write_batch(record_batch)
    return payload


def _decode_record(payload: pa.Buffer, sequence: int = -1, offset: int = 0) -> Record:
    """The record a payload holds (a :class:`JournalError` if it is not one)."""
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


def _write_record(descriptor: int, journal_id: bytes, sequence: int, payload: _Payload) -> None:
    """The frame, then the payload's pieces, in gathered writes (none lost to a short write)."""
    head = _HEAD.pack(_MAGIC, journal_id, sequence, payload.size, payload.checksum())
    views = [memoryview(head + struct.pack("<I", _head_check(head))), *payload.pieces]
    first = 0
    while first < len(views):
        written = os.writev(descriptor, views[first : first + _IOV_MAX])
        while first < len(views) and written >= views[first].nbytes:
            written -= views[first].nbytes
            first += 1
        if written:
            views[first] = views[first][written:]


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


def _whole(view: memoryview, frame: _Frame) -> bool:
    start = frame.offset + FRAME.size
    end = start + frame.length
    return end <= len(view) and bool(xxhash.xxh3_64_intdigest(view[start:end]) == frame.checksum)


def _next_whole(view: memoryview, raw: bytes, start: int) -> _Frame | None:
    """The first whole record (frame and payload checks hold) at or after ``start``."""
    at = raw.find(_MAGIC, start)
    while at >= 0:
        frame = _frame_at(view, at)
        if frame is not None and _whole(view, frame):
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
    if first is None or first.sequence != 0 or not _whole(view, first):
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
        if frame is not None and _whole(view, frame):
            _take(scan, buffer, frame)
            offset = frame.offset + FRAME.size + frame.length
            continue
        if raw is None:
            raw = bytes(view)
        following = _next_whole(view, raw, offset + 1)
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
        scan.records.append(_decode_record(payload, frame.sequence, frame.offset))
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
            scan.records.append(_decode_record(buffer.slice(start, length), -1, end))
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


def pack_value(spec: ColumnSpec, value: object) -> dict[str, object]:
    """A checked batch-global value as JSON tagged with its shape (``{"int": 3}``).

    ``int_map`` is stored as ``[[key, value], ...]`` (JSON keys would be strings),
    ``float_per_sample`` as base64 little-endian float64 (NaN and infinity kept exactly).
    """
    shape = spec.global_shape or "int"
    if shape == "float_per_sample":
        floats = np.ascontiguousarray(np.asarray(value, dtype="<f8"))
        return {shape: base64.b64encode(floats.tobytes()).decode("ascii")}
    if shape == "int_map":
        return {shape: [[int(k), int(v)] for k, v in value.items()]}  # type: ignore[attr-defined]
    if shape == "int":
        return {shape: int(value)}  # type: ignore[call-overload]
    return {shape: list(value)}  # type: ignore[call-overload]


def unpack_value(spec: ColumnSpec, stored: object, allow_nonfinite: bool) -> object:
    """The value :func:`pack_value` stored, checked against ``spec``.

    Raises
    ------
    JournalError
        The value is not tagged with the spec's shape, or breaks the shape's rules.
    """
    shape = spec.global_shape or "int"
    if not isinstance(stored, dict) or list(stored) != [shape]:
        msg = (
            f"batch-global key `{spec.name}` must be stored as {{{shape!r}: ...}}, "
            f"got {stored!r:.60}"
        )
        raise JournalError(msg)
    item = stored[shape]
    try:
        if shape == "float_per_sample":
            value: Any = _floats(spec, item)
            check_per_sample_values(spec, value, allow_nonfinite)
            value.flags.writeable = False
            return value
        if shape == "int_map":
            item = _pairs(spec, item)
        return check_batch_global(spec, item, 0, allow_nonfinite)
    except ArrowSplitError as exc:
        msg = f"batch-global key `{spec.name}` holds a bad value: {exc}"
        raise JournalError(msg) from None


def _floats(spec: ColumnSpec, item: object) -> np.ndarray:
    try:
        raw = base64.b64decode(str(item) if isinstance(item, str) else b"!", validate=True)
    except (binascii.Error, ValueError):
        raw = b"!"
    if len(raw) % 8:
        msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not base64 float64 values"
        raise JournalError(msg)
    return np.frombuffer(raw, dtype="<f8").astype(np.float64)


def _pairs(spec: ColumnSpec, item: object) -> dict[object, object]:
    if not isinstance(item, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in item
    ):
        msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not a list of [key, value]"
        raise JournalError(msg)
    pairs = {pair[0]: pair[1] for pair in item}
    if len(pairs) != len(item):
        msg = f"batch-global key `{spec.name}` holds a key twice: {item!r:.60}"
        raise JournalError(msg)
    return pairs


_PLAIN = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("builtins", "list"),
    ("builtins", "dict"),
}


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only: every global it may name is in :data:`_PLAIN`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PLAIN:
            msg = f"refers to `{module}.{name}`, which a journal's value never holds"
            raise pickle.UnpicklingError(msg)
        return super().find_class(module, name)


def unpickle_v1(text: object) -> object:
    """A format-1 value (a base64 pickle), built as plain data, with no code run.

    Raises
    ------
    JournalError
        The text is not base64, not a pickle, or a pickle of anything but plain data.
    """
    try:
        raw = base64.b64decode(str(text) if isinstance(text, str) else b"!", validate=True)
        value = _PlainUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:
        msg = f"a format-1 batch-global value does not read: {type(exc).__name__}: {exc}"
        raise JournalError(msg) from None
    if isinstance(value, np.ndarray) and value.dtype.kind not in "biuf":
        msg = f"a format-1 batch-global value is an array of dtype {value.dtype}"
        raise JournalError(msg)
    return value


def check_v1_value(spec: ColumnSpec, value: object, allow_nonfinite: bool) -> object:
    """A format-1 value checked against ``spec`` (a :class:`JournalError` if it breaks a rule)."""
    try:
        if spec.global_shape == "float_per_sample":
            check_per_sample_values(spec, value, allow_nonfinite)
            floats = np.asarray(value, dtype=np.float64).copy()
            floats.flags.writeable = False
            return floats
        if isinstance(value, Mapping) and spec.global_shape != "int_map":
            msg = f"batch-global key `{spec.name}` holds a dict"
            raise JournalError(msg)
        return check_batch_global(spec, value, 0, allow_nonfinite)
    except ArrowSplitError as exc:
        if isinstance(exc, JournalError):
            raise
        msg = f"batch-global key `{spec.name}` holds a bad value: {exc}"
        raise JournalError(msg) from None


def journal_header(
    declared: Sequence[ColumnSpec], options: EncodeOptions, identity: str | None
) -> dict[str, object]:
    """What a journal's ``open`` record holds: enough to build the same builder again."""
    return {
        "journal_version": JOURNAL_VERSION,
        "library_version": __version__,
        "declared": [_spec_json(spec) for spec in declared],
        "allow_nonfinite": options.allow_nonfinite,
        "exact_floats": options.exact_floats,
        "identity": identity,
    }


def _field(header: dict[str, Any], name: str, kinds: tuple[type, ...], path: str) -> Any:
    value = header.get(name, KeyError)
    if (
        value is KeyError
        or not isinstance(value, kinds)
        or (int in kinds and bool not in kinds and isinstance(value, bool))
    ):
        wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
        got = "nothing" if value is KeyError else f"{type(value).__name__} {value!r:.40}"
        msg = f"`{path}`: the header's `{name}` must be {wanted}, got {got}"
        raise JournalError(msg)
    return value


def parse_header(header: dict[str, Any], path: str, step: int) -> dict[str, Any]:
    """The builder's arguments from an ``open`` record, every field checked, never coerced.

    Raises
    ------
    JournalError
        A field is missing or of the wrong kind (``"False"`` is not a flag), the version is
        unknown, or the step number is not the file's.
    """
    version = _field(header, "journal_version", (str,), path)
    if version not in _READABLE:
        msg = (
            f"`{path}` is a journal of version {version!r:.20}; this arrow_split reads "
            f"versions {', '.join(map(repr, _READABLE))}"
        )
        raise JournalError(msg)
    _field(header, "library_version", (str,), path)
    declared = _field(header, "declared", (list,), path)
    stored_step = _field(header, "step", (int,), path)
    if stored_step != step:
        msg = f"`{path}`: the header says step {stored_step}, the file's name step {step}"
        raise JournalError(msg)
    return {
        "specs": [_read_spec(item, path) for item in declared],
        "allow_nonfinite": _field(header, "allow_nonfinite", (bool,), path),
        "exact_floats": _field(header, "exact_floats", (bool,), path),
        "identity": _field(header, "identity", (str, type(None)), path),
    }


def global_record(key: str, spec: ColumnSpec, value: object) -> dict[str, object]:
    """The JSON of the ``global`` record of a checked batch-global value."""
    return {"key": key, "spec": _spec_json(spec), "value": pack_value(spec, value)}


def global_from_record(
    record: Record, source: str, allow_nonfinite: bool
) -> tuple[str, ColumnSpec, object]:
    """The key, spec and value a ``global`` record holds, every field checked."""
    key = record.meta.get("key")
    spec = _read_spec(record.meta.get("spec"), source)
    if not isinstance(key, str) or spec.name != key or spec.is_per_sample:
        msg = f"its `key` {key!r:.40} is not the batch-global key of its spec {spec}"
        raise JournalError(msg)
    stored = record.meta.get("value")
    if record.sequence < 0:
        return key, spec, check_v1_value(spec, unpickle_v1(stored), allow_nonfinite)
    return key, spec, unpack_value(spec, stored, allow_nonfinite)


class Group:
    """One accepted ``append``/``extend``, encoded and checked: what a ``group`` record holds.

    The per-sample columns as the codecs encoded them, the specs as used, the per-sample
    batch-global values (float64) and the group's other batch-global values.
    """

    __slots__ = ("columns", "count", "globals", "sample_globals", "sample_keys", "used")

    def __init__(
        self,
        columns: dict[str, pa.Array],
        used: dict[str, ColumnSpec],
        batch_globals: dict[str, object],
        sample_keys: tuple[str, ...],
    ) -> None:
        self.columns = columns
        self.used = used
        self.sample_keys = sample_keys
        self.sample_globals = {
            k: np.asarray(v, dtype=np.float64) for k, v in batch_globals.items() if k in sample_keys
        }
        self.globals = {k: v for k, v in batch_globals.items() if k not in sample_keys}
        self.count = len(next(iter(columns.values())))  # the length source is always there

    def take(self, rows: Sequence[int]) -> Group:
        """The group of the samples at ``rows`` only (a replay's samples dropped)."""
        picked = np.asarray(rows, dtype=np.int64)
        columns = {
            name: codec_for(self.used[name]).take(array, picked)
            for name, array in self.columns.items()
        }
        values: dict[str, object] = {k: v[picked] for k, v in self.sample_globals.items()}
        return Group(columns, self.used, {**self.globals, **values}, self.sample_keys)


def group_record(group: Group) -> tuple[dict[str, object], list[pa.Array]]:
    """The JSON and the columns of the ``group`` record of ``group``."""
    names = list(group.columns)
    sample_globals = list(group.sample_globals)
    meta: dict[str, object] = {
        "names": names,
        "sample_globals": sample_globals,
        "sample_keys": list(group.sample_keys),
        "specs": [_spec_json(spec) for spec in group.used.values()],
        "globals": {
            key: pack_value(group.used[key], value) for key, value in group.globals.items()
        },
    }
    arrays = [group.columns[name] for name in names]
    arrays += [pa.array(group.sample_globals[key]) for key in sample_globals]
    return meta, arrays


def group_from_record(record: Record, source: str, allow_nonfinite: bool) -> Group:
    """The group a ``group`` record holds, every field checked with the library's rules.

    Raises
    ------
    JournalError
        A field is missing or of the wrong kind, a column does not fit its spec, or the
        content breaks a rule of :meth:`~arrow_split.RolloutBatch.from_train_data`.
    """
    meta: dict[str, Any] = record.meta
    names, sample_globals = _names(meta, "names"), _names(meta, "sample_globals")
    sample_keys = _names(meta, "sample_keys")
    used = _record_specs(meta, source)
    if len(record.arrays) != len(names) + len(sample_globals):
        msg = f"it has {len(record.arrays)} columns for {len(names) + len(sample_globals)} keys"
        raise JournalError(msg)
    columns = _columns(used, names, record.arrays[: len(names)])
    count = len(next(iter(columns.values())))
    values = _sample_globals(used, sample_globals, record.arrays[len(names) :], count)
    missing = sorted(set(sample_keys) - set(columns) - set(values) - {TOTAL_LENGTHS})
    if missing:
        msg = f"its `sample_keys` name {missing} but it holds no such column"
        raise JournalError(msg)
    group_globals = _group_globals(meta, used, record.sequence < 0, allow_nonfinite)
    record_batch = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
    try:
        check_content(record_batch, {name: used[name] for name in columns}, {})
    except ArrowSplitError as exc:
        msg = f"its content breaks a rule of the library: {exc}"
        raise JournalError(msg) from None
    return Group(columns, used, {**group_globals, **values}, tuple(sample_keys))


def _names(meta: dict[str, Any], name: str) -> list[str]:
    """A record's list of distinct key names (a :class:`JournalError` if it is not one)."""
    value = meta.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        msg = f"its `{name}` must be a list of str, got {value!r:.60}"
        raise JournalError(msg)
    if len(set(value)) != len(value):
        msg = f"its `{name}` names a key twice: {value!r:.60}"
        raise JournalError(msg)
    return list(value)


def _record_specs(meta: dict[str, Any], source: str) -> dict[str, ColumnSpec]:
    items = meta.get("specs")
    if not isinstance(items, list):
        msg = f"its `specs` must be a list, got {items!r:.60}"
        raise JournalError(msg)
    used = {}
    for item in items:
        spec = _read_spec(item, source)
        if spec.name in used:
            msg = f"its `specs` declare `{spec.name}` twice"
            raise JournalError(msg)
        used[spec.name] = spec
    return used


def _columns(
    used: dict[str, ColumnSpec], names: list[str], arrays: Sequence[pa.Array]
) -> dict[str, pa.Array]:
    columns = {}
    for name, array in zip(names, arrays, strict=True):
        spec = used.get(name)
        if spec is None or not spec.is_per_sample:
            msg = f"its column `{name}` has no per-sample spec in the record"
            raise JournalError(msg)
        array = codec_for(spec).stored(spec, array)  # a format-1 column in this version's form
        if not codec_for(spec).holds(spec, array.type):
            msg = f"its column `{name}` is {array.type}, which its spec {spec} never makes"
            raise JournalError(msg)
        columns[name] = array
    source = role_column(used, "length_source")
    if source is None or source not in columns:
        msg = f"it has no length-source column (`{role_column(KNOWN_COLUMNS, 'length_source')}`)"
        raise JournalError(msg)
    lengths = {name: len(array) for name, array in columns.items()}
    if len(set(lengths.values())) != 1 or lengths[source] == 0:
        msg = f"its columns have different or no rows: {lengths}"
        raise JournalError(msg)
    return columns


def _sample_globals(
    used: dict[str, ColumnSpec], keys: list[str], arrays: Sequence[pa.Array], count: int
) -> dict[str, object]:
    values: dict[str, object] = {}
    for key, array in zip(keys, arrays, strict=True):
        spec = used.get(key)
        if spec is None or spec.global_shape != "float_per_sample":
            msg = f"its per-sample batch-global `{key}` has no such spec in the record"
            raise JournalError(msg)
        if array.type != pa.float64() or array.null_count or len(array) != count:
            msg = f"its `{key}` must be {count} float64 values, not nulls, got {array.type}"
            raise JournalError(msg)
        values[key] = array.to_numpy(zero_copy_only=False)
    return values


def _group_globals(
    meta: dict[str, Any], used: dict[str, ColumnSpec], version_1: bool, allow_nonfinite: bool
) -> dict[str, object]:
    stored = unpickle_v1(meta.get("globals")) if version_1 else meta.get("globals")
    if not isinstance(stored, dict):
        msg = f"its `globals` must be an object, got {stored!r:.60}"
        raise JournalError(msg)
    values = {}
    for key, value in stored.items():
        spec = used.get(key) if isinstance(key, str) else None
        if spec is None or spec.is_per_sample or spec.global_shape == "float_per_sample":
            msg = f"its batch-global value `{key!r:.40}` has no batch-global spec in the record"
            raise JournalError(msg)
        if version_1:
            values[key] = check_v1_value(spec, value, allow_nonfinite)
        else:
            values[key] = unpack_value(spec, value, allow_nonfinite)
    return values


def _journal_error(what: str, exc: OSError) -> JournalError:
    msg = f"{what}: {exc.strerror or exc}; free space (or raise the file size limit) and retry"
    return JournalError(msg, errno=exc.errno)


class _Lock:
    """The folder's lock file, held with ``flock`` until released (or the process ends)."""

    def __init__(self, folder: str) -> None:
        path = os.path.join(folder, _LOCK_NAME)
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise _journal_error(f"cannot open the journal's lock file `{path}`", exc) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(descriptor)
            os.close(descriptor)
            msg = (
                f"the journal folder `{folder}` is in use by {holder}; one builder at a time "
                "writes a journal: close that builder (`close()`) or let its process end, "
                "then retry"
            )
            raise JournalError(msg, errno=errno.EBUSY) from None
        holder_text = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        ).encode()
        with contextlib.suppress(OSError):  # the holder's name is a courtesy
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, holder_text, 0)
        self._release = weakref.finalize(self, os.close, descriptor)

    def release(self) -> None:
        self._release()


def _holder(descriptor: int) -> str:
    """The lock's holder as its lock file names it."""
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        return f"process {int(holder['pid'])} on host {str(holder['host'])!r} since {since}"
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        return "another process (its lock file does not name it)"


class _Writer:
    """Appends framed records to an open journal file; a failed write is cut back."""

    def __init__(
        self, path: str, end: int, sync: JournalSync, journal_id: bytes, sequence: int
    ) -> None:
        self.path = path
        self.sync = sync
        self.journal_id = journal_id
        self.sequence = sequence
        self._end = end
        self._broken = False
        self._descriptor = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(self._descriptor, end)  # a torn tail's bytes, if any
            os.lseek(self._descriptor, end, os.SEEK_SET)
        except OSError:
            os.close(self._descriptor)
            raise

    def write(self, payload: _Payload) -> None:
        if self._broken:
            msg = (
                f"`{self.path}` could not be cut back after a failed write; recover the "
                "builder with `RolloutBatchBuilder.recover`"
            )
            raise JournalError(msg)
        try:
            _write_record(self._descriptor, self.journal_id, self.sequence, payload)
            if self.sync == "call":
                os.fsync(self._descriptor)
        except OSError as exc:
            self._cut_back()
            raise _journal_error(f"cannot append to the journal `{self.path}`", exc) from None
        self._end += FRAME.size + payload.size
        self.sequence += 1

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._descriptor, self._end)
            os.lseek(self._descriptor, self._end, os.SEEK_SET)
        except OSError:
            self._broken = True  # recovery still drops the torn record

    def close(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1


def _steps(folder: str) -> tuple[set[int], set[int]]:
    """The step numbers of the folder's journals and of its dumps."""
    journals: set[int] = set()
    dumps: set[int] = set()
    for name in os.listdir(folder):
        match = _NAME.match(name)
        if match:
            (journals if match.group(2) == "journal" else dumps).add(int(match.group(1)))
    return journals, dumps


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _set_aside(path: str, suffix: str) -> str:
    """Rename ``path`` to a free ``path.suffix`` (``.suffix.1``, ...); return the new name."""
    target, number = f"{path}.{suffix}", 0
    while os.path.exists(target):
        number += 1
        target = f"{path}.{suffix}.{number}"
    os.rename(path, target)
    return target


def _damage_error(scan: Scan, folder: str) -> JournalError:
    """The error for a damaged journal: where, what, and how many whole records follow."""
    first = scan.damage[0]
    following = sum(record.offset > first.offset for record in scan.records)
    msg = (
        f"the journal `{scan.path}` is damaged at offset {first.offset} ({first.size} bytes: "
        f"{first.reason}); {following} whole record(s) follow the damage, "
        f"{len(scan.damage)} damaged place(s) in all; nothing was changed. Recover every whole "
        f"record with `RolloutBatchBuilder.recover({folder!r}, salvage=True)` (the damaged file "
        "is kept beside the new journal), or restore the file from a copy"
    )
    return JournalError(msg)


class StepJournal:
    """The journal of the step being built: its folder, number, header, lock and open file."""

    def __init__(
        self, folder: str, step: int, header: dict[str, Any], sync: JournalSync, lock: _Lock
    ) -> None:
        self.folder = folder
        self.step = step
        self.header = header
        self.sync = sync
        self._lock: _Lock | None = lock
        self._writer: _Writer | None = None
        self._failure = ""  # why the writer is missing after a failed start of a step
        self.damage: list[JournalDamage] = []  # what a salvage skipped
        self.rewriting = False  # records replayed are written again (a salvage, a format 1)

    @classmethod
    def create(cls, folder: str, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``folder`` (created if missing), for the step after its last dump.

        Raises
        ------
        JournalError
            The folder is in use by another builder, holds a step's journal with samples and no
            dump (recover it instead), a damaged journal, or cannot be written.
        """
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _journal_error(f"cannot use `{folder}` as a journal folder", exc) from None
        lock = _Lock(folder)
        try:
            journals, dumps = _steps(folder)
            for step in sorted(journals - dumps):
                scan = scan_file(journal_file(folder, step))
                if len(scan.records) > 1 or scan.damage:
                    msg = (
                        f"`{journal_file(folder, step)}` holds an unfinished step; resume it with "
                        f"`RolloutBatchBuilder.recover({folder!r})`, or move the file away"
                    )
                    raise JournalError(msg)
            step_journal = cls(folder, max(dumps, default=-1) + 1, header, sync, lock)
            step_journal._start(journals)
        except BaseException:
            lock.release()
            raise
        return step_journal

    @classmethod
    def recover(
        cls, folder: str, sync: JournalSync, salvage: bool
    ) -> tuple[StepJournal, list[Record], dict[str, Any]]:
        """The unfinished step's journal in ``folder``, its records, its header's arguments.

        Raises
        ------
        JournalError
            The folder is in use, holds no journal (``errno.ENOENT``), several unfinished
            journals, a file that is not a journal, a bad header, or a damaged journal (without
            ``salvage``).
        """
        journals = _steps(folder)[0] if os.path.isdir(folder) else set()
        if not journals:
            msg = f"no rollout journal in `{folder}`; start one with `journal={folder!r}`"
            raise JournalError(msg, errno=errno.ENOENT)
        lock = _Lock(folder)
        try:
            return cls._recover(folder, (sync, salvage), lock, *_steps(folder))
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _recover(
        cls,
        folder: str,
        options: tuple[JournalSync, bool],
        lock: _Lock,
        journals: set[int],
        dumps: set[int],
    ) -> tuple[StepJournal, list[Record], dict[str, Any]]:
        sync, salvage = options
        pending = sorted(journals - dumps)
        if len(pending) > 1:
            msg = f"`{folder}` holds the unfinished journals of steps {pending}; keep one"
            raise JournalError(msg)
        latest = pending[0] if pending else max(journals)
        path = journal_file(folder, latest)
        scan = scan_file(path)
        if scan.damage and not salvage:
            raise _damage_error(scan, folder)
        header = scan.records[0].meta
        arguments = parse_header(header, path, latest)
        if not pending:  # the last step was finished: its dump is whole; start the next
            step_journal = cls(folder, _next_step(folder, latest), header, sync, lock)
            step_journal._start(journals)
            return step_journal, [], arguments
        step_journal = cls(folder, latest, header, sync, lock)
        if scan.damage or scan.version != 2:
            step_journal.damage = list(scan.damage)
            step_journal.rewriting = True
            step_journal.header = {}  # the builder writes its own header (format 2)
            _set_aside(path, "damaged" if scan.damage else f"v{scan.version}")
        else:
            last = scan.records[-1].sequence
            step_journal._writer = _Writer(path, scan.end, sync, scan.journal_id, last + 1)
        for step in journals - {latest}:
            _remove(journal_file(folder, step))  # finished steps' journals
        return step_journal, scan.records[1:], arguments

    def restart(self, header: dict[str, Any]) -> None:
        """Write the header of a journal being rewritten (a salvage, a format-1 journal)."""
        self.header = header
        self._start(set())

    def _start(self, old: set[int]) -> None:
        """Write this step's header (atomically) and remove the journals in ``old``."""
        path = journal_file(self.folder, self.step)
        temporary = f"{path}.tmp"
        journal_id = os.urandom(8)
        payload = _encode_record("open", {**self.header, "step": self.step}, [])
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                _write_record(descriptor, journal_id, 0, payload)
                if self.sync != "os":
                    os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(temporary, path)
            self._writer = _Writer(path, FRAME.size + payload.size, self.sync, journal_id, 1)
        except OSError as exc:
            _remove(temporary)
            raise _journal_error(f"cannot start the journal `{path}`", exc) from None
        for step in old - {self.step}:
            _remove(journal_file(self.folder, step))

    def _file(self) -> _Writer:
        if self._writer is None:
            msg = (
                f"the journal of step {self.step} in `{self.folder}` is not open "
                f"({self._failure or 'closed'}); resume with "
                f"`RolloutBatchBuilder.recover({self.folder!r})`"
            )
            raise JournalError(msg)
        return self._writer

    def write(self, kind: str, meta: Mapping[str, object], arrays: Sequence[pa.Array]) -> None:
        """Append one record; on return it is in the file (synced if ``sync="call"``)."""
        self._file().write(_encode_record(kind, meta, arrays))

    def finish_step(self, batch: RolloutBatch) -> None:
        """Write the step's dump, start the next step's journal, remove this one's.

        Once the dump is written the step is done: if the next step's journal cannot be started,
        the next call that writes to the journal raises :class:`JournalError` saying so, and
        :meth:`~arrow_split.RolloutBatchBuilder.recover` starts it.

        Raises
        ------
        JournalError
            The dump exists already (it is never overwritten) or cannot be written; this step's
            journal is kept whole.
        """
        writer = self._file()
        target = dump_file(self.folder, self.step)
        if os.path.lexists(target):
            msg = (
                f"the step's dump `{target}` exists already; a dump is never overwritten: move "
                f"it away and call `finish()` again (this step's journal `{writer.path}` is kept)"
            )
            raise JournalError(msg, errno=errno.EEXIST)
        try:
            batch.write(target)
        except OSError as exc:
            raise _journal_error(f"cannot write the step's dump in `{self.folder}`", exc) from None
        writer.close()
        self._writer = None
        finished = self.step
        self.step = _next_step(self.folder, finished)
        try:
            self._start({finished})
        except JournalError as error:
            self._failure = str(error)

    def close(self) -> None:
        """Close the file and release the folder (the journal stays on disk, recoverable)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._failure = "closed by `close()`"
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _next_step(folder: str, finished: int) -> int:
    """The step after ``finished``, past every step file in the folder (no dump overwritten)."""
    try:
        journals, dumps = _steps(folder)
    except OSError:
        journals, dumps = set(), set()
    return max({finished, *journals, *dumps}) + 1
