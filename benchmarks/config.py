"""What a harness run measures: the workload, its options, the configurations, the progress bar."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from arrow_split.testing import WORKLOADS, RolloutConfig, make_train_data
from benchmarks.timing import Repeats

__all__ = [
    "CONFIGS",
    "DP_SIZES",
    "MOE_SHAPE",
    "PLANNER_TARGET",
    "STEPS",
    "Mode",
    "Options",
    "PathName",
    "Progress",
    "Workload",
    "pick_ranks",
]

PathName = Literal["baseline", "arrow"]
"""The two paths compared: the classic dict of lists, and arrow_split."""

Mode = Literal["eager", "delayed"]
"""Eager: the driver puts one shard per rank. Delayed: it puts the batch once; ranks split it."""

STEPS = ("get", "plan", "take", "to_tensors")
"""The steps of a rank, in order (eager ranks take nothing)."""

CONFIGS: tuple[tuple[PathName, Mode], ...] = (
    ("baseline", "eager"),
    ("arrow", "eager"),
    ("baseline", "delayed"),
    ("arrow", "delayed"),
)
"""Every (path, mode) whose ranks are timed, for each dp_size."""

PLANNER_TARGET = (65_536, 256)
"""The planner's reference point (samples, dp_size), timed in every run."""

DP_SIZES = {"tiny": (2, 4, 8), "small": (8, 64, 256), "medium": (8, 64, 256), "large": (8, 64, 256)}
"""The dp_sizes each workload runs by default."""

MOE_SHAPE = (8, 4)
"""``(layers, top_k)`` of the routed experts that ``--moe`` adds."""


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
    progress: bool = True

    @property
    def runs(self) -> Repeats:
        return Repeats(self.repeats, self.min_seconds)


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    """One generated batch in both forms: Python lists (classic) and numpy arrays."""

    name: str
    config: RolloutConfig
    lists: dict[str, Any]
    arrays: dict[str, Any]

    @classmethod
    def generate(cls, name: str, *, seed: int = 0, moe: bool = False) -> Workload:
        """The named workload of :data:`arrow_split.testing.WORKLOADS`, seeded."""
        shape = MOE_SHAPE if moe else None
        config = dataclasses.replace(WORKLOADS[name], seed=seed, moe_shape=shape)
        lists = make_train_data(config)
        arrays = make_train_data(dataclasses.replace(config, as_numpy=True))
        return cls(name, config, lists, arrays)

    @property
    def num_samples(self) -> int:
        return len(self.arrays["tokens"])

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description of the workload's shape."""
        response = self.arrays["response_lengths"]
        config = self.config
        return {
            "name": self.name,
            "seed": config.seed,
            "num_samples": self.num_samples,
            "num_tokens": int(sum(len(tokens) for tokens in self.arrays["tokens"])),
            "response_tokens": int(response.sum()),
            "response_mean": config.response_mean,
            "response_cap": config.response_cap,
            "samples_at_cap": int((response == config.response_cap).sum()),
            "prompt_tokens": list(config.prompt_tokens),
            "moe": config.moe_shape is not None,
            "moe_shape": None if config.moe_shape is None else list(config.moe_shape),
        }


class Progress:
    """One tqdm bar over the run's tasks; each task names itself while it runs."""

    def __init__(self, *, enabled: bool) -> None:
        self.bar = tqdm(total=0, unit="task", disable=not enabled, dynamic_ncols=True)

    def __enter__(self) -> Progress:
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
