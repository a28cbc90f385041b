"""What every benchmark shares: its ``main``, the stamp, the JSON writer, Ray, clocks, formats.

A benchmark is a module with ``parse_args`` (:func:`benchmark_parser`), ``run`` and ``report``,
run by :func:`run_main`, plus one line in :data:`benchmarks.__main__.BENCHMARKS`. Every JSON
carries ``stamp``: commit (dirty or not), machine, load average, versions, command line.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "MIB",
    "REPO_ROOT",
    "RESULTS",
    "Laps",
    "MemoryGauge",
    "Results",
    "benchmark_parser",
    "checkout_on_pythonpath",
    "format_bytes",
    "format_seconds",
    "local_ray",
    "object_sizes",
    "pyplot",
    "run_main",
    "save_figure",
    "stamp",
    "start_stamp",
    "status_bytes",
    "summarize",
    "timed",
    "write_json",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS = REPO_ROOT / "benchmarks" / "results"
"""The default ``--out``: ignored by git, so a run never overwrites the committed results."""
MIB = 2**20
PACKAGES = ("arrow-split", "pyarrow", "numpy", "ray", "torch", "matplotlib", "psutil")


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], capture_output=True, text=True, check=True, cwd=REPO_ROOT
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip()


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def start_stamp() -> dict[str, Any]:
    """The stamp's start: time, commit, machine, versions, load, command line."""
    import psutil

    import arrow_split

    versions = {package: _version(package) for package in PACKAGES}
    versions.update(python=sys.version.split()[0], arrow_split=arrow_split.__version__)
    # What a run writes (docs/benchmarks/) does not make the tree dirty for the next benchmark.
    status = _git(
        "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs/benchmarks"
    )
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": None if status is None else bool(status),
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "ram_bytes": psutil.virtual_memory().total,
        },
        "versions": versions,
        "load_average": {"start": list(os.getloadavg())},
        "command": [Path(sys.executable).name, *sys.argv],
        "_clock": time.perf_counter(),
    }


def stamp(started: dict[str, Any]) -> dict[str, Any]:
    """The finished stamp: ``started`` plus the load average at the end and the wall seconds."""
    done = {key: value for key, value in started.items() if key != "_clock"}
    done["load_average"] = {**started["load_average"], "end": list(os.getloadavg())}
    done["wall_seconds"] = time.perf_counter() - started["_clock"]
    return done


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    msg = f"cannot write {type(value).__name__} to JSON"
    raise TypeError(msg)


def write_json(results: dict[str, Any], path: Path) -> Path:
    """Write ``results`` to ``path``, pretty; refuse a result without its ``stamp``."""
    if "stamp" not in results:
        msg = f"{path.name}: results carry no stamp; add stamp(start_stamp()) before writing"
        raise ValueError(msg)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2, default=_plain) + "\n", encoding="utf-8")
    return path


Results = dict[str, Any]
"""One JSON's results."""


def run_main(
    argv: list[str] | None,
    parse_args: Callable[[list[str] | None], Any],
    run: Callable[[Any], dict[str, Results]],
    report: Callable[[dict[str, Results], Path], None] | None = None,
) -> int:
    """Parse ``argv``, ``run`` (results by JSON file name), stamp and write each, ``report``
    (plots, tables), or else print each result's ``summary``."""
    options = parse_args(argv)
    started = start_stamp()
    outputs = run(options)
    for name, results in outputs.items():
        results["stamp"] = stamp(started)
        print(f"wrote {write_json(results, options.out / name)}", file=sys.stderr)
    if report is not None:
        report(outputs, options.out)
    for name, results in outputs.items():
        if report is None and "summary" in results:
            print(name, json.dumps(results["summary"], indent=1, default=_plain))
    print(f"wall time: {time.perf_counter() - started['_clock']:.1f} s", file=sys.stderr)
    return 0


