"""A plain-Python reference of the classic split, written for the tests (no Arrow, no numpy math).

Dict of per-sample lists in, one dict per rank out, in the classic rollout-side layout: per-sample
keys for the rank's rows in partition order, ``partition``, batch-global keys whole, and
``total_lengths`` of the WHOLE batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.reference_plan import reference_partitions

__all__ = ["BATCH_GLOBAL_KEYS", "normalize", "reference_split"]

BATCH_GLOBAL_KEYS = frozenset(
    {
        "raw_reward",
        "dynamic_global_batch_size",
        "step_slots",
        "step_adapter_names",
        "step_adapter_batch_sizes",
        "prompt_group_sizes",
    }
)


def normalize(value: Any) -> Any:
    """Make a column comparable whatever its container: numpy arrays and tuples become lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [normalize(item) for item in value]
    if isinstance(value, dict):
        return {key: normalize(item) for key, item in value.items()}
    return value


def reference_split(data: dict[str, Any], dp_size: int, balance_data: bool) -> list[dict[str, Any]]:
    """Split ``data`` the classic way, one dict per rank."""
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    partitions = reference_partitions(total_lengths, dp_size, balance_data)
    shards = []
    for partition in partitions:
        shard: dict[str, Any] = {}
        for key, values in data.items():
            if key in BATCH_GLOBAL_KEYS:
                shard[key] = normalize(values)
            else:
                shard[key] = [normalize(values[row]) for row in partition]
        shard["partition"] = list(partition)
        shard["total_lengths"] = list(total_lengths)
        shards.append(shard)
    return shards
