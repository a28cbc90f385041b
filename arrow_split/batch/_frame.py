"""A batch as a frame, for notebooks: rows, a column by key, previews, polars and pandas, slices.

What users of polars, pandas and Hugging Face ``datasets`` reach for, built on the batch's own
parts: ``batch["tokens"]`` (an Arrow array; a batch-global key gives its value), iteration over
rows as dicts, a short tabular ``repr`` and an HTML one, ``to_polars``/``to_pandas`` of the
per-sample columns (batch-global values stay apart: in ``batch_globals``, and in pandas'
``DataFrame.attrs``), a slice into fresh buffers (concatenation: :mod:`arrow_split.batch._concat`).
"""

from __future__ import annotations

import html
import importlib.util
import reprlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import as_int
from arrow_split._codecs import codec_for
from arrow_split._codecs._base import RunsMemo
from arrow_split._codecs.batch_global import global_to_python
from arrow_split.errors import ArrowSplitError, ColumnNotFoundError, SchemaTypeError
from arrow_split.schema import ColumnSpec

if TYPE_CHECKING:
    import pandas
    import polars

__all__ = [
    "Frame",
    "PREVIEW_ROWS",
    "RolloutBatch",
    "aligned",
    "decode_rows",
    "readable_bytes",
    "slice_rows",
    "take_columns",
]

PREVIEW_ROWS = 5
"""Rows a ``repr`` shows: the first ``PREVIEW_ROWS - 2`` and the last 2 of a longer batch."""


class RolloutBatch(Protocol):
    """What this module reads of a batch (it never imports the batch module: no circle)."""

    @property
    def record_batch(self) -> pa.RecordBatch: ...
    @property
    def specs(self) -> Mapping[str, ColumnSpec]: ...
    @property
    def batch_globals(self) -> Mapping[str, object]: ...
    @property
    def trust_objects(self) -> bool: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def total_lengths(self) -> np.ndarray: ...


_CELL = 22  # characters of one cell in the text preview
_ITEMS = 2  # items of a list a cell shows
_COLUMNS = 6  # columns the previews show; the rest are named
_CHUNK = 256  # rows decoded at a time while iterating
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


