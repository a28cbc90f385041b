"""A rank's rows of an eager put written straight into its reused block: one copy, not two.

:func:`process_rollout_data` gives a shard in fresh buffers (a take); a rank that then fills a
reused block (:class:`arrow_split.block.RankBlock`, :class:`arrow_split.torch.TensorBlock`)
would copy its rows twice. :func:`fill_rank_block` fetches what the driver put and gathers the
rank's rows from the object store's memory into the block once; anything but a whole batch put
with a plan of this ``dp_size`` (and method) goes through :func:`process_rollout_data`, checked
and sliced as there, then into the block.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import ray

import arrow_split.ray._nodes as _nodes
from arrow_split import OptionTypeError, PlanError, RolloutBatch, Shard
from arrow_split._args import check_dp_rank, check_dp_size, describe, method_of
from arrow_split.ray._handoff import process_rollout_data

__all__ = ["Fillable", "fill_rank_block"]

FilledT = TypeVar("FilledT", covariant=True)


class Fillable(Protocol[FilledT]):
    """A block: ``fill(source, rows)`` writes rows of a batch or a shard into it."""

    def fill(self, source: RolloutBatch | Shard, rows: Any = None) -> FilledT:
        """Write ``rows`` of ``source`` (``None``: all) into the block."""


def fill_rank_block(
    refs: Sequence[ray.ObjectRef[Any]],
    dp_rank: int,
    dp_size: int,
    block: Fillable[FilledT],
    *,
    balance_data: bool | None = None,
) -> FilledT:
    """Rank ``dp_rank``'s rows of an eager put, written into ``block`` (what its fill returns).

    Parameters
    ----------
    refs
        The list :func:`split_train_data_by_dp` returned (``delay=False``).
    dp_rank, dp_size, balance_data
        As :func:`process_rollout_data`.
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
    if not callable(getattr(block, "fill", None)):
        msg = f"`block` must have a `fill(source, rows)` method, got {describe(block)}"
        raise OptionTypeError(msg)
    if isinstance(refs, (list, tuple)) and len(refs) == size:
        value = _nodes.fetch(refs[rank], f"dp_rank {rank}", f"`refs[{rank}]`", None)
        if isinstance(value, RolloutBatch) and value.plan is not None:
            plan = value.plan
            fits = (plan.dp_size, plan.num_samples) == (size, value.num_samples)
            if fits and method in (None, plan.method):
                return block.fill(value, plan.partitions[rank])
    elif not isinstance(refs, (list, tuple)):
        msg = (
            f"`refs` must be the eager list of references (`delay=False`), got "
            f"{type(refs).__name__}; fill a block from a delayed put with "
            "`block.fill(process_rollout_data(ref, ...))`"
        )
        raise PlanError(msg, key="refs", got=type(refs).__name__)
    shard = process_rollout_data(refs, rank, size, balance_data=balance_data)
    return block.fill(shard)
