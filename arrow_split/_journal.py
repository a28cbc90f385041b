"""The builder's journal: every accepted call on disk before it returns, recoverable after a crash.

Files are input: every frame, payload and field is checked; a torn tail is dropped, other damage
is a :class:`JournalError` (or salvaged). Layout and recovery rules: docs/journal.md. It sits
below the builder and trades in plain values (columns, specs, JSON).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import struct
import time
import weakref
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, NoReturn

import numpy as np
import pyarrow as pa
import xxhash

from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._convert import check_content
from arrow_split._codecs.batch_global import check_batch_global, check_per_sample_values
from arrow_split._codecs.per_sample_object import loads_plain
from arrow_split._record import Payload, Record, decode_record, encode_record
from arrow_split._version import __version__
from arrow_split.batch import RolloutBatch
from arrow_split.batch._dump_meta import spec_from_json as _spec_from_json
from arrow_split.batch._dump_meta import spec_to_json as _spec_to_json
from arrow_split.errors import ArrowSplitError, DumpError, JournalError
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, role_column

__all__ = [
    "GroupParts",
    "JournalDamage",
    "JournalSync",
    "OnDuplicate",
    "StepJournal",
    "global_from_record",
    "global_record",
    "group_from_record",
    "journal_header",
    "pack_value",
    "parse_header",
    "spec_json",
    "unpickle_v1",
]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

JOURNAL_VERSION = "3"  # 3: group records are buffer records (2: IPC streams only)
_READABLE = ("1", "2", JOURNAL_VERSION)
_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")
_LOCK_NAME = "journal.lock"
_MAGIC = b"ASJ2"
FRAME = struct.Struct("<4s8sQQQI")  # magic, id, sequence, length, payload and frame checks
_HEAD = struct.Struct("<4s8sQQQ")
_MAGIC_V1 = b"ASJ1"
_FRAME_V1 = struct.Struct("<4sQI")  # format 1: magic, payload length, CRC-32 of the payload
_IOV_MAX = 512  # pieces per gathered write (Linux allows 1024)
_MAX_PAYLOAD = 1 << 48
_SPEC_JSON: dict[int, tuple[ColumnSpec, dict[str, object]]] = {}
_SPEC_JSON_SIZE = 4096


def journal_file(folder: str, step: int, suffix: str = "journal") -> str:
    """The journal file of step ``step`` (``suffix="arrow"``: its dump)."""
    return os.path.join(folder, f"step-{step:06d}.{suffix}")


def spec_json(spec: ColumnSpec) -> dict[str, object]:
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
    try:
        return _spec_from_json(item, 0, source)
    except DumpError as exc:
        raise JournalError(str(exc)) from None


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
    torn_at: int | None = None

    @property
    def expected(self) -> int:
        """The sequence number of the next record."""
        return self.records[-1].sequence + 1 if self.records else 0


def _head_check(head: bytes | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(head) & 0xFFFFFFFF


def _write_record(descriptor: int, journal_id: bytes, sequence: int, payload: Payload) -> None:
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
        magic, length, crc = _FRAME_V1.unpack_from(view, end)
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
    rest = len(view) - end
    if rest:
        torn = rest < _FRAME_V1.size
        if not torn:
            magic, length, _ = _FRAME_V1.unpack_from(view, end)
            torn = magic == _MAGIC_V1 and end + _FRAME_V1.size + length > len(view)
        if torn:
            scan.torn_at = end
        else:
            reason = "a format-1 record that does not read (damaged)"
            scan.damage.append(JournalDamage(path, end, rest, reason))
    return scan


def pack_value(spec: ColumnSpec, value: object) -> dict[str, object]:
    """A checked batch-global value as JSON tagged with its shape (docs/journal.md)."""
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
    """The value :func:`pack_value` stored, checked against ``spec`` (else a JournalError)."""
    shape = spec.global_shape or "int"
    if not isinstance(stored, dict) or list(stored) != [shape]:
        msg = f"batch-global key `{spec.name}` must be stored as {{{shape!r}: ...}}, got "
        raise JournalError(msg + f"{stored!r:.60}")
    item = stored[shape]
    if shape == "float_per_sample":
        raw = _base64(item)
        if raw is None or len(raw) % 8:
            msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not base64 float64 values"
            raise JournalError(msg, key=spec.name)
        item = np.frombuffer(raw, dtype="<f8").astype(np.float64)
    elif shape == "int_map":
        item = _pairs(spec, item)
    return _checked(spec, item, allow_nonfinite)


def _checked(spec: ColumnSpec, value: object, allow_nonfinite: bool) -> object:
    """A batch-global value read from a journal, checked as a call's would be."""
    try:
        if spec.global_shape == "float_per_sample":
            check_per_sample_values(spec, value, allow_nonfinite)
            floats = np.array(value, dtype=np.float64)
            floats.flags.writeable = False
            return floats
        if isinstance(value, Mapping) and spec.global_shape != "int_map":
            msg = f"holds a dict, not its {spec.global_shape} value"
            raise JournalError(msg)
        return check_batch_global(spec, value, 0, allow_nonfinite)
    except ArrowSplitError as exc:
        msg = f"batch-global key `{spec.name}` holds a bad value: {exc}"
        raise JournalError(msg, key=spec.name) from None


