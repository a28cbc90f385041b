"""The physical references of the step benchmark, measured in the same run as the paths.

- ``one_buffer_put``: one ``ray.put`` of a contiguous numpy buffer of the batch's Arrow size, the
  floor of a delayed put (set against the builder's delayed put);
- ``memcpy``: a copy of the largest measured rank's Arrow bytes, in the rank actor's process, the
  floor of a delayed rank (set against the builder's delayed rank);
- ``planner``: the baseline's plain-Python Karmarkar-Karp against
  :func:`arrow_split.plan_partitions` at ``PLANNER_TARGET`` (samples, dp_size), and the gather of
  one rank's rows: the baseline's list indexing (:func:`benchmarks.baseline.classic_shard`) against
  :func:`arrow_split.take_rows`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray

from arrow_split import RolloutBatch, plan_partitions, take_rows
from arrow_split.testing import WORKLOADS, make_lengths
from benchmarks import baseline
from benchmarks._common import timed

__all__ = ["PLANNER_TARGET", "memcpy_seconds", "one_buffer_put", "planner_and_take"]

PLANNER_TARGET = (65_536, 256)
"""The planner's reference point: (samples, dp_size)."""


def one_buffer_put(nbytes: int, repeats: int) -> dict[str, Any]:
    """``ray.put`` of one contiguous buffer of ``nbytes`` (the object dropped after each run)."""
    buffer = np.ones(max(nbytes, 1), dtype=np.uint8)
    return {"bytes": nbytes, "seconds": timed(lambda: ray.put(buffer), repeats)}


def memcpy_seconds(nbytes: int, repeats: int) -> dict[str, Any]:
    """A copy of ``nbytes`` into fresh memory (``np.empty_like`` + ``np.copyto``)."""
    source = np.ones(max(nbytes, 1), dtype=np.uint8)

    def copy() -> np.ndarray:
        target = np.empty_like(source)
        np.copyto(target, source)
        return target

    return {"bytes": nbytes, "seconds": timed(copy, repeats)}


def planner_and_take(
    data: Mapping[str, Any], batch: RolloutBatch, dp_size: int, repeats: int
) -> dict[str, Any]:
    """Both planners at :data:`PLANNER_TARGET`; both gathers of rank 0's rows at ``dp_size``.

    ``data`` is the classic dict of lists, ``batch`` the same samples as arrow_split's batch.
    """
    samples, planner_dp = PLANNER_TARGET
    lengths = make_lengths(dataclasses.replace(WORKLOADS["medium"], samples=samples))
    as_list = [int(length) for length in lengths]
    classic = timed(lambda: baseline.classic_partitions(as_list, planner_dp, True), repeats)
    arrow = timed(lambda: plan_partitions(lengths, planner_dp, balance_data=True), repeats)
    total = [int(length) for length in batch.total_lengths]
    rows = plan_partitions(batch.total_lengths, dp_size, balance_data=True)[0]
    row_list = [int(row) for row in rows]
    take_classic = timed(lambda: baseline.classic_shard(data, row_list, total), repeats)
    take_arrow = timed(lambda: take_rows(batch, rows), repeats)
    return {
        "planner": {
            "samples": samples,
            "dp_size": planner_dp,
            "classic_seconds": classic,
            "arrow_seconds": arrow,
        },
        "take": {
            "dp_size": dp_size,
            "rows": len(row_list),
            "classic_seconds": take_classic,
            "arrow_seconds": take_arrow,
        },
    }
