"""What a journal's records hold: the header, a group's parts, a batch-global value, checked.

A record's JSON is input: every member is one the format defines (others are refused), every
field is checked with the library's rules and never coerced (docs/journal.md, "The files").
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, NoReturn

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._convert import check_content
from arrow_split._codecs.batch_global import check_batch_global, check_per_sample_values
from arrow_split._codecs.per_sample_object import loads_plain
from arrow_split._record import Record
from arrow_split._version import __version__
from arrow_split.batch._dump_meta import spec_from_json as _spec_from_json
from arrow_split.batch._dump_meta import spec_to_json as _spec_to_json
from arrow_split.errors import ArrowSplitError, DumpError, JournalError
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, role_column

__all__ = [
    "GroupParts",
    "global_from_record",
    "global_record",
    "group_from_record",
    "journal_header",
    "pack_value",
    "parse_header",
    "spec_json",
    "unpickle_v1",
]

JOURNAL_VERSION = "3"  # 3: group records are buffer records (2: IPC streams only)
_RELEASED = ("1", JOURNAL_VERSION)  # 1: 0.3.0's; 2 was written by no release
_MEMBERS = {
    "open": (
        "journal_version",
        "library_version",
        "declared",
        "allow_nonfinite",
        "exact_floats",
        "identity",
        "step",
    ),
    "group": ("names", "sample_globals", "sample_keys", "specs", "globals"),
    "global": ("key", "spec", "value"),
}
"""The members each kind of record has, in every format (docs/journal.md, "The files")."""
_SPEC_JSON: dict[int, tuple[ColumnSpec, dict[str, object]]] = {}
_SPEC_JSON_SIZE = 4096


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


def pack_value(spec: ColumnSpec, value: object) -> dict[str, object]:
    """A checked batch-global value as JSON tagged with its shape (docs/journal.md)."""
    shape = spec.global_shape or "int"
    if shape == "float_per_sample":
        floats = np.asarray(value, dtype="<f8").tobytes()  # C order, whatever the array's
        return {shape: base64.b64encode(floats).decode("ascii")}
    if shape == "int_map":
        return {shape: [[int(k), int(v)] for k, v in value.items()]}  # type: ignore[attr-defined]
    if shape == "int":
        return {shape: int(value)}  # type: ignore[call-overload]
    return {shape: list(value)}  # type: ignore[call-overload]


def _unpacked(spec: ColumnSpec, stored: object) -> object:
    """The value :func:`pack_value` stored, not yet checked (a JournalError if it is no such)."""
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
    return item


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
        raw = base64.b64decode(text if isinstance(text, str) else b"!", validate=True)
        value = loads_plain(raw)
    except Exception as exc:
        msg = f"a format-1 batch-global value does not read: {type(exc).__name__}: {exc}"
        raise JournalError(msg, got=type(exc).__name__) from None
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
    _defined_members(header, "open", path)
    version = _field(header, "journal_version", (str,), path)
    if version not in _RELEASED:
        _unreadable_version(version, path)
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


def _defined_members(meta: Mapping[str, Any], kind: str, path: str | None = None) -> None:
    """Refuse a member a ``kind`` record lacks (the header's file named here, others by replay)."""
    for member in meta:
        if member not in _MEMBERS[kind]:
            msg = (
                f"its `{kind}` record has a member `{member!s:.40}` that no format of the journal "
                f"defines (a `{kind}` record has {', '.join(_MEMBERS[kind])})"
            )
            offset = None if path is None else 0
            raise JournalError(msg, key=str(member), path=path, offset=offset)


def _unreadable_version(version: str, path: str) -> NoReturn:
    if version == "2":  # written between 0.3.0 and 0.4.0 by unreleased code only
        msg = "the journal is of format 2, which no release of arrow_split wrote"
        fix = (
            "finish its step (or recover it and call `finish()`) with the arrow_split that wrote "
            "it, then go on with this one; or move the file away to start the step afresh"
        )
    else:
        msg = f"the journal is of format {version!r:.20}; this arrow_split reads formats 1 and 3"
        fix = "read it with the arrow_split that wrote it (its `library_version`)"
    raise JournalError(msg, path=path, key="journal_version", got=version[:20], fix=fix)


def global_record(key: str, spec: ColumnSpec, value: object) -> dict[str, object]:
    """The JSON of the ``global`` record of a checked batch-global value."""
    return {"key": key, "spec": spec_json(spec), "value": pack_value(spec, value)}


def global_from_record(
    record: Record, source: str, allow_nonfinite: bool
) -> tuple[str, ColumnSpec, object]:
    """The key, spec and value a ``global`` record holds, every field checked."""
    _defined_members(record.meta, "global")
    key = record.meta.get("key")
    spec = _read_spec(record.meta.get("spec"), source)
    if not isinstance(key, str) or spec.name != key or spec.is_per_sample:
        msg = f"its `key` {key!r:.40} is not the batch-global key of its spec {spec}"
        raise JournalError(msg)
    stored = record.meta.get("value")
    value = unpickle_v1(stored) if record.sequence < 0 else _unpacked(spec, stored)
    return key, spec, _checked(spec, value, allow_nonfinite)


class GroupParts(NamedTuple):
    """What a ``group`` record holds, checked."""

    columns: dict[str, pa.Array]
    used: dict[str, ColumnSpec]
    batch_globals: dict[str, object]
    sample_keys: tuple[str, ...]


def group_from_record(record: Record, source: str, allow_nonfinite: bool) -> GroupParts:
    """The parts of a ``group`` record, every field checked with the library's rules."""
    meta = record.meta
    _defined_members(meta, "group")
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
    if len(set(lengths.values())) != 1:  # no rows: an empty call's (it fixes the step's keys)
        msg = f"its columns have different numbers of rows: {lengths}"
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
        item = value if version_1 else _unpacked(spec, value)  # format 1: unpickled already
        values[key] = _checked(spec, item, allow_nonfinite)
    return values