def _base64(item: object) -> bytes | None:
    try:
        return base64.b64decode(item, validate=True) if isinstance(item, str) else None
    except (binascii.Error, ValueError):
        return None


def _pairs(spec: ColumnSpec, item: object) -> dict[object, object]:
    if not isinstance(item, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in item
    ):
        msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not a list of [key, value]"
        raise JournalError(msg, key=spec.name)
    pairs: dict[object, object] = {
        pair[0]: pair[1] for pair in item if isinstance(pair[0], (int, str, float))
    }
    if len(pairs) != len(item):
        msg = f"batch-global key `{spec.name}` repeats a key, or one is no number: {item!r:.60}"
        raise JournalError(msg, key=spec.name)
    return pairs


def unpickle_v1(text: object) -> object:
    """A format-1 value (a base64 pickle) built as plain data, no code run (else a JournalError)."""
    try:
        raw = base64.b64decode(str(text) if isinstance(text, str) else b"!", validate=True)
        value = loads_plain(raw)
    except Exception as exc:
        msg = f"a format-1 batch-global value does not read: {type(exc).__name__}: {exc}"
        raise JournalError(msg) from None
    if isinstance(value, np.ndarray) and value.dtype.kind not in "biuf":
        msg = f"a format-1 batch-global value is an array of dtype {value.dtype}"
        raise JournalError(msg)
    return value


def journal_header(
    declared: Sequence[ColumnSpec], options: EncodeOptions, identity: str | None
) -> dict[str, object]:
    """What a journal's ``open`` record holds: enough to build the same builder again."""
    return {
        "journal_version": JOURNAL_VERSION,
        "library_version": __version__,
        "declared": [spec_json(spec) for spec in declared],
        "allow_nonfinite": options.allow_nonfinite,
        "exact_floats": options.exact_floats,
        "identity": identity,
    }


def _field(header: Mapping[str, Any], name: str, kinds: tuple[type, ...], path: str) -> Any:
    value = header.get(name, KeyError)
    if (
        value is KeyError
        or not isinstance(value, kinds)
        or (int in kinds and bool not in kinds and isinstance(value, bool))
    ):
        wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
        got = "nothing" if value is KeyError else f"{type(value).__name__} {value!r:.40}"
        msg = f"the header's `{name}` must be {wanted}, got {got}"
        raise JournalError(msg, path=path, key=name, expected=wanted, got=got)
    return value


def parse_header(header: Mapping[str, Any], path: str, step: int) -> dict[str, Any]:
    """The builder's arguments from an ``open`` record, every field checked, never coerced."""
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
    return {"key": key, "spec": spec_json(spec), "value": pack_value(spec, value)}


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
        return key, spec, _checked(spec, unpickle_v1(stored), allow_nonfinite)
    return key, spec, unpack_value(spec, stored, allow_nonfinite)


class GroupParts(NamedTuple):
    """What a ``group`` record holds, checked."""

    columns: dict[str, pa.Array]
    used: dict[str, ColumnSpec]
    batch_globals: dict[str, object]
    sample_keys: tuple[str, ...]


def group_from_record(record: Record, source: str, allow_nonfinite: bool) -> GroupParts:
    """The parts of a ``group`` record, every field checked with the library's rules."""
    meta = record.meta
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
    return GroupParts(columns, used, {**group_globals, **values}, tuple(sample_keys))


def _names(meta: Mapping[str, Any], name: str) -> list[str]:
    """A record's list of distinct key names (a :class:`JournalError` if it is not one)."""
    value = meta.get(name)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        msg = f"its `{name}` must be a list of str, got {value!r:.60}"
        raise JournalError(msg)
    if len(set(value)) != len(value):
        msg = f"its `{name}` names a key twice: {value!r:.60}"
        raise JournalError(msg)
    return list(value)


