"""A text summary of a rollout batch or a dump, for a person to read (``arrow-split inspect``).

Counts, bytes per column, a histogram of the response lengths, the float columns' statistics,
the batch-global keys, and both methods' plan fingerprints for a few ``dp_size`` values, so that
a dump can be matched with the plans a training run logged (docs/dumps.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from arrow_split import PlanError, RolloutBatch, plan_fingerprint
from arrow_split._args import as_flag, check_positive_int, describe
from arrow_split._codecs._base import short_type
from arrow_split.batch import check_batch
from arrow_split.batch._dump import PathLike, read_dump
from arrow_split.batch._frame import aligned, readable_bytes
from arrow_split.errors import mistake
from arrow_split.schema import KNOWN_COLUMNS, role_column

__all__ = ["inspect_path", "summarize"]

_BINS = 10
_BAR_WIDTH = 40


def summarize(
    batch: RolloutBatch, *, dp_sizes: Iterable[int] = (8, 64), balance_data: bool = True
) -> str:
    """Return a multi-line text summary of ``batch`` (of a shard: ``shard.rows``).

    ``dp_sizes``: whose plan fingerprints are shown (both methods each); ``balance_data``: the
    method in use, whose fingerprints are marked ``*``.

    Raises
    ------
    SchemaTypeError
        ``batch`` is not a RolloutBatch.
    PlanTypeError, PlanError
        ``dp_sizes`` is not a collection of positive ints (each as ``dp_size`` at every door).
    OptionTypeError
        ``balance_data`` is not a bool.
    """
    batch = check_batch(batch)
    sizes = _check_dp_sizes(dp_sizes)
    balance_data = as_flag("balance_data", balance_data)
    lengths = batch.total_lengths
    real = _real_rows(batch)
    sections = [
        _overview(batch, lengths, real),
        _column_table(batch),
        _histogram(*_response_lengths(batch, lengths, real)),
        _globals_table(batch),
        _fingerprints(lengths, sizes, balance_data),
    ]
    return "\n\n".join(sections) + "\n"


def inspect_path(
    path: PathLike, dp_sizes: Iterable[int] = (8, 64), *, balance_data: bool = True
) -> str:
    """Read a dump (:meth:`~arrow_split.RolloutBatch.read`) and summarize it, file facts first.

    Raises ``FileNotFoundError`` or ``DumpError`` as :meth:`~arrow_split.RolloutBatch.read`, and
    what :func:`summarize` raises.
    """
    sizes = _check_dp_sizes(dp_sizes)
    balance_data = as_flag("balance_data", balance_data)
    parts, info = read_dump(path)  # checked: trusted now (as `RolloutBatch.read` makes them)
    batch = RolloutBatch._make(*parts, trust_objects=False)  # a file's objects never decode here
    header = (
        f"file: {info.path}\n"
        f"  {readable_bytes(info.file_bytes)} on disk, dump format {info.dump_version}, written by "
        f"arrow_split {info.library_version}, compression: {info.compression or 'none'}"
    )
    return f"{header}\n\n{summarize(batch, dp_sizes=sizes, balance_data=balance_data)}"


def _check_dp_sizes(dp_sizes: Iterable[int]) -> tuple[int, ...]:
    if isinstance(dp_sizes, (str, bytes)) or not isinstance(dp_sizes, Iterable):
        got = describe(dp_sizes)
        raise mistake("plan_type", key="dp_sizes", expected="a list of positive ints", got=got)
    return tuple(check_positive_int("dp_sizes", size) for size in dp_sizes)


def _real_rows(batch: RolloutBatch) -> np.ndarray:
    """Which rows are samples: the rows pad_to_dp added never enter the statistics."""
    flags = batch.role_values("padding")
    return np.ones(batch.num_samples, np.bool_) if flags is None else ~np.asarray(flags, np.bool_)


def _overview(batch: RolloutBatch, lengths: np.ndarray, real: np.ndarray) -> str:
    padding = "" if real.all() else f" ({int((~real).sum()):,} padding rows left out)"
    lengths = lengths[real]
    lines = [
        f"rollout batch: {batch.num_samples:,} samples, {len(batch.column_names)} "
        f"columns, {len(batch.batch_globals)} batch-global keys, {readable_bytes(batch.nbytes)}",
        f"tokens: {int(lengths.sum()):,} in all; per sample {_stats(lengths)}{padding}",
    ]
    for name in batch.column_names:  # one number per sample, a float: rewards, scores...
        column = batch.column(name)
        if pa.types.is_floating(column.type) and len(column):
            values = np.asarray(column.to_numpy(zero_copy_only=False), np.float64)[real]
            if not values.size:
                continue
            lines.append(
                f"{name}: mean {values.mean():.4g}, std {values.std():.4g} (population), "
                f"min {values.min():.4g}, max {values.max():.4g}"
            )
    return "\n".join(lines)


def _stats(values: np.ndarray) -> str:
    if values.size == 0:
        return "none (empty batch)"
    return f"mean {values.mean():,.1f}, min {int(values.min()):,}, max {int(values.max()):,}"


def _column_table(batch: RolloutBatch) -> str:
    total = max(batch.nbytes, 1)
    rows = [("column", "kind", "arrow type", "bytes", "share")]
    for name in batch.column_names:
        column = batch.column(name)
        kind = batch.specs[name].kind if name in batch.specs else "?"
        share = f"{100 * column.nbytes / total:.1f}%"
        rows.append((name, kind, short_type(column.type), readable_bytes(column.nbytes), share))
    rows.append(("total", "", "", readable_bytes(batch.nbytes), ""))
    return "bytes per column\n" + _table(rows, right=(3, 4))


def _response_lengths(
    batch: RolloutBatch, lengths: np.ndarray, real: np.ndarray
) -> tuple[str, np.ndarray]:
    name = role_column(batch.specs, "response_length")
    if name is not None:
        values = batch.column(name).to_numpy(zero_copy_only=False)
        return "response lengths", np.asarray(values, dtype=np.int64)[real]
    missing = role_column(KNOWN_COLUMNS, "response_length")
    return f"total lengths (no `{missing}` column)", lengths[real]


def _histogram(title: str, values: np.ndarray) -> str:
    if values.size == 0:
        return f"{title}: no samples"
    low, high = int(values.min()), int(values.max())
    width = max(1, -(-(high - low + 1) // _BINS))
    counts = np.bincount((values - low) // width, minlength=1)
    peak = int(counts.max())
    rows = []
    for index, count in enumerate(counts.tolist()):
        start = low + index * width
        bar = "#" * max(int(count > 0), round(_BAR_WIDTH * count / peak))
        rows.append((f"[{start:,}, {start + width:,})", bar, f"{count:,}"))
    return f"{title} ({len(counts)} bins)\n" + _table(rows, right=(2,))


def _globals_table(batch: RolloutBatch) -> str:
    if not batch.batch_globals:
        return "batch-global keys: none"
    rows = [(key, _describe(value)) for key, value in batch.batch_globals.items()]
    return "batch-global keys\n" + _table(rows, right=())


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        if value.size == 0:
            return f"{value.dtype}[0]"
        return f"{value.dtype}[{value.size:,}], mean {value.mean():.4g}"
    if isinstance(value, list):
        text = repr(value)
        return f"list of {len(value)}: {text if len(text) <= 60 else text[:57] + '...'}"
    return f"{type(value).__name__} {value!r}"


def _fingerprints(lengths: np.ndarray, sizes: Sequence[int], balance_data: bool) -> str:
    if not sizes:
        return "plan fingerprints: no `dp_size` given"
    in_use, other = ("balanced", "strided") if balance_data else ("strided", "balanced")
    rows = [("dp_size", "method", "fingerprint")]
    for size in sizes:
        for name, method in ((f"{in_use}*", in_use), (other, other)):
            try:
                fingerprint = plan_fingerprint(lengths, size, balance_data=method == "balanced")
            except PlanError as exc:
                fingerprint = f"cannot plan: {exc}"
            rows.append((str(size), name, fingerprint))
    return "plan fingerprints (* the method in use)\n" + _table(rows, right=(0,))


def _table(rows: Sequence[Sequence[str]], *, right: Sequence[int]) -> str:
    return "\n".join(f"  {line}" for line in aligned(rows, right))
