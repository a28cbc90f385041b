"""The classic path, written from its description: a dict of Python lists, pickled into Ray.

Planner: the plain-Python Karmarkar-Karp of ``tests/reference_plan.py``.

Eager (driver): plan, build every rank's dict by list indexing with its partition (per-sample keys
in partition order, batch-global keys copied whole, ``partition`` and the WHOLE batch's
``total_lengths``), and ``ray.put`` each dict.

Delayed: the driver puts the whole dict once (``ray.put``); every rank gets it (``ray.get``),
plans, builds ALL ``dp_size`` shards and keeps its own.

Actor side: every per-sample value becomes a tensor with ``torch.tensor(...)``.

Nothing here imports arrow_split: the baseline stands on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ray

from benchmarks.timing import Laps
from tests.reference_plan import reference_partitions
from tests.reference_split import BATCH_GLOBAL_KEYS

__all__ = [
    "GLOBAL_KEYS",
    "PER_TOKEN_KEYS",
    "classic_shard",
    "classic_split",
    "delayed_rank_steps",
    "eager_rank_steps",
    "put_delayed",
    "put_eager",
    "shard_to_tensors",
]

GLOBAL_KEYS = BATCH_GLOBAL_KEYS
"""Keys shipped whole with every shard (one value for the whole batch)."""

PER_TOKEN_KEYS = frozenset({"tokens", "loss_masks", "rollout_log_probs"})
"""Keys holding one list of numbers per sample."""


def classic_shard(
    data: Mapping[str, Any], partition: Sequence[int], total_lengths: list[int]
) -> dict[str, Any]:
    """One rank's dict: its rows of every per-sample key, globals whole, the whole lengths."""
    shard: dict[str, Any] = {}
    for key, values in data.items():
        if key in GLOBAL_KEYS:
            shard[key] = list(values) if isinstance(values, list) else values
        else:
            shard[key] = [values[row] for row in partition]
    shard["partition"] = list(partition)
    shard["total_lengths"] = list(total_lengths)
    return shard


def classic_split(
    data: Mapping[str, Any], dp_size: int, balance_data: bool
) -> list[dict[str, Any]]:
    """Every rank's dict, in rank order."""
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    plan = reference_partitions(total_lengths, dp_size, balance_data)
    return [classic_shard(data, partition, total_lengths) for partition in plan]


def put_eager(
    data: Mapping[str, Any], dp_size: int, balance_data: bool
) -> list[ray.ObjectRef[Any]]:
    """Eager driver side: plan, split and ``ray.put`` one dict per rank."""
    return [ray.put(shard) for shard in classic_split(data, dp_size, balance_data)]


def put_delayed(data: Mapping[str, Any]) -> ray.ObjectRef[Any]:
    """Delayed driver side: ``ray.put`` the whole dict once."""
    return ray.put(dict(data))


def shard_to_tensors(shard: Mapping[str, Any]) -> dict[str, Any]:
    """Actor side: one tensor per sample of every per-sample key (``torch.tensor(list)``)."""
    import torch

    dtypes = {"tokens": torch.long, "loss_masks": torch.int, "rollout_log_probs": torch.float32}
    tensors: dict[str, Any] = {}
    for key, values in shard.items():
        if key in GLOBAL_KEYS or key in ("partition", "total_lengths"):
            continue
        if key in dtypes:
            tensors[key] = [torch.tensor(sample, dtype=dtypes[key]) for sample in values]
        elif key == "rollout_routed_experts":
            tensors[key] = [torch.tensor(sample) for sample in values]
        else:
            tensors[key] = torch.tensor(values)
    return tensors


def eager_rank_steps(refs: Sequence[ray.ObjectRef[Any]], dp_rank: int) -> tuple[Laps, object]:
    """One rank of the eager path, step by step: ``get`` its dict, ``to_tensors``."""
    laps = Laps()
    shard = ray.get(refs[dp_rank])
    laps.lap("get")
    tensors = shard_to_tensors(shard)
    laps.lap("to_tensors")
    return laps, (shard, tensors)


def delayed_rank_steps(
    ref: ray.ObjectRef[Any], dp_rank: int, dp_size: int, balance_data: bool
) -> tuple[Laps, object]:
    """One rank of the delayed path: ``get`` the whole dict, ``plan``, build all shards, tensors."""
    laps = Laps()
    data = ray.get(ref)
    laps.lap("get")
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    plan = reference_partitions(total_lengths, dp_size, balance_data)
    laps.lap("plan")
    shards = [classic_shard(data, partition, total_lengths) for partition in plan]
    shard = shards[dp_rank]
    laps.lap("take")
    tensors = shard_to_tensors(shard)
    laps.lap("to_tensors")
    return laps, (data, shards, tensors)
