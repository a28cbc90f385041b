"""Rollout dumps on disk: one Arrow IPC file per whole batch, read back by memory mapping.

Specs and batch-global values are JSON in the schema's metadata (:mod:`._dump_meta`); the
format, and why a write is atomic, are in docs/dumps.md.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple, get_args

import numpy as np
import pyarrow as pa

from arrow_split._args import as_flag, as_path
from arrow_split._codecs import codec_for
from arrow_split._codecs._convert import check_content
from arrow_split._codecs.batch_global import unpadded_samples
from arrow_split.batch._dump_meta import (
    DumpMetadata,
    decode_metadata,
    encode_metadata,
    field_metadata,
)
from arrow_split.errors import ArrowSplitError, DumpError, mistake
from arrow_split.schema import ColumnSpec, Roles

__all__ = [
    "Compression",
    "DumpInfo",
    "DumpParts",
    "dump_rows",
    "read_dump",
    "read_parquet",
    "write_dump",
    "write_parquet",
]

Compression = Literal["zstd", "lz4"]
"""The buffer compressions a dump may use (``None``, the default, maps without a copy)."""

PathLike = str | os.PathLike[str]


class DumpParts(NamedTuple):
    """What a dump holds: a :class:`~arrow_split.RolloutBatch`'s parts, checked, read-only."""

    record_batch: pa.RecordBatch
    specs: Mapping[str, ColumnSpec]
    batch_globals: Mapping[str, object]


@dataclasses.dataclass(frozen=True, slots=True)
class DumpInfo:
    """What a dump file says about itself: path, size, format and writer versions, compression."""

    path: str
    file_bytes: int
    dump_version: str
    library_version: str
    compression: str | None


def write_dump(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    path: PathLike,
    *,
    compression: Compression | None = None,
) -> None:
    """Write a batch's parts (trusted) to one Arrow IPC file, atomically.

    Raises :class:`OptionError` for an unknown compression (:class:`OptionTypeError`: not a str)
    and :class:`DumpError` for a value the format cannot store, or a part of a batch (a slice, a
    shard's rows) whose ``raw_reward`` holds its batch's whole value.
    """
    codec = _check_compression(compression)
    with_metadata = _with_metadata(record_batch, specs, batch_globals, compression)
    options = pa.ipc.IpcWriteOptions(compression=codec)

    def write(sink: pa.NativeFile) -> None:
        with pa.ipc.new_file(sink, with_metadata.schema, options=options) as writer:
            writer.write_batch(with_metadata)

    _write_atomically(path, write)


def read_dump(path: PathLike, *, validate: bool = True) -> tuple[DumpParts, DumpInfo]:
    """Read a dump written by :func:`write_dump`; an uncompressed one without copying a buffer.

    The file is input: its format and metadata are checked once here, its content too with
    ``validate``; the parts returned are then trusted (``RolloutBatch.read`` makes its batch
    of them with the trusted constructor, checking nothing again).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    DumpError
        A folder, not an Arrow IPC dump of a known version, or bad metadata or content.
    """
    validate = as_flag("validate", validate)
    source = _existing(path, "rollout dump")
    try:
        mapped = pa.memory_map(source)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        msg = f"cannot map the file for reading: {exc}"
        raise DumpError(msg, path=source) from exc
    with mapped:
        file_bytes = mapped.size()
        record_batch = _read_single_batch(mapped, source)
    metadata = decode_metadata(record_batch.schema, source)
    info = DumpInfo(
        path=source,
        file_bytes=int(file_bytes),
        dump_version=metadata.dump_version,
        library_version=metadata.library_version,
        compression=metadata.compression,
    )
    return _parts(record_batch, metadata, source, validate), info


def dump_rows(path: str) -> int:
    """The samples of the dump at ``path``: its footer, schema and metadata read, no column.

    Raises :class:`DumpError` for a file that is no dump of a known version, or cannot be read.
    """
    try:
        with pa.memory_map(path) as mapped:
            record_batch = _read_single_batch(mapped, path, validate=False)
    except (OSError, pa.ArrowException) as exc:
        msg = f"cannot map the file for reading: {exc}"
        raise DumpError(msg, path=path) from exc
    decode_metadata(record_batch.schema, path)
    return int(record_batch.num_rows)


