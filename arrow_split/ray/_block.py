"""A rank's rows of a put written straight into its reused block: one copy, not two.

:func:`process_rollout_data` gives a shard in fresh buffers (a take); a rank that then fills a
reused block (:class:`arrow_split.block.RankBlock`, :class:`arrow_split.torch.TensorBlock`)
would copy its rows twice. :func:`fill_rank_block` fetches what the driver put once (the eager
list's object: the whole batch, or its node group's rows; or the delayed batch where this rank
takes its rows here) and gathers the rank's rows from the object store's memory into the block.
Anything else (another ``dp_size`` to ``resplit`` for, a delayed batch taken on the node that
holds it) goes through :func:`process_rollout_data`, checked and taken as there, then into the
block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import ray

import arrow_split.ray._nodes as _nodes
from arrow_split import OptionTypeError, RolloutBatch, Shard
from arrow_split._args import as_choice, as_flag, check_dp_rank, check_dp_size, describe, method_of
from arrow_split.ray._handoff import process_rollout_data
from arrow_split.ray._nodes import Locality
from arrow_split.ray._wire import check_session

__all__ = ["Fillable", "fill_rank_block"]

FilledT = TypeVar("FilledT", covariant=True)


class Fillable(Protocol[FilledT]):
    """A block: ``fill(source, rows)`` writes rows of a batch or a shard into it."""

    def fill(self, source: RolloutBatch | Shard, rows: Any = None) -> FilledT:
        """Write ``rows`` of ``source`` (``None``: all) into the block."""


def fill_rank_block(
    refs_or_ref: Sequence[ray.ObjectRef[Any]] | ray.ObjectRef[Any],
    dp_rank: int,
    dp_size: int,
    block: Fillable[FilledT],
    *,
    balance_data: bool | None = None,
    resplit: bool = False,
    locality: Locality = "auto",
) -> FilledT:
    """Rank ``dp_rank``'s rows of a put, written into ``block`` (what its fill returns).

    Parameters
    ----------
    refs_or_ref
        The eager list :func:`split_train_data_by_dp` returned, or its delayed reference.
    dp_rank, dp_size, balance_data, resplit
        As :func:`process_rollout_data`. A delayed batch put for this ``dp_size`` and taken
        here is gathered into the block in one copy; one planned again (``resplit``) or taken
        on another node is taken first, then copied into the block.
    locality
        Delayed only, where the rows are taken (:data:`Locality`).
    block
        A :class:`~arrow_split.block.RankBlock` or :class:`~arrow_split.torch.TensorBlock`.

    Raises
    ------
    PlanError, PlanMismatchError, NotARolloutBatchError, TransportError
        As :func:`process_rollout_data`.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    method = None if balance_data is None else method_of(balance_data)
    resplit = as_flag("resplit", resplit)
    where = cast(Locality, as_choice("locality", locality, Locality))
    if not callable(getattr(block, "fill", None)):
        msg = f"`block` must have a `fill(source, rows)` method, got {describe(block)}"
        raise OptionTypeError(msg)
    who = f"dp_rank {rank}"
    value: Any = refs_or_ref  # the reference, or (fetched here) what it holds
    if isinstance(refs_or_ref, (list, tuple)) and len(refs_or_ref) == size:
        what = f"`refs[{rank}]`"
        value = _nodes.fetch(refs_or_ref[rank], who, what, None)
        planned = _planned_rows(value, rank, size, method)
        if planned is not None:  # one group: the whole batch with its plan
            return block.fill(*planned)
        if isinstance(value, RolloutBatch):  # another plan, or none: that door's error
            return block.fill(_nodes.rank_slice(value, rank, size, method, who, what))
        group, start, stop = _nodes.group_span(value, rank, size, method, who, what)
        return block.fill(group.rows, np.arange(start, stop))  # its group's rows, in one run
    if isinstance(refs_or_ref, ray.ObjectRef):
        check_session(refs_or_ref, who, "the delayed reference")
        if _nodes.pick_holder(refs_or_ref, rank, where) is None:  # taken here
            value = _nodes.fetch(refs_or_ref, who, "the delayed reference", None)
    planned = _planned_rows(value, rank, size, method)
    if planned is not None:  # the whole batch, as put for this plan: one gather
        return block.fill(*planned)
    # anything else (a list of another length, a delayed object): as that door reads it
    source = value if isinstance(value, RolloutBatch) else refs_or_ref
    shard = process_rollout_data(
        source, rank, size, balance_data=balance_data, resplit=resplit, locality=where
    )
    return block.fill(shard)


def _planned_rows(
    value: object, dp_rank: int, dp_size: int, method: str | None
) -> tuple[RolloutBatch, np.ndarray] | None:
    """A whole batch put with a plan of this ``dp_size`` (and ``method``), and the rank's rows."""
    if not isinstance(value, RolloutBatch) or value.plan is None:
        return None
    plan = value.plan
    if (plan.dp_size, plan.num_samples) != (dp_size, value.num_samples):
        return None
    return (value, plan.partitions[dp_rank]) if method in (None, plan.method) else None
