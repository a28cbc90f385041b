"""RecordBatch + plan -> shards, by Arrow ``take``; one rank's shard alone.

There is one implementation of the split: :func:`take_rows` gathers a set of rows into a new,
compact record batch (fresh buffers, never a slice view of the parent, so pickling a shard ships
only its own bytes). :func:`split_train_data_by_dp_raw` applies it to every rank of a plan;
:func:`shard_for_rank` applies it to one rank and never touches the other ranks' rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from arrow_split.batch import RolloutBatch
from arrow_split.errors import PlanError, SchemaError
from arrow_split.partition import (
    check_dp_rank,
    check_dp_size,
    partition_for_rank,
    plan_partitions,
)
from arrow_split.take import take_record_batch

__all__ = ["as_rollout_batch", "shard_for_rank", "split_train_data_by_dp_raw", "take_rows"]


def as_rollout_batch(data_or_batch: RolloutBatch | Mapping[str, Any]) -> RolloutBatch:
    """Return a RolloutBatch as it is, or build one from a train-data dict."""
    if isinstance(data_or_batch, RolloutBatch):
        return data_or_batch
    if isinstance(data_or_batch, Mapping):
        return RolloutBatch.from_train_data(data_or_batch)
    msg = (
        "expected a train-data dict or a RolloutBatch, got "
        f"{type(data_or_batch).__name__}; build one with `RolloutBatch.from_train_data(data)`"
    )
    raise SchemaError(msg)


def _check_indices(indices: np.ndarray, num_samples: int) -> np.ndarray:
    rows = np.asarray(indices)
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        msg = f"`indices` must be a 1-D array of row numbers, got shape {rows.shape} {rows.dtype}"
        raise PlanError(msg)
    rows = rows.astype(np.int64, copy=False)
    if rows.size and (rows.min() < 0 or rows.max() >= num_samples):
        bad = rows[(rows < 0) | (rows >= num_samples)][0]
        msg = f"`indices` holds row {bad}, outside [0, {num_samples}) for this batch"
        raise PlanError(msg)
    return rows


def take_rows(batch: RolloutBatch, indices: np.ndarray) -> RolloutBatch:
    """Gather ``indices`` (rows of ``batch``) into a shard with fresh, compact buffers.

    The shard's ``partition`` maps each row to the row of the original whole batch, and it keeps
    the whole batch's total lengths.
    """
    indices = _check_indices(indices, batch.num_samples)
    record_batch = take_record_batch(batch.record_batch, indices)
    partition = indices if batch.partition is None else batch.partition[indices]
    return batch.replace(
        record_batch=record_batch,
        partition=partition,
        batch_total_lengths=batch.batch_total_lengths,
    )


def split_train_data_by_dp_raw(
    data_or_batch: RolloutBatch | Mapping[str, Any], dp_size: int, *, balance_data: bool
) -> list[RolloutBatch]:
    """Split a batch into ``dp_size`` shards, one per data-parallel rank.

    Parameters
    ----------
    data_or_batch
        A train-data dict (converted with :meth:`RolloutBatch.from_train_data`) or a RolloutBatch.
    dp_size
        The number of data-parallel ranks.
    balance_data
        ``False``: rank ``r`` gets rows ``r, r + dp_size, ...``. ``True``: Karmarkar-Karp
        partitions of equal size balanced by total length (see :func:`plan_partitions`).

    Returns
    -------
    list of RolloutBatch
        Shard ``r`` holds rank ``r``'s rows in plan order; ``shard.partition`` maps them back.
    """
    check_dp_size(dp_size)
    batch = as_rollout_batch(data_or_batch)
    plan = plan_partitions(batch.total_lengths, dp_size, balance_data=balance_data)
    return [take_rows(batch, indices) for indices in plan]


def shard_for_rank(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool,
) -> RolloutBatch:
    """Rank ``dp_rank``'s shard, as ``split_train_data_by_dp_raw(...)[dp_rank]``, alone.

    The plan is computed from the ``tokens`` offsets alone; no other rank's rows are gathered,
    converted or copied.
    """
    check_dp_rank(dp_rank, check_dp_size(dp_size))
    batch = as_rollout_batch(data_or_batch)
    indices = partition_for_rank(batch.total_lengths, dp_rank, dp_size, balance_data=balance_data)
    return take_rows(batch, indices)
