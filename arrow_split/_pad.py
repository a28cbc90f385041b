"""Padding to the data-parallel size: the fewest rows that make a batch split evenly.

miles #2694 (``postprocess_rollout_data(..., pad_to_dp=True)``) lets a rollout whose sample count
does not divide ``dp_size`` be split balanced: it appends copies of the last sample that count
for nothing. :func:`pad_to_dp` does the same on a :class:`~arrow_split.RolloutBatch`, once,
before planning:

- ``(-num_samples) % dp_size`` rows are added (at most ``dp_size - 1``), each a copy of the
  batch's last row, except the keys of :data:`arrow_split.schema.PADDING_VALUES` (a zero loss
  mask, ``sample_indices`` -1, ``rollout_ids`` -1, ``rollout_mask_sums`` 0);
- the batch gains the per-sample flag ``is_padding`` (the column with the ``padding`` role),
  true on the added rows, so every rank can tell them apart (``shard.to_train_data()`` and
  :func:`arrow_split.torch.to_tensors` carry it; ``sample_indices == -1`` says the same where the
  batch has sample indices);
- batch statistics leave them out: ``raw_reward`` keeps one value per real sample (the rule of
  a per-sample batch-global value is one value per row that is not padding).

A batch that already divides ``dp_size`` only gains the (all false) flag, so that every step of
a run has the same columns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from arrow_split._args import check_dp_size
from arrow_split._codecs import codec_for, numpy_view, ragged_values
from arrow_split.batch import RolloutBatch
from arrow_split.errors import SchemaTypeError
from arrow_split.schema import KNOWN_COLUMNS, PADDING_VALUES, ColumnSpec, role_column

__all__ = ["pad_to_dp"]

# The column the schema declares with the ``padding`` role (``is_padding``).
_MARKER = next(name for name, spec in KNOWN_COLUMNS.items() if spec.role == "padding")


def pad_to_dp(batch: RolloutBatch, dp_size: int) -> RolloutBatch:
    """The batch with the fewest padding rows that make its size a multiple of ``dp_size``.

    Parameters
    ----------
    batch
        A whole batch (not a shard: pad before splitting).
    dp_size
        The number of data-parallel ranks.

    Returns
    -------
    RolloutBatch
        A new batch (``batch`` is unchanged) of ``ceil(n / dp_size) * dp_size`` rows whose
        ``is_padding`` column marks the added rows; see the module docstring for their values.
        It carries no plan: plan it afterwards.

    Raises
    ------
    PlanError, PlanTypeError
        A bad ``dp_size``.
    SchemaTypeError
        ``batch`` is not a whole RolloutBatch.
    """
    size = check_dp_size(dp_size)
    if type(batch) is not RolloutBatch:
        msg = (
            f"`pad_to_dp` pads a whole RolloutBatch before it is split, got "
            f"{type(batch).__name__}; build one with `RolloutBatch.from_train_data(data)`"
        )
        raise SchemaTypeError(msg)
    num_samples = batch.num_samples
    deficit = -num_samples % size
    marker = role_column(batch.specs, "padding")
    if deficit == 0 and marker is not None:
        return batch
    record_batch = batch.record_batch
    specs = dict(batch.specs)
    if deficit:
        rows = np.concatenate(
            [np.arange(num_samples, dtype=np.int64), np.full(deficit, num_samples - 1, np.int64)]
        )
        record_batch = _take(record_batch, specs, rows)
    if marker is None:
        marker = _MARKER
        specs[marker] = KNOWN_COLUMNS[marker]
        flags = pa.array(np.zeros(record_batch.num_rows, dtype=np.bool_), type=pa.bool_())
        record_batch = record_batch.append_column(marker, flags)
    columns = {name: record_batch.column(name) for name in record_batch.schema.names}
    for name, value in PADDING_VALUES.items():
        if name in columns:
            columns[name] = _fill_rows(specs[name], columns[name], num_samples, value)
    names = list(columns)
    padded = pa.RecordBatch.from_arrays([columns[name] for name in names], names=names)
    return RolloutBatch(padded, specs, batch.batch_globals, trust_objects=batch.trust_objects)


def _take(
    record_batch: pa.RecordBatch, specs: dict[str, ColumnSpec], rows: np.ndarray
) -> pa.RecordBatch:
    columns = [
        codec_for(specs[name]).take(record_batch.column(name), rows)
        for name in record_batch.schema.names
    ]
    return pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)


def _fill_rows(spec: ColumnSpec, array: pa.Array, start: int, value: int) -> pa.Array:
    """``array`` with every value of the rows from ``start`` on set to ``value``."""
    if start >= len(array):
        return array
    if codec_for(spec).tensor_role == "ragged":
        values, offsets = ragged_values(array)
        filled = values.copy()
        filled[offsets[start] :] = value
        child = pa.array(filled, type=array.type.value_type)
        return pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), child)
    filled = np.array(numpy_view(array), copy=True)
    filled[start:] = value
    return pa.array(filled, type=array.type)