def write_parquet(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    path: PathLike,
) -> None:
    """Write a batch's parts as one Parquet file, atomically, with a dump's metadata."""
    import pyarrow.parquet as pq

    record_batch = _with_metadata(record_batch, specs, batch_globals, None)
    schema = pa.schema(  # objects stored once become one opaque binary per row, as others expect
        [
            field.with_type(field.type.value_type) if pa.types.is_dictionary(field.type) else field
            for field in record_batch.schema
        ],
        metadata=record_batch.schema.metadata,
    )
    table = pa.Table.from_batches([record_batch]).cast(schema)
    _write_atomically(path, lambda sink: pq.write_table(table, sink))


def read_parquet(path: PathLike, *, validate: bool = True) -> DumpParts:
    """Read a file written by :func:`write_parquet` (a copy); raises as :func:`read_dump`."""
    import pyarrow.parquet as pq

    source = _existing(path, "Parquet file")
    try:
        table = pq.read_table(source)
        _decode_names(table.schema)  # before pyarrow's own use of a name
        batches = table.combine_chunks().to_batches()  # one, or none of an empty table
        schema = table.schema
        record_batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)
        _check_bytes(record_batch, validate)
    except (OSError, pa.ArrowException, UnicodeDecodeError) as exc:
        msg = f"not a readable Parquet file: {exc}"
        raise DumpError(msg, path=source) from exc
    return _parts(record_batch, decode_metadata(table.schema, source), source, validate)


def _check_compression(compression: object) -> str | None:
    if compression is None:
        return None
    choices = get_args(Compression)
    if not isinstance(compression, str):
        msg = (
            f"`compression` must be None or a str, got {type(compression).__name__} "
            f"{compression!r:.40}; expected None (no copy on read) or one of: "
            f"{', '.join(map(repr, choices))}"
        )
        raise mistake("option_type", msg, key="compression")
    if compression not in choices:
        msg = (
            f"invalid `compression`: {compression!r}; expected None (no copy on read) "
            f"or one of: {', '.join(map(repr, choices))} (the Arrow IPC codecs)"
        )
        raise mistake("option_value", msg, key="compression")
    if not pa.Codec.is_available(str(compression)):
        msg = f"this pyarrow build has no {compression!r} codec"
        raise mistake("option_value", msg, key="compression", fix="pass `compression=None`")
    return str(compression)


def _with_metadata(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    compression: str | None,
) -> pa.RecordBatch:
    _refuse_a_part(record_batch, specs, batch_globals)
    schema = record_batch.schema
    ours = encode_metadata(specs, batch_globals, compression)
    fields = [field.with_metadata(field_metadata(specs[field.name], specs)) for field in schema]
    schema = pa.schema(fields, metadata={**(schema.metadata or {}), **ours})
    return pa.RecordBatch.from_arrays(record_batch.columns, schema=schema)


def _refuse_a_part(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
) -> None:
    """Raise DumpError for a per-sample global (``raw_reward``) of other rows than the batch's.

    A slice or a shard's rows keeps its batch's whole value; a file holds a whole batch, whose
    reader checks one value per row (padding rows aside).
    """
    columns = {name: record_batch.column(name) for name in record_batch.schema.names}
    rows = unpadded_samples(record_batch.num_rows, columns, Roles.of(specs).padding)
    for key, value in batch_globals.items():
        held = np.asarray(value).size if specs[key].global_shape == "float_per_sample" else rows
        if held != rows:
            msg = (
                f"batch-global key `{key}` holds {held} values for the {rows} rows of this "
                "batch: a slice, or a shard's rows, keeps its batch's whole value, which a "
                "file cannot hold"
            )
            raise mistake("dump", msg, key=key, fix="write the whole batch")


def _write_atomically(path: PathLike, write: Callable[[pa.NativeFile], None]) -> None:
    """Write ``path`` through a temporary beside it: the old file survives any failure.

    OS errors pass through as ``open``'s do; the temporary is removed first.
    """
    target = as_path("path", path)
    folder, name = os.path.split(target)
    if folder and not os.path.isdir(folder):
        msg = f"cannot write `{target}`: no folder `{folder}`"
        raise FileNotFoundError(2, msg, folder)
    temporary = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: never reuse a file; mode 0o666 lets the umask decide, as for any new file.
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
    try:
        with pa.OSFile(temporary, "wb") as sink:
            write(sink)
        descriptor = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


