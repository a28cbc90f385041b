"""RecordBatch + Plan -> shards, by a take per column; one rank's shard alone.

There is one implementation of the split: :func:`take_rows` gathers a set of rows into a new,
compact record batch, each column by its codec (fresh buffers, never a slice view of the parent,
so pickling a shard ships only its own bytes). :func:`split_train_data_by_dp_raw` applies it to
every rank of a plan; :func:`shard_for_rank` applies it to one rank and never touches the other
ranks' rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._args import (
    as_flag,
    as_index_array,
    check_dp_rank,
    check_dp_size,
    describe,
    method_of,
)
from arrow_split._codecs import codec_for
from arrow_split._pad import pad_to_dp
from arrow_split.batch import RolloutBatch, Shard
from arrow_split.errors import (
    OptionError,
    PlanError,
    PlanMismatchError,
    PlanTypeError,
    SchemaTypeError,
)
from arrow_split.plan import (
    Plan,
    PlanKey,
    partition_for_rank,
    plan_fingerprint,
)

__all__ = [
    "as_rollout_batch",
    "shard_for_rank",
    "split_train_data_by_dp_raw",
    "take_rows",
]


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
    raise SchemaTypeError(msg)


def _check_indices(indices: object, num_samples: int) -> np.ndarray:
    try:
        rows = as_index_array("indices", indices)
    except OptionError as exc:
        got = (
            f"shape {indices.shape} {indices.dtype}"
            if isinstance(indices, np.ndarray)
            else describe(indices)
        )
        msg = f"`indices` must be a 1-D array of row numbers, got {got}; {exc}"
        raise PlanError(msg) from None
    if rows.size and (rows.min() < 0 or rows.max() >= num_samples):
        bad = rows[(rows < 0) | (rows >= num_samples)][0]
        msg = f"`indices` holds row {bad}, outside [0, {num_samples}) for this batch"
        raise PlanError(msg)
    return rows


def _take_record_batch(batch: RolloutBatch, indices: np.ndarray) -> pa.RecordBatch:
    record_batch = batch.record_batch
    columns = [
        codec_for(batch.specs[name]).take(record_batch.column(name), indices)
        for name in record_batch.schema.names
    ]
    return pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)


def take_rows(batch: RolloutBatch, indices: np.ndarray) -> Shard:
    """Gather ``indices`` (rows of ``batch``) into a shard with fresh, compact buffers.

    The shard's ``partition`` maps each row to the row of the original whole batch, and it keeps
    the whole batch's total lengths. Rows taken of a shard keep that shard's plan and rank.
    """
    if isinstance(batch, Shard):
        return _take(batch, indices, batch.plan_key, batch.dp_rank)
    if not isinstance(batch, RolloutBatch):
        msg = (
            f"`batch` must be a RolloutBatch, got {type(batch).__name__}; build one with "
            "`RolloutBatch.from_train_data(data)`"
        )
        raise SchemaTypeError(msg)
    return _take(batch, indices, None, None)


def _take(
    batch: RolloutBatch, indices: object, plan_key: PlanKey | None, dp_rank: int | None
) -> Shard:
    indices = _check_indices(indices, batch.num_samples)
    partition = batch.partition[indices] if isinstance(batch, Shard) else indices
    return Shard(
        _take_record_batch(batch, indices),
        batch.specs,
        batch.batch_globals,
        partition=partition,
        batch_total_lengths=batch.batch_total_lengths,
        plan_key=plan_key,
        dp_rank=dp_rank,
    )


def split_train_data_by_dp_raw(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    pad_to_dp: bool = False,
) -> list[Shard]:
    """Split a batch into ``dp_size`` shards, one per data-parallel rank.

    Parameters
    ----------
    data_or_batch
        A train-data dict (converted with :meth:`RolloutBatch.from_train_data`) or a
        RolloutBatch (a shard is split again: its shards map back to the whole batch).
    dp_size
        The number of data-parallel ranks.
    balance_data
        ``False``: rank ``r`` gets rows ``r, r + dp_size, ...``. ``True``: Karmarkar-Karp
        partitions of equal size balanced by total length (see :func:`plan_partitions`).
        Either way, a batch with adapter slots has each rank's rows stably sorted by slot.
    pad_to_dp
        First add the fewest padding rows that make the batch a multiple of ``dp_size``
        (:func:`arrow_split.pad_to_dp`: zero loss mask, ``sample_indices`` -1, ``is_padding``
        true), so that a balanced split of any size works.

    Returns
    -------
    list of Shard
        Shard ``r`` holds rank ``r``'s rows in plan order; ``shard.partition`` maps them back,
        ``shard.plan_fingerprint`` is the same on every shard.
    """
    check_dp_size(dp_size)
    method_of(balance_data)
    batch = _padded(as_rollout_batch(data_or_batch), dp_size, pad_to_dp)
    plan = batch.make_plan(dp_size, balance_data=balance_data)
    return [_take(batch, rows, plan.key, rank) for rank, rows in enumerate(plan.partitions)]


def shard_for_rank(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None,
    resplit: bool = False,
    pad_to_dp: bool = False,
) -> Shard:
    """Rank ``dp_rank``'s shard, as ``split_train_data_by_dp_raw(...)[dp_rank]``, alone.

    The plan is computed from the length source's offsets (and the adapter slots) alone; no
    other rank's rows are gathered, converted or copied. A batch that carries the driver's plan
    (:meth:`RolloutBatch.with_plan`) is checked against it and not re-planned.

    Parameters
    ----------
    data_or_batch, dp_size
        As for :func:`split_train_data_by_dp_raw`.
    dp_rank
        The rank whose shard to take, in ``[0, dp_size)``.
    balance_data
        The plan's method; ``None`` follows the plan the batch carries (an error if it has none).
    resplit
        Only for a batch that carries a plan: allow a ``dp_size`` other than the plan's (the
        batch is planned again for the new size, e.g. after a rank was lost). Without it a
        different ``dp_size`` is a :class:`PlanMismatchError`.
    pad_to_dp
        As for :func:`split_train_data_by_dp_raw`: pad the batch to a multiple of ``dp_size``
        first (every rank pads the same way). A batch that carries a plan for this ``dp_size``
        was padded, if at all, before it was planned, and is taken as it is.

    Raises
    ------
    PlanMismatchError
        The batch carries a plan of another method, or of another ``dp_size`` without
        ``resplit=True``.
    """
    rank = check_dp_rank(dp_rank, check_dp_size(dp_size))
    if not isinstance(resplit, (bool, np.bool_)):
        msg = f"`resplit` must be a bool, got {type(resplit).__name__}"
        raise PlanTypeError(msg)
    as_flag("pad_to_dp", pad_to_dp)
    batch = as_rollout_batch(data_or_batch)
    plan = batch.plan
    if balance_data is None:
        if plan is None:
            msg = (
                "`balance_data` is None but the batch carries no plan to follow; pass "
                "`balance_data=True` or `False`, as the driver did"
            )
            raise PlanError(msg)
        balance_data = plan.method == "balanced"
    method = method_of(balance_data)
    if plan is not None:
        _check_against(plan, method, int(dp_size), resplit)
        if plan.dp_size == dp_size:
            return _take(batch, plan.rows(rank), plan.key, rank)
    batch = _padded(batch, dp_size, pad_to_dp)
    order_by = batch.role_values("adapter_slot")
    lengths = batch.total_lengths
    rows = partition_for_rank(lengths, rank, dp_size, balance_data=balance_data, order_by=order_by)
    fingerprint = plan_fingerprint(lengths, dp_size, balance_data=balance_data, order_by=order_by)
    return _take(batch, rows, PlanKey(method, int(dp_size), fingerprint), rank)


def _padded(batch: RolloutBatch, dp_size: int, pad: object) -> RolloutBatch:
    """The batch padded to a multiple of ``dp_size`` when ``pad`` is true (a whole batch only)."""
    if not as_flag("pad_to_dp", pad):
        return batch
    return pad_to_dp(batch, dp_size)


def _check_against(plan: Plan, method: str, dp_size: int, resplit: bool) -> None:
    """Raise unless a rank's request matches the plan the batch was put with."""
    if plan.method != method:
        msg = (
            f"this rank asks for a {method} plan (`balance_data={method == 'balanced'}`) but the "
            f"batch was put with a {plan.method} plan (`balance_data="
            f"{plan.method == 'balanced'}`, fingerprint {plan.fingerprint}); pass the same "
            "`balance_data` on every rank as on the driver"
        )
        raise PlanMismatchError(msg)
    if plan.dp_size != dp_size and not resplit:
        msg = (
            f"this rank asks for `dp_size={dp_size}` but the batch was put for "
            f"`dp_size={plan.dp_size}` (fingerprint {plan.fingerprint}); pass `resplit=True` to "
            "split it again for the new size (e.g. after losing a rank), or fix `dp_size`"
        )
        raise PlanMismatchError(msg)
