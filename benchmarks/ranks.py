"""Per-rank costs, measured where a rank's work happens: inside a Ray actor process.

A :class:`RankActor` (``num_cpus=0``, like a train actor that leaves the CPUs to its model) runs
one rank's steps itself and times them with :func:`time.perf_counter`; references are handed to
it inside a list, so that Ray does not resolve them before the clock starts. Each repeat also
records, in the actor:

- ``private_increase_bytes``: the peak of the process's private memory during the repeat minus
  its private memory before (:class:`benchmarks.timing.MemoryGauge`);
- ``shared_touched_bytes``: pages of the object store the rank touched for the first time (a
  fresh actor touches its objects' pages in its first repeat);
- ``arrow_allocated_bytes``: what ``pyarrow.total_allocated_bytes()`` grew by while the rank
  held its shard and tensors (Arrow's memory pool only: the baseline's Python objects, torch's
  tensors are not in it; arrow_split gathers a shard's rows into the pool);
- ``peak_rss_bytes``: the absolute high-water mark;
- ``gc``: the seconds CPython's garbage collector ran during the repeat (already inside the
  steps' times; ``sum_excluding_gc`` takes it out).

The harness starts one fresh actor per (path, mode, dp_size), so that no allocator state carries
over from one configuration to the next. Each actor first runs every step once on a tiny batch
(untimed), as a train actor has done by its second step.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import ray

from arrow_split import RolloutBatch
from benchmarks import arrow_path, baseline
from benchmarks.config import STEPS, Mode, PathName
from benchmarks.timing import (
    GcClock,
    Laps,
    MemoryGauge,
    Repeats,
    reset_peak_rss,
    summarize,
)
from benchmarks.workloads import generate

__all__ = ["RankActor"]


def _steps(
    path: PathName, mode: Mode, box: list[Any], rank: int, dp_size: int, balance: bool
) -> Callable[[], tuple[Any, ...]]:
    """The step function of one configuration, bound to its arguments."""
    if path == "baseline" and mode == "eager":
        return lambda: baseline.eager_rank_steps(box[0], rank)
    if path == "baseline":
        return lambda: baseline.delayed_rank_steps(box[0], rank, dp_size, balance)
    if mode == "eager":
        return lambda: arrow_path.eager_rank_steps(box[0], rank, dp_size, balance)
    return lambda: arrow_path.delayed_rank_steps(box[0], rank, dp_size, balance)


def _one_repeat(run: Callable[[], tuple[Any, ...]]) -> tuple[Laps, dict[str, Any], int | None]:
    """Run one rank's steps; return its laps, memory (and GC) figures and the shard's bytes."""
    gc.collect()
    arrow_before = pa.total_allocated_bytes()
    with MemoryGauge() as gauge, GcClock() as gc_clock:
        laps, *held = run()
    memory = {
        "gc_seconds": gc_clock.seconds,
        **gauge.figures,
        "arrow_allocated_bytes": pa.total_allocated_bytes() - arrow_before,
    }
    shard = held[0]
    rank_bytes = int(shard.nbytes) if hasattr(shard, "nbytes") else None
    del held, shard
    return laps, memory, rank_bytes


def _report(laps: list[Laps], memory: list[dict[str, Any]]) -> dict[str, Any]:
    names = [name for name in STEPS if name in laps[0].seconds]
    names += [name for name in laps[0].seconds if name not in names]
    gc_seconds = [entry.pop("gc_seconds") for entry in memory]
    return {
        "steps": {name: summarize(lap.seconds[name] for lap in laps) for name in names},
        "sum": summarize(lap.total for lap in laps),
        "gc": summarize(gc_seconds),
        "sum_excluding_gc": summarize(
            lap.total - seconds for lap, seconds in zip(laps, gc_seconds, strict=True)
        ),
        "memory": {key: max(entry[key] for entry in memory) for key in memory[0]},
    }


def _warm_up() -> None:
    """Run every step once on a tiny batch, so that no clock counts a library's first call.

    The first ``take``, the first tensor and the first get of a process load code and fill
    caches once per process; a train actor pays that once, not per step.
    """
    workload = generate("tiny", moe=True)
    batch = RolloutBatch.from_train_data(workload.arrays)
    runs: list[Callable[[], object]] = [
        lambda: baseline.eager_rank_steps([ray.put(workload.lists)], 0),
        lambda: baseline.delayed_rank_steps(ray.put(workload.lists), 0, 2, True),
        lambda: arrow_path.eager_rank_steps(arrow_path.put_eager(batch, 2, True), 0, 2, True),
        lambda: arrow_path.delayed_rank_steps(ray.put(batch), 0, 2, True),
        lambda: arrow_path.leaf_rank(ray.put(batch), 0, 2, True),
    ]
    for run in runs:
        run()
    np.copyto(np.empty(1 << 20, dtype=np.uint8), np.ones(1 << 20, dtype=np.uint8))


@ray.remote(num_cpus=0)
class RankActor:
    """One train rank's process: runs and times a rank's steps (see the module docstring)."""

    def __init__(self) -> None:
        _warm_up()
        self.exact_peak = reset_peak_rss()

    def ready(self) -> bool:
        """Whether the actor is up (its imports done)."""
        return True

    def run(
        self,
        path: PathName,
        mode: Mode,
        box: list[Any],
        rank: int,
        dp_size: int,
        balance_data: bool,
        repeats: Repeats,
    ) -> dict[str, Any]:
        """Time the runs of one rank; ``box[0]`` is the ref (delayed) or refs (eager)."""
        run = _steps(path, mode, box, rank, dp_size, balance_data)
        results = [_one_repeat(run) for _ in repeats]
        report = _report([laps for laps, _, _ in results], [memory for _, memory, _ in results])
        report["rank_bytes"] = results[0][2]
        report["exact_peak"] = self.exact_peak
        return report

    def run_leaf(
        self, box: list[Any], rank: int, dp_size: int, balance_data: bool, repeats: Repeats
    ) -> dict[str, Any]:
        """Time arrow_split's public calls for one rank, end to end."""
        results = [
            _one_repeat(lambda: arrow_path.leaf_rank(box[0], rank, dp_size, balance_data))
            for _ in repeats
        ]
        return _report([laps for laps, _, _ in results], [memory for _, memory, _ in results])

    def memcpy(self, nbytes: int, repeats: Repeats) -> dict[str, Any]:
        """The copy of ``nbytes`` into fresh memory (``np.empty`` + ``np.copyto``), timed."""
        source = np.ones(max(nbytes, 1), dtype=np.uint8)
        seconds = []
        for _ in repeats:
            gc.collect()
            start = time.perf_counter()
            target = np.empty_like(source)
            np.copyto(target, source)
            seconds.append(time.perf_counter() - start)
            del target
        return {"bytes": nbytes, "seconds": summarize(seconds)}
