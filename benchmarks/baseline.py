"""The classic path, written from its description: a dict of Python lists, pickled into Ray.

Planner: a plain-Python Karmarkar-Karp (largest differencing, equal-size parts) as the classic
frameworks plan a balanced split (a state per run of ``dp_size`` sorted items; the two states of
largest spread merged set ``k - 1 - i`` into set ``i`` until one is left); strided: rank ``r``
gets rows ``r, r + dp_size, ...``. Eager: the driver plans, builds every rank's dict by list
indexing and puts each; delayed: it puts the whole dict, and every rank plans, builds ALL shards
and keeps its own. A rank makes ``torch.tensor(...)`` per sample. Imports nothing of arrow_split.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray

from benchmarks._common import Laps

__all__ = [
    "GLOBAL_KEYS",
    "ShardBuilder",
    "classic_partitions",
    "classic_shard",
    "classic_split",
    "delayed_rank_steps",
    "eager_rank_steps",
]

GLOBAL_KEYS = frozenset(
    {
        "raw_reward",
        "dynamic_global_batch_size",
        "step_slots",
        "step_adapter_names",
        "step_adapter_batch_sizes",
        "prompt_group_sizes",
    }
)
"""Keys shipped whole with every shard (one value for the whole batch)."""

_DTYPES = {"tokens": "long", "loss_masks": "int", "rollout_log_probs": "float32"}

ShardBuilder = Callable[[Mapping[str, Any], Sequence[int], list[int]], dict[str, Any]]
"""Builds one rank's dict from the data, its partition and the whole batch's lengths."""

_Set = list[Any]  # [sum, [(row, length), ...]], items in insertion order


def _set_key(one_set: _Set) -> tuple[int, int, list[tuple[int, int]]]:
    return one_set[0], len(one_set[1]), one_set[1]


class _State:
    """``dp_size`` sets, kept in descending order; the heap pops the largest spread first."""

    __slots__ = ("sets",)

    def __init__(self, sets: list[_Set]) -> None:
        self.sets = sorted(sets, key=_set_key, reverse=True)

    def __lt__(self, other: _State) -> bool:
        spread = self.sets[0][0] - self.sets[-1][0]
        other_spread = other.sets[0][0] - other.sets[-1][0]
        if spread != other_spread:
            return spread > other_spread
        return _set_key(self.sets[0]) > _set_key(other.sets[0])


def classic_partitions(lengths: list[int], dp_size: int, balance_data: bool) -> list[list[int]]:
    """The rows of each rank: Karmarkar-Karp when ``balance_data``, else strided."""
    n = len(lengths)
    if not balance_data:
        return [list(range(rank, n, dp_size)) for rank in range(dp_size)]
    if n < dp_size or n % dp_size:
        msg = f"a balanced plan needs a positive multiple of {dp_size} samples, got {n}"
        raise ValueError(msg)
    items = sorted((length, row) for row, length in enumerate(lengths))
    heap = [
        _State([[length, [(row, length)]] for length, row in items[start : start + dp_size]])
        for start in range(0, n, dp_size)
    ]
    heapq.heapify(heap)
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        for mine, theirs in zip(first.sets, reversed(second.sets), strict=True):
            mine[0] += theirs[0]
            mine[1].extend(theirs[1])
        first.sets.sort(key=_set_key, reverse=True)
        heapq.heappush(heap, first)
    return [sorted(row for row, _ in members) for _, members in heap[0].sets]


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
    data: Mapping[str, Any], dp_size: int, balance_data: bool, shard: ShardBuilder = classic_shard
) -> list[dict[str, Any]]:
    """Every rank's dict, in rank order; ``shard(data, partition, total_lengths)`` builds one."""
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    plan = classic_partitions(total_lengths, dp_size, balance_data)
    return [shard(data, partition, total_lengths) for partition in plan]


def _to_tensors(shard: Mapping[str, Any]) -> dict[str, Any]:
    """Actor side: one tensor per sample of every per-sample key (``torch.tensor(list)``)."""
    import torch

    tensors: dict[str, Any] = {}
    for key, values in shard.items():
        if key in GLOBAL_KEYS or key in ("partition", "total_lengths"):
            continue
        if key in _DTYPES:
            dtype = getattr(torch, _DTYPES[key])
            tensors[key] = [torch.tensor(sample, dtype=dtype) for sample in values]
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
    tensors = _to_tensors(shard)
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
    plan = classic_partitions(total_lengths, dp_size, balance_data)
    laps.lap("plan")
    shards = [classic_shard(data, partition, total_lengths) for partition in plan]
    laps.lap("take")
    tensors = _to_tensors(shards[dp_rank])
    laps.lap("to_tensors")
    return laps, (data, shards, tensors)
