"""A train rank's process for the step benchmark: runs one rank's work on a step's objects.

A :class:`StepRankActor` (``num_cpus=0``, like a train actor that leaves the CPUs to its model) is
started fresh for every configuration; it records each call's memory
(:class:`benchmarks._common.MemoryGauge`) and times a memcpy of a rank's bytes on request. It is
started as a framework starts a train actor: it imports torch and ``arrow_split.torch`` and calls
:func:`arrow_split.ray.warm_up`; nothing else is warmed. Its first call is the cold start of a
train actor's first step; the later calls (on fresh objects of later steps) are warm. References
travel inside a list so that Ray does not resolve them before the clock starts.
"""

from __future__ import annotations

import gc
from typing import Any

import ray

from benchmarks._common import GcClock, MemoryGauge
from benchmarks.references import memcpy_seconds
from benchmarks.step_paths import StepPath, rank_steps

__all__ = ["StepRankActor", "largest_ranks"]


def largest_ranks(partitions: list[Any], lengths: Any, count: int) -> list[int]:
    """The ``count`` ranks with the most tokens (the slowest candidates), lowest rank on a tie."""
    tokens = [int(lengths[rows].sum()) for rows in partitions]
    order = sorted(range(len(partitions)), key=lambda rank: (-tokens[rank], rank))
    return sorted(order[: max(count, 1)])


@ray.remote(num_cpus=0)
class StepRankActor:
    """One train rank's process (see the module docstring)."""

    def __init__(self) -> None:
        import torch  # a train actor has imported torch long before its first step

        import arrow_split.torch  # noqa: F401 - as a train actor's module imports it
        from arrow_split.ray import warm_up

        warm_up()
        self.torch_version = torch.__version__

    def ready(self) -> bool:
        return True

    def run(
        self, path: StepPath, mode: str, box: list[Any], rank: int, dp_size: int, balance: bool
    ) -> dict[str, Any]:
        """Run and time one rank's steps once: ``{"steps", "seconds", "gc_seconds"}``."""
        gc.collect()
        with MemoryGauge() as memory, GcClock() as clock:
            laps = rank_steps(path, mode, box, rank, dp_size, balance)
        return {
            "steps": laps.seconds,
            "seconds": laps.total,
            "gc_seconds": clock.seconds,
            "memory": memory.figures,
        }

    def memcpy(self, nbytes: int, repeats: int) -> dict[str, Any]:
        """The floor of a delayed rank: a copy of ``nbytes`` in this process."""
        return memcpy_seconds(nbytes, repeats)
