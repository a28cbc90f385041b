"""What a run measures: its options, the configurations timed, and the progress bar."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from benchmarks.timing import Repeats

__all__ = [
    "CONFIGS",
    "PLANNER_TARGET",
    "STEPS",
    "Mode",
    "Options",
    "PathName",
    "Progress",
    "pick_ranks",
]

PathName = Literal["baseline", "arrow"]
"""The two paths compared: the classic dict of lists, and arrow_split."""

Mode = Literal["eager", "delayed"]
"""Eager: the driver puts one shard per rank. Delayed: it puts the batch once; ranks split it."""

STEPS = ("get", "plan", "take", "to_tensors")
"""The steps of a rank, in order (a mode may skip some: eager ranks take nothing)."""

CONFIGS: tuple[tuple[PathName, Mode], ...] = (
    ("baseline", "eager"),
    ("arrow", "eager"),
    ("baseline", "delayed"),
    ("arrow", "delayed"),
)
"""Every (path, mode) whose ranks are timed, for each dp_size."""

PLANNER_TARGET = (65_536, 256)
"""The planner's reference point (samples, dp_size), timed in every run."""


@dataclasses.dataclass(frozen=True, slots=True)
class Options:
    """What one run measures and where it writes (see ``python -m benchmarks.harness -h``)."""

    workload: str = "medium"
    moe: bool = False
    dp_sizes: tuple[int, ...] = (8, 64, 256)
    repeats: int = 5
    min_seconds: float = 0.5
    ranks_per_config: int = 2
    balance_data: bool = True
    seed: int = 0
    out: Path = Path("benchmarks/results")
    plot: bool = True
    progress: bool = True

    @property
    def runs(self) -> Repeats:
        """How often each measurement runs (see :class:`benchmarks.timing.Repeats`)."""
        return Repeats(self.repeats, self.min_seconds)


class Progress:
    """One tqdm bar over the run's tasks; each task names itself while it runs."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None

    def __enter__(self) -> Progress:
        self.bar = tqdm(total=0, unit="task", disable=not self.enabled, dynamic_ncols=True)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.bar.close()

    def expect(self, tasks: int) -> None:
        """Add ``tasks`` to the bar's total."""
        self.bar.total += tasks
        self.bar.refresh()

    @contextmanager
    def task(self, name: str) -> Iterator[None]:
        """Show ``name`` while the block runs; count it as done after."""
        self.bar.set_description(name)
        yield
        self.bar.update(1)


def pick_ranks(dp_size: int, count: int) -> list[int]:
    """``count`` ranks spread over ``[0, dp_size)``, the first and the last included."""
    if count >= dp_size:
        return list(range(dp_size))
    if count == 1:
        return [0]
    step = (dp_size - 1) / (count - 1)
    return sorted({round(index * step) for index in range(count)})