class Frame:
    """A batch's or a shard's reads for notebooks: keys, length, rows, previews, polars, pandas.

    What differs between the two is what a subclass overrides: the rows read
    (:meth:`_frame_rows`), the preview's title, the rows' original indices (a shard's
    ``partition``) and a hint added to the error for a missing key.
    """

    __slots__ = ()

    def _frame_rows(self) -> RolloutBatch:
        """The rows read: the batch itself (a shard's: its ``rows``)."""
        return cast("RolloutBatch", self)

    def _frame_title(self) -> str:
        return type(self).__name__

    def _frame_index(self) -> np.ndarray | None:
        """Each row's original index (a shard's ``partition``), or ``None``: its position."""
        return None

    def _key_hint(self, key: object) -> str:
        return ""

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the per-sample columns (``record_batch.schema``)."""
        return self._frame_rows().record_batch.schema

    def __getitem__(self, key: str) -> Any:
        """A per-sample column as an Arrow array, or a batch-global key's value."""
        batch = self._frame_rows()
        if not isinstance(key, str):
            got = f"{type(key).__name__} {key!r:.40}"
            msg = (
                f"a batch is indexed by a key (str), got {got}; for rows "
                "use `batch.slice(offset, length)`, or iterate over the batch"
            )
            raise SchemaTypeError(msg, key="key", got=got)
        if key in batch.record_batch.schema.names:
            return batch.record_batch.column(key)
        if key in batch.specs:
            return batch.batch_globals[key]
        msg = f"no key `{key}`; the batch has: {', '.join(batch.specs)}{self._key_hint(key)}"
        raise ColumnNotFoundError(msg, key=key)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._frame_rows().specs  # a key is a str

    def __len__(self) -> int:
        return self._frame_rows().num_samples

    def __iter__(self) -> Iterator[dict[str, object]]:
        """The rows, each a dict of the per-sample keys' Python values (as ``datasets`` does)."""
        batch = self._frame_rows()
        for start in range(0, batch.num_samples, _CHUNK):  # decoded a chunk at a time
            stop = min(start + _CHUNK, batch.num_samples)
            values = decode_rows(batch, start, stop)
            for row in range(stop - start):
                yield {key: column[row] for key, column in values.items()}

    def to_polars(self) -> polars.DataFrame:
        """The per-sample columns as a polars DataFrame (batch-global values: ``batch_globals``).

        Pickled objects are polars Objects; a shard's original rows are its ``partition``.
        """
        _require("polars", "to_polars", "or use `to_pandas()`, or `record_batch` with pyarrow")
        import polars

        batch = self._frame_rows()
        objects = _object_keys(batch)
        frame = cast(
            "polars.DataFrame", polars.from_arrow(batch.record_batch.drop_columns(objects))
        )
        if objects:
            decoded = decode_rows(batch, 0, batch.num_samples)
            frame = frame.with_columns(
                polars.Series(key, decoded[key], dtype=polars.Object) for key in objects
            )
            frame = frame.select(batch.record_batch.schema.names)
        return frame

    def to_pandas(self) -> pandas.DataFrame:
        """The per-sample columns as a pandas DataFrame, batch-global values in ``df.attrs``.

        A shard's frame is indexed by its ``partition`` (its rows' original indices).
        """
        _require("pandas", "to_pandas", "or use `to_polars()`, or `record_batch` with pyarrow")
        batch = self._frame_rows()
        objects = _object_keys(batch)
        frame = batch.record_batch.drop_columns(objects).to_pandas()
        if objects:
            decoded = decode_rows(batch, 0, batch.num_samples)
            for key in objects:
                frame[key] = decoded[key]
            frame = frame[batch.record_batch.schema.names]
        frame.attrs["batch_globals"] = global_to_python(batch.batch_globals)
        index = self._frame_index()
        if index is not None:
            frame.index = index
            frame.index.name = "partition"
        return frame

    def __repr__(self) -> str:
        batch = self._frame_rows()
        header, body, hidden = _table(batch, self._frame_index())
        lines = [f"{self._frame_title()}: {_summary(batch)}", *aligned([header, *body])]
        if hidden:
            rest = batch.record_batch.schema.names[-hidden:]
            lines.append(f"… and {hidden} more columns: {', '.join(rest)}")
        if globals_ := _global_keys(batch):
            lines.append(f"batch globals: {', '.join(globals_)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        batch = self._frame_rows()
        header, body, hidden = _table(batch, self._frame_index())
        escape = html.escape
        head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
        rows = "".join(
            "<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in body
        )
        notes = [f"… and {hidden} more columns"] if hidden else []
        if globals_ := _global_keys(batch):
            notes.append(f"batch globals: {', '.join(globals_)}")
        footer = "".join(f"<small>{escape(note)}</small><br>" for note in notes)
        return (
            f"<div><b>{escape(self._frame_title())}</b>: {escape(_summary(batch))}"
            f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{footer}</div>"
        )


def _require(module: str, method: str, instead: str) -> None:
    """Raise ImportError, saying what to install, where ``module`` is not installed."""
    if importlib.util.find_spec(module) is None:
        msg = (
            f"`{method}` needs {module}, which is not installed; install it with "
            f"`pip install {module}` ({instead})"
        )
        raise ImportError(msg)


def decode_rows(
    batch: RolloutBatch, start: int, stop: int, *, shown: bool = False
) -> dict[str, list[object]]:
    """The per-sample values of rows ``start:stop`` as Python objects, by key.

    ``shown``: for a preview, which never raises: a column that does not decode (an untrusted
    pickle of a file) shows the error's name in each of its cells instead.
    """
    record_batch = batch.record_batch.slice(start, stop - start)
    values: dict[str, list[object]] = {}
    for key in record_batch.schema.names:
        spec = batch.specs[key]
        column = record_batch.column(key)
        try:
            values[key] = codec_for(spec).decode_read(
                spec, column, trust_objects=batch.trust_objects
            )
        except ArrowSplitError as exc:
            if not shown:
                raise
            values[key] = [_Undecoded(type(exc).__name__)] * len(column)
    return values


class _Undecoded:
    """A preview's cell of a value that does not decode (its repr names why)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<{self.reason}>"


def _preview(batch: RolloutBatch) -> tuple[list[int], dict[str, list[object]]]:
    """The rows a repr shows and their values (every key, so pickles decode only there)."""
    count = batch.num_samples
    if count <= PREVIEW_ROWS:
        return list(range(count)), decode_rows(batch, 0, count, shown=True)
    head, tail = PREVIEW_ROWS - 2, 2
    first = decode_rows(batch, 0, head, shown=True)
    last = decode_rows(batch, count - tail, count, shown=True)
    values = {key: [*first[key], *last[key]] for key in first}
    return [*range(head), *range(count - tail, count)], values


def _short(value: object) -> str:
    if isinstance(value, float):
        text = repr(value)
        return text if len(text) <= 8 else f"{value:.4g}"
    if isinstance(value, list | tuple):
        return (
            "["
            + ", ".join(_short(element) for element in value[:_ITEMS])
            + (", …]" if len(value) > _ITEMS else "]")
        )
    return _CELL_REPR.repr(value)


class _CellRepr(reprlib.Repr):
    """A cell's repr: a long str or bytes cut before its repr is built, a failing repr named."""

    def repr_str(self, value: str, level: int) -> str:
        return repr(value[: self.maxstring])

    def repr_bytes(self, value: bytes, level: int) -> str:
        return repr(value[: self.maxstring])

    def repr_instance(self, value: object, level: int) -> str:
        try:
            return repr(value)
        except Exception:  # a preview never raises: a user's class may break its own repr
            return f"<{type(value).__name__}: repr failed>"


_CELL_REPR = _CellRepr()  # Python 3.10's takes no arguments
_CELL_REPR.maxlevel, _CELL_REPR.maxstring = 3, _CELL


def _cell(value: object) -> str:
    """A value in at most ``_CELL`` characters: a list shows its first items and its length."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    text = _short(value)
    if isinstance(value, list | tuple) and len(value) > _ITEMS:
        text += f" ({len(value)})"
    return text if len(text) <= _CELL else text[: _CELL - 1] + "…"


def readable_bytes(nbytes: int) -> str:
    """Bytes as a person reads them: ``512 B``, ``16.8 KiB``, ``3.2 MiB``, up to ``TiB``."""
    size, unit = float(nbytes), 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{nbytes} B" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


def aligned(rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> list[str]:
    """Rows of cells as lines of aligned columns, two spaces apart (``right``: right-aligned)."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if column in right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def _summary(batch: RolloutBatch) -> str:
    tokens = int(batch.total_lengths.sum())
    columns = len(batch.record_batch.schema.names)
    size = readable_bytes(batch.nbytes)
    return f"{batch.num_samples} samples, {columns} columns, {tokens} tokens, {size}"


def _table(batch: RolloutBatch, index: np.ndarray | None) -> tuple[list[str], list[list[str]], int]:
    """The preview's header, its rows of cells, and the number of columns left out."""
    rows, values = _preview(batch)
    names = list(values)[:_COLUMNS]
    header = ["#" if index is None else "row", *names]
    body = [
        [str(row if index is None else int(index[row])), *(_cell(values[n][i]) for n in names)]
        for i, row in enumerate(rows)
    ]
    if batch.num_samples > PREVIEW_ROWS:
        body.insert(PREVIEW_ROWS - 2, ["…"] * len(header))
    return header, body, len(values) - len(names)


def _global_keys(batch: RolloutBatch) -> list[str]:
    return [key for key, spec in batch.specs.items() if not spec.is_per_sample]


def _object_keys(batch: RolloutBatch) -> list[str]:
    """Per-sample keys stored as pickles (each distinct one once, a dictionary array)."""
    record_batch = batch.record_batch
    return [
        name
        for name, array in zip(record_batch.schema.names, record_batch.columns, strict=True)
        if pa.types.is_dictionary(array.type)
    ]


def slice_rows(batch: RolloutBatch, offset: object, length: object) -> np.ndarray:
    """The rows ``offset : offset + length`` as int64 indices, clipped to the batch.

    A negative ``offset`` counts from the end, as in Python; ``length`` is ``None`` (to the
    end) or an int >= 0. Raises OptionTypeError (not an int) or OptionError (``length < 0``).
    """
    count = batch.num_samples
    start = slice(as_int("offset", offset), None).indices(count)[0]
    stop = count if length is None else min(start + as_int("length", length, minimum=0), count)
    indices = np.arange(start, stop, dtype=np.int64)
    indices.flags.writeable = False
    return indices


def take_columns(batch: RolloutBatch, indices: np.ndarray) -> pa.RecordBatch:
    """``batch``'s rows ``indices`` gathered by each column's codec into fresh buffers."""
    memo: RunsMemo = {}
    record_batch = batch.record_batch
    columns = [
        codec_for(batch.specs[name]).take(array, indices, memo)
        for name, array in zip(record_batch.schema.names, record_batch.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)