_OTHER_FORMATS = {  # the first bytes of a file taken for a dump -> what it is, how to read it
    b"PAR1": (
        "a Parquet file (`RolloutBatch.to_parquet`)",
        "read it with `RolloutBatch.read_parquet(path)`",
    ),
    b"ASJ2": (
        "a builder's journal",
        "recover its batch with `RolloutBatchBuilder.recover(folder)` or look at it with "
        "`arrow-split inspect PATH`",
    ),
    b"ASJ1": (
        "a builder's journal (format 1)",
        "recover its batch with `RolloutBatchBuilder.recover(folder)`",
    ),
}


def _read_single_batch(
    mapped: pa.MemoryMappedFile, source: str, *, validate: bool = True
) -> pa.RecordBatch:
    other = _OTHER_FORMATS.get(bytes(mapped.read_at(4, 0)) if mapped.size() >= 4 else b"")
    if other is not None:
        got, fix = other
        raise DumpError(f"not a rollout dump but {got}", path=source, got=got, fix=fix)
    try:
        reader = pa.ipc.open_file(mapped)
        count = reader.num_record_batches
        if count != 1:
            msg = f"{count} record batches; a rollout dump holds exactly one"
            raise DumpError(msg, path=source, got=str(count))
        record_batch = reader.get_batch(0)
        _check_bytes(record_batch, validate)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        msg = f"not a readable Arrow IPC file (truncated, or another format): {exc}"
        raise DumpError(msg, path=source) from exc
    if not record_batch.schema.equals(reader.schema, check_metadata=True):
        msg = "the record batch's schema differs from the file's schema"
        raise DumpError(msg, path=source)
    return record_batch


def _parts(
    record_batch: pa.RecordBatch, metadata: DumpMetadata, source: str, validate: bool
) -> DumpParts:
    """The parts (validated if asked): a version-1 dump's pickles stored once, our metadata gone."""
    schema, specs = record_batch.schema, metadata.specs
    arrays = [
        codec_for(specs[name]).stored(specs[name], column)
        for name, column in zip(schema.names, record_batch.columns, strict=True)
    ]
    fields = [
        field.remove_metadata().with_type(array.type)
        for field, array in zip(schema, arrays, strict=True)
    ]
    schema = pa.schema(fields, metadata.kept or None)
    record_batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    parts = DumpParts(
        record_batch, MappingProxyType(specs), MappingProxyType(metadata.batch_globals)
    )
    if not validate:
        return parts
    try:
        check_content(*parts)
    except ArrowSplitError as exc:
        # the rule's own error, with its sample and position, is the cause (`__cause__`)
        msg = f"the content breaks a rule of the library: {exc}"
        fix = (
            "the file was edited, crafted or written by a broken producer (read it with "
            "`validate=False` only to inspect it)"
        )
        raise DumpError(msg, path=source, key=exc.key, fix=fix) from exc
    return parts


def _existing(path: object, what: str) -> str:
    source = as_path("path", path)
    if not os.path.exists(source):
        msg = f"no {what} at `{source}`"
        raise FileNotFoundError(2, msg, source)
    if os.path.isdir(source):  # never read as a dataset of the files it holds
        raise DumpError(f"a folder, not a {what}", path=source, got="a folder")
    return source


def _check_bytes(record_batch: pa.RecordBatch, validate: bool) -> None:
    """Check offsets and UTF-8 (values with ``validate``, names always) once, at every read.

    No later read can then leave the buffers or meet a bad byte (raises ``pa.ArrowException``,
    ``UnicodeDecodeError``: the caller makes them a DumpError naming its file).
    """
    record_batch.validate(full=validate)
    _decode_names(record_batch.schema)


def _decode_names(schema: pa.Schema) -> None:
    """Decode every field name now (pyarrow decodes them lazily, raising on bad UTF-8)."""
    fields = list(schema)
    while fields:
        field = fields.pop()
        field.name  # noqa: B018 - the access decodes the name
        fields.extend(field.type.field(i) for i in range(field.type.num_fields))
