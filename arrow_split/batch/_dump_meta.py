"""The metadata of a rollout dump: column specs and batch-global values as versioned JSON.

The format (keys, tags, versions) is described in docs/dumps.md, "What is in the file". A
journal stores its specs the same way (:func:`spec_to_json`, :func:`spec_from_json`).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._version import __version__
from arrow_split.errors import ArrowSplitError, DumpError
from arrow_split.schema import KNOWN_COLUMNS, ColumnSpec, LengthRule, role_column

__all__ = [
    "DUMP_VERSION",
    "DumpMetadata",
    "decode_metadata",
    "encode_metadata",
    "field_metadata",
    "spec_from_json",
    "spec_to_json",
]

DUMP_VERSION = "2"
"""The version of the dump format this module writes."""

_READ_VERSIONS = ("1", "2")

_VERSION = b"arrow_split.dump.version"
_LIBRARY = b"arrow_split.version"
_COMPRESSION = b"arrow_split.dump.compression"
_SPECS = b"arrow_split.specs"
_GLOBALS = b"arrow_split.batch_globals"
_KEYS = frozenset((_VERSION, _LIBRARY, _COMPRESSION, _SPECS, _GLOBALS))
_NUMERIC_KINDS = "biuf"
_LENGTH_TEXT: dict[LengthRule, str] = {
    "tokens": "as many as `{tokens}[i]` has tokens",
    "response": "covering only the last `{response}[i]` tokens of `{tokens}[i]` (the response)",
    "tokens_minus_one": "one fewer than `{tokens}[i]` has tokens",
}


@dataclasses.dataclass(frozen=True, slots=True)
class DumpMetadata:
    """The decoded metadata of a dump."""

    specs: dict[str, ColumnSpec]
    batch_globals: dict[str, object]
    dump_version: str
    library_version: str
    compression: str | None
    kept: dict[bytes, bytes]
    """The schema's metadata that is not the library's (another tool's): kept with the columns."""


def encode_metadata(
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    compression: str | None,
) -> dict[bytes, bytes]:
    """The schema metadata of a dump of these specs and batch-global values.

    Raises :class:`DumpError` for a spec field or a value the format cannot store.
    """
    stored_specs = [spec_to_json(spec) for spec in specs.values()]
    stored_globals = {key: _global_to_json(key, value) for key, value in batch_globals.items()}
    return {
        _VERSION: DUMP_VERSION.encode(),
        _LIBRARY: __version__.encode(),
        _COMPRESSION: (compression or "").encode(),
        _SPECS: json.dumps(stored_specs, allow_nan=False).encode(),
        _GLOBALS: json.dumps(stored_globals).encode(),
    }


def decode_metadata(schema: pa.Schema, source: str) -> DumpMetadata:
    """Decode and check a dump's metadata against the columns of ``schema``, once.

    Raises :class:`DumpError` for anything but the metadata of a known version fitting them.
    """
    metadata = schema.metadata or {}
    version = metadata.get(_VERSION)
    if version is None:
        msg = (
            f"not an arrow_split dump: its schema has no `{_VERSION.decode()}` metadata; "
            "write dumps with `RolloutBatch.write`"
        )
        raise DumpError(msg, path=source, key=_VERSION.decode())
    if version not in {known.encode() for known in _READ_VERSIONS}:
        msg = (
            f"a dump of version {version.decode(errors='replace')!r}; this "
            f"arrow_split reads versions {' and '.join(map(repr, _READ_VERSIONS))}; read it with "
            "the arrow_split "
            f"that wrote it ({_text(metadata, _LIBRARY, source)}) and write it again"
        )
        raise DumpError(msg, path=source, key=_VERSION.decode())
    specs = _specs_from_json(_json(metadata, _SPECS, source), source)
    batch_globals = _globals_from_json(_json(metadata, _GLOBALS, source), source)
    _check_against_columns(schema, specs, batch_globals, source)
    return DumpMetadata(
        specs=specs,
        batch_globals=batch_globals,
        dump_version=version.decode(),
        library_version=_text(metadata, _LIBRARY, source),
        compression=_text(metadata, _COMPRESSION, source) or None,
        kept={key: text for key, text in metadata.items() if key not in _KEYS},
    )


def _text(metadata: Mapping[bytes, bytes], key: bytes, source: str) -> str:
    raw = metadata.get(key)
    if raw is None:
        msg = f"the dump's metadata lacks `{key.decode()}`"
        raise DumpError(msg, path=source, key=key.decode())
    try:
        return raw.decode()
    except UnicodeDecodeError as exc:
        msg = f"the dump's `{key.decode()}` metadata is not UTF-8 text: {exc}"
        raise DumpError(msg, path=source, key=key.decode()) from exc


def _json(metadata: Mapping[bytes, bytes], key: bytes, source: str) -> Any:
    text = _text(metadata, key, source)
    try:
        return json.loads(text)
    except ValueError as exc:
        msg = f"the dump's `{key.decode()}` metadata is corrupt JSON: {exc}"
        raise DumpError(msg, path=source, key=key.decode()) from exc


def spec_to_json(spec: ColumnSpec) -> dict[str, object]:
    """A spec as the JSON object a dump (or a journal) stores: one member per field."""
    return {
        field.name: _field_to_json(spec.name, field.name, getattr(spec, field.name))
        for field in dataclasses.fields(spec)
    }


def _field_to_json(column: str, field: str, value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, pa.DataType):
        readable = _readable_type(value)
        if readable is not None:
            return {"arrow": readable}
        serialized = pa.schema([pa.field("v", value)]).serialize().to_pybytes()
        return {"arrow_type": base64.b64encode(serialized).decode("ascii")}
    if isinstance(value, tuple) and all(isinstance(item, (int, str)) for item in value):
        return {"tuple": list(value)}
    msg = (
        f"column `{column}`: cannot store spec field `{field}` of type {type(value).__name__} "
        "in a dump; the format stores None, bool, int, float, str, tuples of int/str and "
        "Arrow types"
    )
    raise DumpError(msg, key=column)


def _readable_type(arrow_type: pa.DataType) -> str | None:
    """The name pyarrow prints for ``arrow_type``, where it reads back as the same type."""
    name = str(arrow_type)
    try:
        same = pa.type_for_alias(name) == arrow_type
    except (ValueError, KeyError):
        return None
    return name if same else None


def _field_from_json(column: str, field: str, value: object, source: str) -> object:
    if not isinstance(value, dict):
        return value
    if set(value) == {"arrow_type"} and isinstance(value["arrow_type"], str):
        try:
            serialized = base64.b64decode(value["arrow_type"], validate=True)
            return pa.ipc.read_schema(pa.py_buffer(serialized)).field("v").type
        except (binascii.Error, pa.ArrowException, OSError, KeyError) as exc:
            msg = f"column `{column}`: spec field `{field}` holds a bad Arrow type"
            raise DumpError(msg, path=source, key=column) from exc
    if set(value) == {"arrow"} and isinstance(value["arrow"], str):
        try:
            return pa.type_for_alias(value["arrow"])
        except (ValueError, KeyError) as exc:
            msg = (
                f"column `{column}`: spec field `{field}` holds an unknown Arrow "
                f"type {value['arrow']!r:.40}"
            )
            raise DumpError(msg, path=source, key=column) from exc
    if set(value) == {"tuple"} and isinstance(value["tuple"], list):
        return tuple(value["tuple"])
    msg = f"column `{column}`: spec field `{field}` holds {value!r:.80}"
    raise DumpError(msg, path=source, key=column)


def _specs_from_json(stored: object, source: str) -> dict[str, ColumnSpec]:
    if not isinstance(stored, list):
        msg = f"the dump's specs must be a JSON list, got {type(stored).__name__}"
        raise DumpError(msg, path=source, key=_SPECS.decode())
    specs: dict[str, ColumnSpec] = {}
    for position, item in enumerate(stored):
        spec = spec_from_json(item, position, source)
        if spec.name in specs:
            msg = f"the dump declares column `{spec.name}` twice"
            raise DumpError(msg, path=source, key=spec.name)
        specs[spec.name] = spec
    return specs


def spec_from_json(item: object, position: int, source: str) -> ColumnSpec:
    """The spec of a stored JSON object (item ``position`` of ``source``), or a DumpError."""
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        msg = f"spec {position} must be a JSON object with a `name`, got {item!r:.80}"
        raise DumpError(msg, path=source)
    column = item["name"]
    fields = {field.name: field for field in dataclasses.fields(ColumnSpec)}
    unknown = sorted(set(item) - set(fields))
    if unknown:
        msg = (
            f"column `{column}`: unknown spec fields {', '.join(unknown)}; the file "
            "was written by a newer arrow_split, read it with that version"
        )
        raise DumpError(msg, path=source, key=column)
    stored = {key: _field_from_json(column, key, value, source) for key, value in item.items()}
    for key, value in stored.items():
        if isinstance(fields[key].default, bool) and not isinstance(value, bool):
            msg = f"column `{column}`: spec field `{key}` must be a bool, got {value!r}"
            raise DumpError(msg, path=source, key=column)
    known = KNOWN_COLUMNS.get(column)
    if known is not None and all(getattr(known, key) == value for key, value in stored.items()):
        filled = {name: getattr(known, name) for name in fields}  # an older file of a known key
    else:
        filled = {
            name: field.default
            for name, field in fields.items()
            if field.default is not dataclasses.MISSING
        }
    lacking = [name for name in fields if name not in filled and name not in stored]
    if lacking:
        msg = f"column `{column}`: the stored spec lacks the field `{lacking[0]}`"
        raise DumpError(msg, path=source, key=column)
    arguments: dict[str, Any] = {**filled, **stored}
    if arguments.get("role") is None and known is not None and known.role is not None:
        arguments["role"] = known.role  # a role added since (loss_mask), as resolve_specs does
    try:
        return ColumnSpec(**arguments)
    except (ArrowSplitError, TypeError, ValueError) as exc:
        msg = f"column `{column}`: the stored spec is not valid: {exc}"
        raise DumpError(msg, path=source, key=column) from exc


def _global_to_json(key: str, value: object) -> dict[str, object]:
    if isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC_KINDS:
        return {"ndarray": [value.dtype.str, value.tolist()]}
    if _is_plain(value) or (isinstance(value, list) and all(map(_is_plain, value))):
        return {"json": value}
    if isinstance(value, dict) and all(_is_plain(k) and _is_plain(v) for k, v in value.items()):
        return {"map": [[k, v] for k, v in value.items()]}  # JSON objects would make keys str
    msg = (
        f"batch-global key `{key}`: cannot store a value of type {type(value).__name__} in a "
        "dump; the format stores ints, strings, lists and maps of them and numeric numpy arrays"
    )
    raise DumpError(msg, key=key)


def _is_plain(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _globals_from_json(stored: object, source: str) -> dict[str, object]:
    if not isinstance(stored, dict):
        msg = "the dump's batch-global values must be a JSON object"
        raise DumpError(msg, path=source)
    return {key: _global_from_json(key, value, source) for key, value in stored.items()}


def _global_from_json(key: str, value: object, source: str) -> object:
    if isinstance(value, dict) and set(value) == {"json"}:
        return value["json"]
    if isinstance(value, dict) and set(value) == {"map"}:
        pairs = value["map"]
        if not isinstance(pairs, list) or not all(
            isinstance(pair, list) and len(pair) == 2 and _is_plain(pair[0]) for pair in pairs
        ):  # a key is a JSON scalar (a list or an object is no dict key)
            msg = f"batch-global key `{key}` holds a bad map: {pairs!r:.80}"
            raise DumpError(msg, path=source, key=key)
        return {pair[0]: pair[1] for pair in pairs}
    if isinstance(value, dict) and set(value) == {"ndarray"}:
        try:
            dtype_text, items = value["ndarray"]
            dtype = np.dtype(str(dtype_text))
            if dtype.kind not in _NUMERIC_KINDS:
                raise TypeError(dtype_text)  # one `except` reports it as any other bad array
            array = np.array(items, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as exc:
            msg = f"batch-global key `{key}` holds a bad array: {exc}"
            raise DumpError(msg, path=source, key=key) from exc
        if array.ndim != 1:
            msg = f"batch-global key `{key}` holds an array of shape {array.shape}"
            raise DumpError(msg, path=source, key=key)
        array.flags.writeable = False
        return array
    msg = f"batch-global key `{key}` holds an untagged value {value!r:.80}"
    raise DumpError(msg, path=source, key=key)


def _check_against_columns(
    schema: pa.Schema,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    source: str,
) -> None:
    names = list(schema.names)
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:  # before `schema.field(name)`, which refuses a name held twice
        msg = f"the column `{twice}` is stored twice; a dump holds each column once"
        raise DumpError(msg, path=source, key=twice)
    per_sample = [key for key, spec in specs.items() if spec.is_per_sample]
    global_keys = [key for key, spec in specs.items() if not spec.is_per_sample]
    problems = []
    if sorted(names) != sorted(per_sample):
        problems.append(f"columns {names} but per-sample specs {per_sample}")
    if sorted(batch_globals) != sorted(global_keys):
        problems.append(f"batch-global values {sorted(batch_globals)} but specs {global_keys}")
    unfit = [
        name for name in names if name in specs and not _fits(specs[name], schema.field(name).type)
    ]
    problems.extend(
        f"column `{name}` is {schema.field(name).type}, not the type of its spec {specs[name]}"
        for name in unfit
    )
    length_source = role_column(specs, "length_source")
    if length_source is None or length_source not in names:
        problems.append(f"no `{role_column(KNOWN_COLUMNS, 'length_source')}` column")
    if problems:
        msg = f"the stored specs do not match the columns: {'; '.join(problems)}"
        raise DumpError(msg, path=source, key=unfit[0] if unfit else None)


def _fits(spec: ColumnSpec, arrow_type: pa.DataType) -> bool:
    """Whether a column's Arrow type is one its spec's codec makes (a per-sample spec)."""
    return spec.is_per_sample and codec_for(spec).holds(spec, arrow_type)


def field_metadata(spec: ColumnSpec, specs: Mapping[str, ColumnSpec]) -> dict[bytes, bytes]:
    """The Arrow field metadata of a dump's column, for people and other tools (never read)."""
    tokens, response = (  # the batch's columns, else the known ones (which have both)
        role_column(specs, role) or str(role_column(KNOWN_COLUMNS, role))
        for role in ("length_source", "response_length")
    )
    kind = codec_for(spec)
    parts = [kind.text]
    metadata = {b"arrow_split.kind": spec.kind.encode()}
    if spec.length is not None:
        length_of = response if spec.length == "response" else tokens
        metadata[b"arrow_split.length_rule"] = spec.length.encode()
        metadata[b"arrow_split.length_of"] = length_of.encode()
        parts.append(_LENGTH_TEXT[spec.length].format(tokens=tokens, response=response))
    stored_as = kind.stored_as(spec)
    if stored_as is not None:
        metadata[b"arrow_split.codec"] = spec.codec.encode()
        parts.append(stored_as)
    if spec.role is not None:
        metadata[b"arrow_split.role"] = spec.role.encode()
        parts.append(f"role `{spec.role}`")
    metadata[b"arrow_split.description"] = "; ".join(parts).encode()
    return metadata
