"""Per-rank costs, measured where a rank's work happens: inside a Ray actor process.

A :class:`RankActor` (``num_cpus=0``, like a train actor that leaves the CPUs to its model) runs
one rank's steps itself and times them; references are handed to it inside a list, so that Ray
does not resolve them before the clock starts. Each repeat also records, in the actor, the
figures of :class:`benchmarks.timing.MemoryGauge`, the seconds CPython's garbage collector ran
(``gc``, already inside the steps' times; ``sum_excluding_gc`` takes it out) and
``arrow_allocated_bytes``: what ``pyarrow.total_allocated_bytes()`` grew by while the rank held
its shard and tensors (Arrow's memory pool, where arrow_split gathers a shard's rows; the
baseline's Python objects and torch's tensors are not in it).

The harness starts one fresh actor per (path, mode, dp_size). Each actor first runs every step
once on a tiny batch (untimed), as a train actor has done by its second step.
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
from benchmarks.config import STEPS, Mode, PathName, Workload
from benchmarks.timing import GcClock, Laps, MemoryGauge, Repeats, reset_peak_rss, summarize

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
    rank_bytes = int(held[0].nbytes) if hasattr(held[0], "nbytes") else None
    del held
    return laps, memory, rank_bytes


def _report(laps: list[Laps], memory: list[dict[str, Any]]) -> dict[str, Any]:
    names = [name for name in STEPS if name in laps[0].seconds]
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
    """Run every step once on a tiny batch: the first call of a process loads code, fills caches."""
    workload = Workload.generate("tiny", moe=True)
    batch = RolloutBatch.from_train_data(workload.arrays)
    baseline.eager_rank_steps([ray.put(workload.lists)], 0)
    baseline.delayed_rank_steps(ray.put(workload.lists), 0, 2, True)
    arrow_path.eager_rank_steps(arrow_path.put_eager(batch, 2, True), 0, 2, True)
    arrow_path.delayed_rank_steps(ray.put(batch), 0, 2, True)
    np.copyto(np.empty(1 << 20, dtype=np.uint8), np.ones(1 << 20, dtype=np.uint8))


@ray.remote(num_cpus=0)
class RankActor:
    """One train rank's process: runs and times a rank's steps (see the module docstring)."""

    def __init__(self) -> None:
        _warm_up()
        self.exact_peak = reset_peak_rss()

    def ready(self) -> bool:
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
        return {**report, "rank_bytes": results[0][2], "exact_peak": self.exact_peak}

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
