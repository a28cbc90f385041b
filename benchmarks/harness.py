"""Benchmark harness: arrow_split against the classic dict-of-lists path, in one run.

Run from the repository root::

    python -m benchmarks.harness --workload medium            # what `make bench` runs
    python -m benchmarks.harness --workload small --moe --dp-sizes 8,64 --repeats 5

What one run does, in order (a progress bar follows it):

1. generates the seeded workload (:mod:`benchmarks.workloads`) as Python lists and numpy arrays;
2. starts a local Ray (2 CPUs, no dashboard, an object store sized for the workload);
3. times ``RolloutBatch.from_train_data`` from both forms;
4. checks that the baseline and arrow_split give the measured ranks the same shards
   (:mod:`benchmarks.agreement`), and stops if they do not;
5. times the driver's puts: both paths, both modes, and one contiguous buffer of the batch's size
   (:mod:`benchmarks.driver`);
6. times the planners (``bench_planner.measure_planner``);
7. times a few ranks of every (path, mode, dp_size) inside Ray actors, and a memcpy of each
   measured rank's bytes (:mod:`benchmarks.ranks`);
8. shuts Ray down, derives the ratios and writes ``results.json``, ``results.md`` and
   ``per_rank.png`` (:mod:`benchmarks.report`) under ``--out``.

Every figure is the minimum and the median over at least ``--repeats`` runs; a cheap one runs
more often, until its runs add up to ``--min-seconds`` (at most ten times ``--repeats``), so that
a burst of noise from other processes moves its median less.
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
from benchmarks.config import Options, Progress
from benchmarks.phases import run_phases
from benchmarks.workloads import WORKLOADS, generate

__all__ = [
    "Options",
    "local_ray",
    "main",
    "object_store_bytes",
    "parse_args",
    "run",
    "write_outputs",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results"
_MIB = 2**20


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        msg = f"expected comma-separated positive ints such as 8,64,256, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not values or min(values) < 1:
        msg = f"expected comma-separated positive ints such as 8,64,256, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def parse_args(argv: list[str] | None = None) -> Options:
    """Parse the command line into :class:`Options`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workload", choices=list(WORKLOADS), default="medium")
    parser.add_argument("--moe", action="store_true", help="add rollout_routed_experts")
    parser.add_argument("--dp-sizes", type=_int_list, default=None, help="e.g. 8,64,256")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each measurement, at least")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=0.5,
        help="repeat a cheap measurement until its runs take this long (at most 10x --repeats)",
    )
    parser.add_argument("--ranks-per-config", type=int, default=2, help="ranks timed per config")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--strided", action="store_true", help="strided plan, not balanced")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.ranks_per_config < 1:
        parser.error("--repeats and --ranks-per-config must be >= 1")
    return Options(
        workload=args.workload,
        moe=args.moe,
        dp_sizes=args.dp_sizes or WORKLOADS[args.workload].dp_sizes,
        repeats=args.repeats,
        min_seconds=args.min_seconds,
        ranks_per_config=args.ranks_per_config,
        balance_data=not args.strided,
        seed=args.seed,
        out=args.out,
        plot=not args.no_plot,
        progress=not args.no_progress,
    )


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


def object_store_bytes(num_tokens: int, response_tokens: int, moe_bytes: int) -> int:
    """A store that holds two pickled classic batches and three Arrow batches at once."""
    pickled = 5 * num_tokens + 11 * response_tokens + moe_bytes
    arrow = 4 * num_tokens + 5 * response_tokens + moe_bytes
    return max(512 * _MIB, 2 * pickled + 3 * arrow + 256 * _MIB)


def run(options: Options) -> dict[str, Any]:
    """Run the whole benchmark; return every figure, JSON-ready (nothing is written)."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with Progress(enabled=options.progress) as progress:
        progress.expect(1)
        with progress.task("generate workload"):
            workload = generate(options.workload, seed=options.seed, moe=options.moe)
        shape = workload.describe()
        moe_bytes = 4 * int(sum(a.size for a in workload.arrays.get("rollout_routed_experts", [])))
        store = object_store_bytes(shape["num_tokens"], shape["response_tokens"], moe_bytes)
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


def write_outputs(results: dict[str, Any], out: Path, *, plot: bool) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and (with ``plot``) ``per_rank.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "results.json", "markdown": out / "results.md"}
    report.write_json(results, paths["json"])
    paths["markdown"].write_text(tables.markdown(results), encoding="utf-8")
    if plot:
        paths["plot"] = out / "per_rank.png"
        report.plot(results, paths["plot"])
    return paths


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the tables and where the files went."""
    options = parse_args(argv)
    results = run(options)
    paths = write_outputs(results, options.out, plot=options.plot)
    print(tables.markdown(results))
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    print(f"wall time: {results['meta']['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
