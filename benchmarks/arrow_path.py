"""The arrow_split path, step by step, with the public calls its Ray leaf makes.

Driver: :func:`arrow_split.ray.split_train_data_by_dp` (eager: plan, one ``take`` and one put per
rank; delayed: one put of the whole batch). Rank: what :func:`arrow_split.ray.process_rollout_data`
does, one call at a time to show where the time goes: ``ray.get`` (read-only views of the store),
the plan (:func:`arrow_split.partition_for_rank`), the gather (:func:`arrow_split.take_rows`);
then :func:`arrow_split.torch.to_tensors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray

from arrow_split import RolloutBatch, partition_for_rank, take_rows
from arrow_split.ray import split_train_data_by_dp
from arrow_split.torch import to_tensors
from benchmarks.timing import Laps

__all__ = ["delayed_rank_steps", "eager_rank_steps", "put_delayed", "put_eager"]


def put_eager(batch: RolloutBatch, dp_size: int, balance_data: bool) -> list[ray.ObjectRef[Any]]:
    """Eager driver side: one shard per rank, put."""
    return split_train_data_by_dp(batch, dp_size, balance_data=balance_data, delay=False)


def put_delayed(batch: RolloutBatch, dp_size: int, balance_data: bool) -> ray.ObjectRef[Any]:
    """Delayed driver side: the whole batch, put once."""
    return split_train_data_by_dp(batch, dp_size, balance_data=balance_data, delay=True)


def eager_rank_steps(
    refs: Sequence[ray.ObjectRef[Any]], dp_rank: int, dp_size: int, balance_data: bool
) -> tuple[Laps, RolloutBatch, object]:
    """One eager rank: ``get`` its shard, ``plan`` (the leaf's O(1) check of its rows), tensors."""
    laps = Laps()
    shard = ray.get(refs[dp_rank])
    laps.lap("get")
    key = shard.plan_key
    method = "balanced" if balance_data else "strided"
    if key is None or (shard.dp_rank, key.dp_size, key.method) != (dp_rank, dp_size, method):
        raise RuntimeError(f"rank {dp_rank} got another rank's shard")
    laps.lap("plan")
    tensors = to_tensors(shard, layout="per_sample")
    laps.lap("to_tensors")
    return laps, shard, tensors


def delayed_rank_steps(
    ref: ray.ObjectRef[Any], dp_rank: int, dp_size: int, balance_data: bool
) -> tuple[Laps, RolloutBatch, object]:
    """One delayed rank: ``get`` the batch (views), ``plan``, ``take`` its rows, tensors.

    As the leaf does: the batch carries the driver's plan; a rank at the driver's ``dp_size``
    reads its rows from it, any other size plans again.
    """
    laps = Laps()
    batch = ray.get(ref)
    laps.lap("get")
    plan = batch.plan
    if plan is not None and plan.dp_size == dp_size:
        indices = plan.rows(dp_rank)
    else:
        indices = partition_for_rank(
            batch.total_lengths, dp_rank, dp_size, balance_data=balance_data
        )
    laps.lap("plan")
    shard = take_rows(batch, indices)
    del batch
    laps.lap("take")
    tensors = to_tensors(shard, layout="per_sample")
    laps.lap("to_tensors")
    return laps, shard, tensors
