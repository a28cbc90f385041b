"""Benchmark harness: arrow_split against the classic dict-of-lists path, in one run.

Run from the repository root::

    python -m benchmarks.harness --workload medium            # what `make bench` runs
    python -m benchmarks.harness --workload small --moe --dp-sizes 8,64 --repeats 5

One run generates the seeded workload (:data:`arrow_split.testing.WORKLOADS`) as Python lists
and numpy arrays, starts a local Ray (2 CPUs, an object store sized for the workload), runs the
phases of :mod:`benchmarks.phases` (build; the agreement check of the baseline's and
arrow_split's shards, which stops the run if they differ; the puts; the planners; the ranks),
shuts Ray down and writes ``results.json``, ``results.md`` and ``per_rank.png`` under ``--out``.
Every figure is the minimum and the median over at least ``--repeats`` runs; a cheap one runs
more often, until its runs add up to 0.5 s (at most ten times ``--repeats``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ray

from benchmarks import report, tables
from benchmarks.config import DP_SIZES, Options, Progress, Workload
from benchmarks.phases import run_phases

__all__ = ["local_ray", "main", "parse_args", "run", "write_outputs"]

REPO_ROOT = Path(__file__).resolve().parent.parent
_MIB = 2**20


def _dp_sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        msg = f"expected comma-separated positive ints such as 8,64,256, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def parse_args(argv: list[str] | None = None) -> Options:
    """Parse the command line into :class:`benchmarks.config.Options`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workload", choices=list(DP_SIZES), default="medium")
    parser.add_argument("--moe", action="store_true", help="add rollout_routed_experts")
    parser.add_argument("--dp-sizes", type=_dp_sizes, default=None, help="e.g. 8,64,256")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each measurement, at least")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    dp_sizes = args.dp_sizes or DP_SIZES[args.workload]
    return Options(args.workload, args.moe, dp_sizes, args.repeats, out=args.out)


@contextmanager
def local_ray(object_store_bytes: int) -> Iterator[None]:
    """A local Ray for the run; its workers import this checkout; shut down on exit."""
    if ray.is_initialized():
        msg = "Ray is already running in this process; the harness starts and stops its own"
        raise RuntimeError(msg)
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), saved]))
    try:
        ray.init(
            address="local",  # a new instance, even if another Ray runs on this machine
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=object_store_bytes,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    try:
        yield
    finally:
        ray.shutdown()


def _store_bytes(shape: dict[str, Any], moe_bytes: int) -> int:
    """A store that holds two pickled classic batches and three Arrow batches at once."""
    tokens, response = shape["num_tokens"], shape["response_tokens"]
    pickled = 5 * tokens + 11 * response + moe_bytes
    arrow = 4 * tokens + 5 * response + moe_bytes
    return max(512 * _MIB, 2 * pickled + 3 * arrow + 256 * _MIB)


def run(options: Options) -> dict[str, Any]:
    """Run the whole benchmark; return every figure, JSON-ready (nothing is written)."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with Progress(enabled=options.progress) as progress:
        progress.expect(1)
        with progress.task("generate workload"):
            workload = Workload.generate(options.workload, seed=options.seed, moe=options.moe)
        experts = workload.arrays.get("rollout_routed_experts", [])
        store = _store_bytes(workload.describe(), 4 * sum(array.size for array in experts))
        with local_ray(store):
            results = run_phases(workload, options, progress)
    results["meta"] = report.machine_and_versions()
    results["meta"].update(
        started=stamp,
        wall_s=time.perf_counter() - started,
        load_average={"before": list(load_before), "after": list(os.getloadavg())},
        object_store_bytes=store,
        options={key: str(value) for key, value in dataclasses.asdict(options).items()},
    )
    results["ratios"] = report.ratios(results)
    results["targets"] = report.targets(results)
    return results


def write_outputs(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and ``per_rank.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out / "results.json",
        "markdown": out / "results.md",
        "plot": out / "per_rank.png",
    }
    report.write_json(results, paths["json"])
    paths["markdown"].write_text(tables.markdown(results), encoding="utf-8")
    report.plot(results, paths["plot"])
    return paths


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the tables and where the files went."""
    options = parse_args(argv)
    results = run(options)
    paths = write_outputs(results, options.out)
    print(tables.markdown(results))
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    print(f"wall time: {results['meta']['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