@contextmanager
def checkout_on_pythonpath() -> Iterator[None]:
    """``PYTHONPATH`` led by this checkout in the block: Ray workers started then import it."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), saved]))
    try:
        yield
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved


@contextmanager
def local_ray(object_store_bytes: int) -> Iterator[None]:
    """A local Ray (2 CPUs) whose workers import this checkout; shut down on exit."""
    import ray

    if ray.is_initialized():
        msg = "Ray is already running in this process; each benchmark starts and stops its own"
        raise RuntimeError(msg)
    with checkout_on_pythonpath():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=object_store_bytes,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    try:
        yield
    finally:
        ray.shutdown()


def object_sizes(refs: Any) -> list[int]:
    """Bytes Ray stored for each distinct object of ``refs`` (a reference or a list of them)."""
    import ray

    listed = list({ref.hex(): ref for ref in (refs if isinstance(refs, list) else [refs])}.values())
    locations = ray.experimental.get_object_locations(listed)
    return [int(locations[ref].get("object_size") or 0) for ref in listed]


def benchmark_parser(name: str, doc: str | None, smoke: str) -> argparse.ArgumentParser:
    """``benchmarks.<name>``'s parser: ``doc``, ``--smoke`` (it runs ``smoke``) and ``--out``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m benchmarks.{name}",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help=smoke)
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="where its JSON and plots go (default: %(default)s; docs/benchmarks for the README)",
    )
    return parser


def format_seconds(seconds: float | None) -> str:
    """``1.23 s``, ``12.3 ms`` or ``456 µs``."""
    if seconds is None:
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def format_bytes(count: float | None) -> str:
    """``1.2 GiB``, ``3.4 MiB``, ``5.6 KiB`` or ``78 B``."""
    if count is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= size:
            value = count / size
            return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"
    return f"{count:.0f} B"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, title: str) -> None:
    """Title ``figure``, lay it out, save it to ``path`` (120 dpi) and close it."""
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot().close(figure)


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


def summarize(seconds: Iterable[float]) -> dict[str, Any]:
    """``{"min", "median", "all"}`` of repeated measurements."""
    values = list(seconds)
    return {"min": min(values), "median": statistics.median(values), "all": values}


def timed(
    call: Callable[[], object],
    repeats: int,
    *,
    clock: Callable[[], float] = time.perf_counter,
    warm_up: int = 0,
) -> dict[str, Any]:
    """:func:`summarize` of ``repeats`` runs of ``call`` after ``warm_up`` ones, each after a
    collection; ``clock`` may be ``time.thread_time`` (this thread's CPU)."""
    seconds = []
    for _ in range(warm_up + max(repeats, 1)):
        gc.collect()
        start = clock()
        result = call()
        seconds.append(clock() - start)
        del result
    return summarize(seconds[warm_up:])


def status_bytes(field: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``RssShmem``...) in bytes; else None."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    except OSError:
        return None
    return None if match is None else int(match.group(1)) * 1024


class MemoryGauge:
    """Peak memory of a ``with`` block: private increase and shared pages touched (Linux).

    Ray's store pages count in RSS once touched, so they are kept apart from private memory.
    """

    def __enter__(self) -> MemoryGauge:
        try:  # reset the RSS high-water mark to the current RSS, where Linux allows
            with open("/proc/self/clear_refs", "w", encoding="ascii") as clear_refs:
                clear_refs.write("5")
        except OSError:
            pass
        self._shared = status_bytes("RssShmem") or 0
        self._private = (status_bytes("VmRSS") or 0) - self._shared
        self.figures: dict[str, int] = {}
        return self

    def __exit__(self, *exc_info: object) -> None:
        peak, shared = status_bytes("VmHWM") or 0, status_bytes("RssShmem") or 0
        self.figures = {
            "peak_rss_bytes": peak,
            "private_increase_bytes": max(peak - shared - self._private, 0),
            "shared_touched_bytes": max(shared - self._shared, 0),
        }
