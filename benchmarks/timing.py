"""Clocks and memory gauges shared by the driver and the rank actors.

Time: :func:`time.perf_counter`. Memory (Linux): the resident set size and its high-water mark
from ``/proc/self/status``; writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark
to the current RSS, so the peak of one step is measured on its own. Where that file cannot be
written (not Linux, or not allowed) the peak is the process's lifetime peak
(``resource.getrusage``) and :func:`reset_peak_rss` says so by returning ``False``.
"""

from __future__ import annotations

import gc
import re
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Laps", "current_rss", "peak_rss", "reset_peak_rss", "summarize", "time_calls"]

_STATUS = "/proc/self/status"


class Laps:
    """Named intervals of one run: ``laps.lap("get")`` closes the interval that began before."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        """Record the time since the previous lap (or the start) under ``name``."""
        now = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + now - self._last
        self._last = now

    @property
    def total(self) -> float:
        """The sum of all laps."""
        return sum(self.seconds.values())


def summarize(seconds: Iterable[float]) -> dict[str, Any]:
    """``{"min", "median", "all"}`` of repeated measurements (as bench_planner reports them)."""
    values = list(seconds)
    return {"min": min(values), "median": statistics.median(values), "all": values}


def time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    """Seconds of ``repeats`` calls, each after a garbage collection; results are dropped."""
    seconds = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - start)
        del result
    return seconds


def _status_kib(field: str) -> int | None:
    try:
        with open(_STATUS, encoding="ascii") as status:
            match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return None if match is None else int(match.group(1)) * 1024


def current_rss() -> int:
    """Resident set size of this process, in bytes (0 where unknown)."""
    return _status_kib("VmRSS") or 0


def peak_rss() -> int:
    """High-water mark of the resident set size since the last reset, in bytes."""
    peak = _status_kib("VmHWM")
    if peak is not None:
        return peak
    scale = 1 if sys.platform == "darwin" else 1024
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


def reset_peak_rss() -> bool:
    """Reset the RSS high-water mark to the current RSS; ``False`` if this is not possible."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
            clear_refs.write("5")
    except OSError:
        return False
    return True