def _record_specs(meta: Mapping[str, Any], source: str) -> dict[str, ColumnSpec]:
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
    used: Mapping[str, ColumnSpec], names: list[str], arrays: Sequence[pa.Array]
) -> dict[str, pa.Array]:
    columns = {}
    for name, array in zip(names, arrays, strict=True):
        spec = used.get(name)
        if spec is None or not spec.is_per_sample:
            msg = f"its column `{name}` has no per-sample spec in the record"
            raise JournalError(msg)
        if not codec_for(spec).holds(spec, array.type):  # checked before any conversion
            msg = f"its column `{name}` is {array.type}, which its spec {spec} never makes"
            raise JournalError(msg)
        columns[name] = codec_for(spec).stored(spec, array)  # a format-1 column made current
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
    used: Mapping[str, ColumnSpec], keys: list[str], arrays: Sequence[pa.Array], count: int
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
    meta: Mapping[str, Any], used: Mapping[str, ColumnSpec], version_1: bool, allow_nonfinite: bool
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
            values[key] = _checked(spec, value, allow_nonfinite)
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
        named = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        with contextlib.suppress(OSError):  # the holder's name is a courtesy
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, json.dumps(named).encode(), 0)
        self.release = weakref.finalize(self, os.close, descriptor)  # idempotent


def _holder(descriptor: int) -> str:
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        pid, host = int(holder["pid"]), str(holder["host"])
        if pid == os.getpid() and host == socket.gethostname():  # this very process
            return f"another builder of this process (pid {pid}, since {since}), not yet closed"
        return f"process {pid} on host {host!r} since {since}"
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        return "another process (its lock file does not name it)"


class _Writer:
    """Appends framed records to an open journal file; a failed write is cut back."""

    def __init__(
        self, path: str, end: int, sync: JournalSync, journal_id: bytes, sequence: int
    ) -> None:
        self.path, self.sync, self.journal_id, self.sequence = path, sync, journal_id, sequence
        self._end = end
        self._broken = False
        try:
            self._descriptor = os.open(path, os.O_WRONLY)
        except OSError as exc:
            raise _journal_error(f"cannot open the journal `{path}`", exc) from None
        self._cut_back()  # a torn tail's bytes, if any
        if self._broken:
            self.close()
            msg = f"cannot cut the torn tail of the journal `{path}`; check it is writable"
            raise JournalError(msg)

    def write(self, payload: Payload) -> None:
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
    """Rename ``path`` to a free ``path.suffix`` (``.suffix.1``, ...); the new name."""
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
        self.source = ""  # the file the recovered records were read from (its name now)

    @classmethod
    def create(cls, folder: str, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``folder`` for the step after its last dump (a JournalError if not)."""
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
        """The unfinished step's journal in ``folder``, its records, its header's arguments."""
        journals = _steps(folder)[0] if os.path.isdir(folder) else set()
        if not journals:
            msg = f"no rollout journal in `{folder}`; start one with `journal={folder!r}`"
            raise JournalError(msg, errno=errno.ENOENT)
        lock = _Lock(folder)
        try:
            journals, dumps = _steps(folder)
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
            step_journal.source = path
            if scan.damage or scan.version != 2:
                step_journal.damage = list(scan.damage)
                step_journal.set_aside("damaged" if scan.damage else f"v{scan.version}")
            else:
                end = scan.size if scan.torn_at is None else scan.torn_at  # a torn tail dropped
                sequence = scan.records[-1].sequence + 1
                step_journal._writer = _Writer(path, end, sync, scan.journal_id, sequence)
            for step in journals - {latest}:
                _remove(journal_file(folder, step))  # finished steps' journals
        except BaseException:
            lock.release()
            raise
        return step_journal, scan.records[1:], arguments

    def set_aside(self, suffix: str) -> None:
        """Keep the recovered file beside a new journal the replayed records are written to."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self.rewriting = True
        self.header = {}  # the builder writes its own header (format 2)
        self.source = _set_aside(self.source, suffix)

    def salvage(self, skipped: Sequence[JournalDamage]) -> None:
        """Skip whole records that break a rule: the file is set aside, the rest rewritten."""
        if not self.rewriting:
            self.set_aside("damaged")
        self.damage.extend(skipped)

    def restart(self, header: dict[str, Any]) -> None:
        """Write the header of a journal being rewritten (a salvage, a format-1 journal)."""
        self.header = header
        self._start(set())

    def _start(self, old: set[int]) -> None:
        """Write this step's header (atomically) and remove the journals in ``old``."""
        path = journal_file(self.folder, self.step)
        temporary = f"{path}.tmp"
        journal_id = os.urandom(8)
        payload = encode_record("open", {**self.header, "step": self.step}, [])
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
        self._file().write(encode_record(kind, meta, arrays))

    def finish_step(self, batch: RolloutBatch) -> None:
        """Write the step's dump (never overwritten), start the next journal, remove this one.

        Once the dump is written the step is done: a next journal that cannot start is reported
        by the next write.
        """
        writer = self._file()
        target = journal_file(self.folder, self.step, "arrow")
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
