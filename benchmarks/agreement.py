"""Before anything is timed: the baseline and arrow_split must hand every rank the same shard.

A rank's shard is compared in the classic rollout layout: per-sample keys in partition order,
``partition``, the whole batch's ``total_lengths`` and the batch-global keys. The baseline's dict
(:func:`benchmarks.baseline.classic_split`) is compared with ``shard.to_train_data()`` of
arrow_split's shard, both as arrow_split computes it in this process
(:func:`arrow_split.shard_for_rank`) and as its Ray leaf hands it to a rank
(:func:`arrow_split.ray.process_rollout_data`, eager and delayed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from arrow_split import RolloutBatch, shard_for_rank
from arrow_split.ray import process_rollout_data
from benchmarks import arrow_path, baseline

__all__ = ["check_agreement", "shard_differences"]


def _holds_arrays(values: Any) -> bool:
    return isinstance(values, list) and any(isinstance(value, np.ndarray) for value in values)


def _same(left: Any, right: Any) -> bool:
    """Equal values; numpy arrays (one per sample, or whole) compare by shape and values."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return bool(np.array_equal(np.asarray(left), np.asarray(right)))
    if _holds_arrays(left) or _holds_arrays(right):
        return len(left) == len(right) and all(map(_same, left, right))
    return bool(left == right)


def shard_differences(classic: Mapping[str, Any], arrow: Mapping[str, Any]) -> list[str]:
    """The keys on which two classic-layout shards differ (missing ones included), or ``[]``."""
    keys = sorted(set(classic) | set(arrow))
    return [
        key
        for key in keys
        if key not in classic or key not in arrow or not _same(classic[key], arrow[key])
    ]


def _check(where: str, classic: Mapping[str, Any], shard: RolloutBatch) -> None:
    differences = shard_differences(classic, shard.to_train_data(layout="rollout"))
    if differences:
        msg = f"{where}: the baseline and arrow_split disagree on keys {differences}"
        raise AssertionError(msg)


def check_agreement(
    data: Mapping[str, Any],
    batch: RolloutBatch,
    dp_size: int,
    ranks: Sequence[int],
    balance_data: bool,
) -> dict[str, Any]:
    """Raise ``AssertionError`` unless every path gives each of ``ranks`` the baseline's shard.

    Returns what was checked, JSON-ready. Needs a running Ray for the leaf's two modes.
    """
    classic = baseline.classic_split(data, dp_size, balance_data)
    refs = arrow_path.put_eager(batch, dp_size, balance_data)
    ref = arrow_path.put_delayed(batch, dp_size, balance_data)
    for rank in ranks:
        where = f"dp_size={dp_size}, rank={rank}"
        _check(
            f"{where}, shard_for_rank",
            classic[rank],
            shard_for_rank(batch, rank, dp_size, balance_data=balance_data),
        )
        eager = process_rollout_data(refs, rank, dp_size, balance_data=balance_data)
        _check(f"{where}, eager leaf", classic[rank], eager)
        delayed = process_rollout_data(ref, rank, dp_size, balance_data=balance_data)
        _check(f"{where}, delayed leaf", classic[rank], delayed)
    del refs, ref
    return {
        "dp_size": dp_size,
        "ranks": list(ranks),
        "paths": ["shard_for_rank", "eager", "delayed"],
    }
