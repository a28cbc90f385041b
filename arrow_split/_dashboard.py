"""miles' dashboard columns file, written from a batch: ``dashboard_columns/rollout_{id}.parquet``.

miles' ``--save-debug-rollout-data`` writes, beside its debug dump, one Parquet file per rollout
that its dashboard opens: ``sample_index``, ``response_length`` and ``total_length`` (int32),
``tokens`` (list<int32>), ``loss_mask`` (list<int8>) and ``rollout_log_probs``
(list<float32>), in row groups of 8 rows. This writes the same file from a batch or a dump, so
the dashboard opens arrow_split's steps too. A column the batch lacks is written as nulls.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from arrow_split._args import as_int, as_path
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.batch._dump import _write_atomically
from arrow_split.errors import DumpError

__all__ = ["DASHBOARD_SCHEMA", "write_dashboard_columns"]

DASHBOARD_SCHEMA = pa.schema(
    [
        ("sample_index", pa.int32()),
        ("response_length", pa.int32()),
        ("total_length", pa.int32()),
        ("tokens", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())),
        ("rollout_log_probs", pa.list_(pa.float32())),
    ]
)
"""The file's columns and types, as miles writes them."""

_ROW_GROUP = 8
# The batch's key of each dashboard column (the per-token ones cast to the file's types).
_SOURCES = {
    "sample_index": "sample_indices",
    "response_length": "response_lengths",
    "tokens": "tokens",
    "loss_mask": "loss_masks",
    "rollout_log_probs": "rollout_log_probs",
}


def write_dashboard_columns(
    batch: RolloutBatch, folder: str | os.PathLike[str], rollout_id: int
) -> str:
    """Write ``folder/dashboard_columns/rollout_{rollout_id}.parquet``; return its path.

    ``sample_index`` is the batch's ``sample_indices`` (the row number without them); a key the
    batch lacks (``loss_masks``, ``rollout_log_probs``) is a column of nulls. The file is
    written atomically (a temporary name, then a rename): a failed write leaves no file.

    Raises
    ------
    SchemaTypeError
        ``batch`` is not a RolloutBatch (a shard: ``shard.rows``).
    OptionTypeError, OptionError
        ``rollout_id`` is not a non-negative int, or ``folder`` is not a path.
    DumpError
        A value the file's types cannot hold (an id or length past int32).
    OSError
        Errors of the operating system pass through unwrapped (``PermissionError``, a full
        disk), as :meth:`~arrow_split.RolloutBatch.write`'s do (docs/errors.md).
    """
    check_batch(batch)
    number = as_int("rollout_id", rollout_id, minimum=0)
    root = as_path("folder", folder)
    table = pa.Table.from_batches([dashboard_record_batch(batch)])
    target = os.path.join(root, "dashboard_columns", f"rollout_{number}.parquet")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    _write_atomically(target, lambda sink: pq.write_table(table, sink, row_group_size=_ROW_GROUP))
    return target


def dashboard_record_batch(batch: RolloutBatch) -> pa.RecordBatch:
    """The batch's rows in the dashboard's columns and types."""
    names = set(batch.column_names)
    count = batch.num_samples
    columns: dict[str, pa.Array] = {}
    for name, field in zip(DASHBOARD_SCHEMA.names, DASHBOARD_SCHEMA, strict=True):
        source = _SOURCES.get(name)
        if name == "total_length":
            array: pa.Array = pa.array(batch.total_lengths)
        elif source in names:
            array = batch.column(str(source))
        elif name == "sample_index":
            array = pa.array(np.arange(count, dtype=np.int64))
        else:
            array = pa.nulls(count, field.type)
        columns[name] = _cast(array, field, name)
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=DASHBOARD_SCHEMA)


def _cast(array: pa.Array, field: pa.Field, name: str) -> pa.Array:
    try:
        return array.cast(field.type)  # safe: an overflow or a lossy cast raises
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        msg = (
            f"the dashboard's `{name}` column is {field.type}; the batch's values do not fit: {exc}"
        )
        raise DumpError(msg, key=name, expected=str(field.type)) from None
