"""The split's public doors: parse the arguments once, plan, and gather by :meth:`Shard._take`.

With ``pad_to_dp=True`` each rank's gather makes its padding rows: the batch is never copied first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from arrow_split._args import (
    SplitMethod,
    as_flag,
    as_rows,
    check_dp_rank,
    check_dp_size,
    describe,
    method_of,
)
from arrow_split._codecs._base import EncodeOptions
from arrow_split._miles_calls import refuses_miles_calls
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.errors import (
    PlanError,
    PlanMismatchError,
    PlanTypeError,
    mistake,
)
from arrow_split.plan import Plan
from arrow_split.shard import Shard, _gather

__all__ = [
    "as_rollout_batch",
    "pad_to_dp",
    "padded_plan",
    "shard_for_rank",
    "split",
    "split_train_data_by_dp_raw",
    "take",
    "take_rows",
]


def as_rollout_batch(data_or_batch: RolloutBatch | Mapping[str, Any]) -> RolloutBatch:
    """Return a RolloutBatch as it is, or build one from a train-data dict."""
    if isinstance(data_or_batch, RolloutBatch):
        return data_or_batch
    if isinstance(data_or_batch, Mapping):
        return RolloutBatch._encode(data_or_batch, (), EncodeOptions())
    return check_batch(data_or_batch, "data_or_batch")


def _parse_indices(indices: object, num_samples: int) -> np.ndarray:
    rows = as_rows("indices", indices, num_samples)  # a fresh array: frozen, never the caller's
    rows.flags.writeable = False
    return rows


def take_rows(source: RolloutBatch | Shard, indices: np.ndarray) -> Shard:
    """Gather ``indices`` (rows of ``source``) into a shard with fresh, compact buffers.

    ``partition`` maps the rows to the whole batch; rows of a shard keep its plan and rank.

    Raises
    ------
    SchemaTypeError
        ``source`` is neither a RolloutBatch nor a Shard.
    OptionTypeError, OptionError
        ``indices`` is not a 1-D array of ints, or holds a row outside ``source`` (as the
        ``rows`` of every other door: :meth:`arrow_split.block.RankBlock.fill`, ...).
    """
    if isinstance(source, Shard):  # its rows, mapped back to its whole batch
        rows = _parse_indices(indices, source.num_samples)
        lengths, key, rank = source.batch_total_lengths, source.plan_key, source.dp_rank
        return Shard._take(source.rows, rows, lengths, key, rank, partition=source.partition)
    if not isinstance(source, RolloutBatch):
        got = describe(source)
        raise mistake("data_type", key="source", expected="a RolloutBatch or a Shard", got=got)
    rows = _parse_indices(indices, source.num_samples)
    return Shard._take(source, rows, source.total_lengths)


def _parse_plan(batch: RolloutBatch, plan: object) -> Plan:
    if not isinstance(plan, Plan):
        msg = f"`plan` must be a Plan, got {type(plan).__name__}; make one with `batch.make_plan`"
        raise PlanTypeError(msg, key="plan")
    if plan.num_samples != batch.num_samples:
        msg = (
            f"the plan is for {plan.num_samples} samples but the batch has "
            f"{batch.num_samples}; plan this batch (`batch.make_plan(dp_size, ...)`)"
        )
        raise PlanError(msg, key="plan")
    return plan


def take(batch: RolloutBatch, plan: Plan, dp_rank: int) -> Shard:
    """Rank ``dp_rank``'s rows of ``plan``, gathered alone (no other rank's rows are copied).

    Raises
    ------
    SchemaTypeError
        ``batch`` is not a RolloutBatch (a Shard's rows are ``shard.rows``).
    PlanError, PlanTypeError
        ``plan`` is not a Plan of this batch's sample count, or ``dp_rank`` is out of range.
    """
    batch = check_batch(batch)
    plan = _parse_plan(batch, plan)
    rank = check_dp_rank(dp_rank, plan.dp_size)
    return Shard._take(batch, plan.partitions[rank], batch.total_lengths, plan.key, rank)


def split(batch: RolloutBatch, plan: Plan) -> list[Shard]:
    """Every rank's shard of ``plan``; the shards share one array of the batch's total lengths.

    Raises
    ------
    SchemaTypeError, PlanError, PlanTypeError
        As :func:`take`.
    """
    batch = check_batch(batch)
    plan = _parse_plan(batch, plan)
    lengths = batch.total_lengths  # one read-only array, shared by every shard
    return [
        Shard._take(batch, rows, lengths, plan.key, rank)
        for rank, rows in enumerate(plan.partitions)
    ]


def _planned(
    data_or_batch: RolloutBatch | Mapping[str, Any], dp_size: int, method: SplitMethod, pad: bool
) -> tuple[RolloutBatch, Plan, np.ndarray]:
    """The batch, its plan (of the batch padded, with ``pad``) and the plan's total lengths."""
    batch = as_rollout_batch(data_or_batch)
    slots = batch.role_values("adapter_slot")
    keys = None if slots is None else slots.astype(np.int64, copy=False)
    return batch, *padded_plan(batch.total_lengths, keys, dp_size, method, pad)


def padded_plan(
    lengths: np.ndarray, keys: np.ndarray | None, dp_size: int, method: SplitMethod, pad: bool
) -> tuple[Plan, np.ndarray]:
    """The plan for ``dp_size`` ranks (``pad``: the last row repeated to fill) and its lengths."""
    num_samples = len(lengths)
    if deficit := -num_samples % dp_size if pad else 0:
        rows = np.minimum(np.arange(num_samples + deficit), num_samples - 1)
        lengths = lengths[rows]
        lengths.flags.writeable = False
        keys = None if keys is None else keys[rows]
    return Plan._make(lengths, dp_size, method, keys), lengths


@refuses_miles_calls
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
        A train-data dict (:meth:`~arrow_split.RolloutBatch.from_train_data`) or a RolloutBatch.
    dp_size
        The number of data-parallel ranks.
    balance_data
        ``False``: rank ``r`` gets rows ``r, r + dp_size, ...``; ``True``: equal-size
        Karmarkar-Karp partitions balanced by total length. Rows are stably sorted by adapter slot.
    pad_to_dp
        Pad the batch to a multiple of ``dp_size`` first (:func:`arrow_split.pad_to_dp`).

    Returns
    -------
    list of Shard
        Shard ``r`` holds rank ``r``'s rows in plan order, with the same ``plan_fingerprint``.
    """
    size = check_dp_size(dp_size)
    method = method_of(balance_data)
    pad = as_flag("pad_to_dp", pad_to_dp)
    batch, plan, lengths = _planned(data_or_batch, size, method, pad)
    return [
        Shard._take(batch, rows, lengths, plan.key, rank, padded=pad)
        for rank, rows in enumerate(plan.partitions)
    ]


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

    A batch that carries the driver's plan (:meth:`RolloutBatch.with_plan`) is checked against
    it and not re-planned.

    Parameters
    ----------
    data_or_batch, dp_size, pad_to_dp, dp_rank
        As for :func:`split_train_data_by_dp_raw`; the rank, in ``[0, dp_size)``.
    balance_data
        The plan's method; ``None`` follows the plan the batch carries (an error if it has none).
    resplit
        Allow a ``dp_size`` other than that of the plan the batch carries (it is planned again).

    Raises
    ------
    PlanMismatchError
        The batch carries a plan of another method, or of another ``dp_size`` (no ``resplit``).
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    resplit = as_flag("resplit", resplit)
    pad = as_flag("pad_to_dp", pad_to_dp)
    batch = as_rollout_batch(data_or_batch)
    plan = batch.plan
    if balance_data is None:
        if plan is None:
            msg = (
                "`balance_data` is None but the batch carries no plan to follow; pass "
                "`balance_data=True` or `False`, as the driver did"
            )
            raise PlanError(msg, key="balance_data")
        balance_data = plan.method == "balanced"
    method = method_of(balance_data)
    if plan is not None:
        _check_against(plan, method, size, resplit)
        if plan.dp_size == size:
            return Shard._take(batch, plan.partitions[rank], batch.total_lengths, plan.key, rank)
    batch, plan, lengths = _planned(batch, size, method, pad)
    return Shard._take(batch, plan.partitions[rank], lengths, plan.key, rank, padded=pad)


def _check_against(plan: Plan, method: str, dp_size: int, resplit: bool) -> None:
    if plan.method != method:
        msg = (
            f"this rank asks for a {method} plan (`balance_data={method == 'balanced'}`) but the "
            f"batch was put with a {plan.method} plan (`balance_data="
            f"{plan.method == 'balanced'}`, fingerprint {plan.fingerprint}); pass the same "
            "`balance_data` on every rank as on the driver"
        )
        raise PlanMismatchError(msg, key="balance_data", expected=plan.method, got=method)
    if plan.dp_size != dp_size and not resplit:
        msg = (
            f"this rank asks for `dp_size={dp_size}` but the batch was put for "
            f"`dp_size={plan.dp_size}` (fingerprint {plan.fingerprint}); pass `resplit=True` to "
            "split it again for the new size (e.g. after losing a rank), or fix `dp_size`"
        )
        raise PlanMismatchError(msg, key="dp_size", expected=str(plan.dp_size), got=str(dp_size))


def pad_to_dp(batch: RolloutBatch, dp_size: int) -> RolloutBatch:
    """The batch with the fewest padding rows that make its size a multiple of ``dp_size``.

    A padding row copies the last row but for :data:`arrow_split.schema.PADDING_VALUES`; a batch
    that divides ``dp_size`` only gains the (all false) ``is_padding`` column (docs/usage.md).

    Raises
    ------
    PlanError, PlanTypeError
        A bad ``dp_size``.
    SchemaTypeError
        ``batch`` is not a whole RolloutBatch (pad before splitting).
    """
    size = check_dp_size(dp_size)
    if type(batch) is not RolloutBatch:
        msg = (
            f"`pad_to_dp` pads a whole RolloutBatch before it is split, got "
            f"{type(batch).__name__}; build one with `RolloutBatch.from_train_data(data)`"
        )
        raise mistake("data_type", msg, key="batch")
    num_samples = batch.num_samples
    deficit = -num_samples % size
    if deficit == 0 and batch.roles.padding is not None:
        return batch
    return _gather(batch, np.arange(num_samples + deficit), padded=True)
