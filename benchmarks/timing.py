"""Clocks and memory gauges shared by the driver and the rank actors.

Time: :func:`time.perf_counter`; :class:`GcClock` measures the share of the garbage collector.
Memory (Linux): the resident set size, its shared part and its high-water mark from
``/proc/self/status``; writing ``5`` to ``/proc/self/clear_refs`` resets the high-water mark to the
current RSS, so the peak of one block is measured on its own (:class:`MemoryGauge`). Where that
file cannot be written the peak is the process's lifetime peak (``resource.getrusage``).
"""

from __future__ import annotations

import dataclasses
import gc
import re
import resource
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["GcClock", "Laps", "MemoryGauge", "Repeats", "reset_peak_rss", "summarize"]


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
        return sum(self.seconds.values())


class GcClock:
    """Seconds CPython's cyclic garbage collector ran inside a ``with`` block (``gc.callbacks``).

    The collector is left enabled, as in a real process: the baseline's freshly unpickled lists
    make whichever step comes next pay for a pass over all of them. This clock says how much.
    """

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started: float | None = None

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._callback)


@dataclasses.dataclass(frozen=True, slots=True)
class Repeats:
    """At least ``count`` runs, more while under ``min_seconds`` (at most ``10 * count``).

    Like ``timeit``'s autorange: a cheap measurement gets more runs, so that a burst of noise
    from other processes moves its median less.
    """

    count: int
    min_seconds: float = 0.5

    def __iter__(self) -> Iterator[int]:
        start, runs = time.perf_counter(), 0
        while runs < self.count or (
            time.perf_counter() - start < self.min_seconds and runs < 10 * self.count
        ):
            yield runs
            runs += 1


def summarize(seconds: Iterable[float]) -> dict[str, Any]:
    """``{"min", "median", "all"}`` of repeated measurements."""
    values = list(seconds)
    return {"min": min(values), "median": statistics.median(values), "all": values}


def _status_bytes(field: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return None if match is None else int(match.group(1)) * 1024


def _peak_rss() -> int:
    peak = _status_bytes("VmHWM")
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


class MemoryGauge:
    """Peak memory of a ``with`` block, split into private memory and shared pages touched.

    Pages of Ray's object store count in a process's RSS once it touches them, so the figures
    keep them apart (Linux; elsewhere the shared part reads 0): ``private_increase_bytes`` (peak
    RSS less the shared pages resident at the end, minus the private RSS before),
    ``shared_touched_bytes`` (shared pages that became resident) and ``peak_rss_bytes``.
    """

    def __enter__(self) -> MemoryGauge:
        reset_peak_rss()
        self._shared = _status_bytes("RssShmem") or 0
        self._private = (_status_bytes("VmRSS") or 0) - self._shared
        self.figures: dict[str, int] = {}
        return self

    def __exit__(self, *exc_info: object) -> None:
        peak, shared = _peak_rss(), _status_bytes("RssShmem") or 0
        self.figures = {
            "peak_rss_bytes": peak,
            "private_increase_bytes": max(peak - shared - self._private, 0),
            "shared_touched_bytes": max(shared - self._shared, 0),
        }
