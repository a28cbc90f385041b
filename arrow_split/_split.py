"""RecordBatch + Plan -> shards, by a take per column; one rank's shard alone.

This module is the one place rows are gathered: :func:`_gather` takes a set of rows into a new,
compact record batch, each column by its codec (fresh buffers, never a slice view of the parent,
so pickling a shard ships only its own bytes), and wraps it in a :class:`~arrow_split.Shard`.
:func:`take` applies it to one rank of a :class:`~arrow_split.Plan` (never touching the other
ranks' rows), :func:`split` to every rank (the shards share one array of the batch's total
lengths), :func:`take_rows` to any rows. :func:`split_train_data_by_dp_raw` and
:func:`shard_for_rank` are the classic entry points, built on them; the Ray and compat leaves
call these functions and gather nothing themselves.
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
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.errors import (
    OptionError,
    PlanError,
    PlanMismatchError,
    PlanTypeError,
)
from arrow_split.plan import Plan, PlanKey
from arrow_split.shard import Shard

__all__ = [
    "as_rollout_batch",
    "shard_for_rank",
    "split",
    "split_train_data_by_dp_raw",
    "take",
    "take_rows",
]


def as_rollout_batch(data_or_batch: RolloutBatch | Mapping[str, Any]) -> RolloutBatch:
    """Return a RolloutBatch as it is, or build one from a train-data dict."""
    if isinstance(data_or_batch, Mapping):
        return RolloutBatch.from_train_data(data_or_batch)
    return check_batch(data_or_batch, "data_or_batch")


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


def _gather(
    batch: RolloutBatch,
    indices: object,
    partition: np.ndarray | None,
    batch_total_lengths: np.ndarray,
    plan_key: PlanKey | None,
    dp_rank: int | None,
) -> Shard:
    """The one gatherer: ``indices`` of ``batch`` in fresh buffers, as a Shard.

    ``partition`` maps ``batch``'s rows to the whole batch's (``None``: ``batch`` is whole).
    """
    rows = _check_indices(indices, batch.num_samples)
    record_batch = batch.record_batch
    columns = [
        codec_for(batch.specs[name]).take(record_batch.column(name), rows)
        for name in record_batch.schema.names
    ]
    taken = pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)
    return Shard(
        RolloutBatch(taken, batch.specs, batch.batch_globals, trust_objects=batch.trust_objects),
        partition=rows if partition is None else partition[rows],
        batch_total_lengths=batch_total_lengths,
        plan_key=plan_key,
        dp_rank=dp_rank,
    )


def take_rows(source: RolloutBatch | Shard, indices: np.ndarray) -> Shard:
    """Gather ``indices`` (rows of ``source``) into a shard with fresh, compact buffers.

    The shard's ``partition`` maps each row to the row of the original whole batch, and it keeps
    the whole batch's total lengths. Rows taken of a shard keep that shard's plan and rank.
    """
    if isinstance(source, Shard):  # its rows, mapped back to its whole batch
        return _gather(
            source.rows,
            indices,
            source.partition,
            source.batch_total_lengths,
            source.plan_key,
            source.dp_rank,
        )
    batch = check_batch(source)
    return _gather(batch, indices, None, batch.total_lengths, None, None)


def _check_plan(batch: RolloutBatch, plan: object) -> Plan:
    if not isinstance(plan, Plan):
        msg = f"`plan` must be a Plan, got {type(plan).__name__}; make one with `batch.make_plan`"
        raise PlanTypeError(msg)
    if plan.num_samples != batch.num_samples:
        msg = (
            f"the plan is for {plan.num_samples} samples but the batch has "
            f"{batch.num_samples}; plan this batch (`batch.make_plan(dp_size, ...)`)"
        )
        raise PlanError(msg)
    return plan


def take(batch: RolloutBatch, plan: Plan, dp_rank: int) -> Shard:
    """Rank ``dp_rank``'s rows of ``plan``, gathered alone into a shard.

    No other rank's rows are gathered, converted or copied.

    Raises
    ------
    SchemaTypeError
        ``batch`` is not a RolloutBatch (a Shard's rows are ``shard.rows``).
    PlanError, PlanTypeError
        ``plan`` is not a Plan of this batch's sample count, or ``dp_rank`` is out of range.
    """
    batch = check_batch(batch)
    plan = _check_plan(batch, plan)
    rank = check_dp_rank(dp_rank, plan.dp_size)
    return _gather(batch, plan.rows(rank), None, batch.total_lengths, plan.key, rank)


def split(batch: RolloutBatch, plan: Plan) -> list[Shard]:
    """Every rank's shard of ``plan``; the shards share one array of the batch's total lengths.

    Raises
    ------
    SchemaTypeError, PlanError, PlanTypeError
        As :func:`take`.
    """
    batch = check_batch(batch)
    plan = _check_plan(batch, plan)
    lengths = batch.total_lengths  # one read-only array, shared by every shard
    return [
        _gather(batch, rows, None, lengths, plan.key, rank)
        for rank, rows in enumerate(plan.partitions)
    ]


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
        RolloutBatch (to split a shard's rows again, pass ``shard.rows``).
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
    return split(batch, batch.make_plan(dp_size, balance_data=balance_data))


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

    The plan is computed from the length source's offsets (and the adapter slots) alone, as
    :func:`split_train_data_by_dp_raw` computes it (:meth:`RolloutBatch.make_plan`), and the
    rank's rows are taken by :func:`take`: no other rank's rows are gathered, converted or
    copied. A batch that carries the driver's plan (:meth:`RolloutBatch.with_plan`) is checked
    against it and not re-planned.

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
            return take(batch, plan, rank)
    batch = _padded(batch, dp_size, pad_to_dp)
    return take(batch, batch.make_plan(dp_size, balance_data=balance_data), rank)


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
