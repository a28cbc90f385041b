"""Benchmark harness: arrow_split against the classic dict-of-lists path, in one run.

Run from the repository root::

    python -m benchmarks.harness --workload medium            # what `make bench` runs
    python -m benchmarks.harness --workload small --moe --dp-sizes 8,64 --repeats 5

One run generates the seeded workload (:data:`arrow_split.testing.WORKLOADS`) as Python lists
and numpy arrays, starts a local Ray (2 CPUs, an object store sized for the workload), runs the
phases of :mod:`benchmarks.phases` (build; the agreement check of the baseline's and
arrow_split's shards, which stops the run if they differ; the puts; the planners; the ranks),
shuts Ray down and writes ``results.json``, ``results.md`` and ``per_rank.png`` under ``--out``.

The classic path runs only where its Python lists fit: :func:`classic_fits` estimates what they
cost (the driver's lists, a delayed rank's unpickled copy, the pickles in the store) against the
memory available. Where they do not (the ``large`` workload on a 24 GiB machine), the run
measures arrow_split alone, from numpy arrays, says so in ``results["classic"]``, and writes
``results.json`` and a short ``results.md`` (no ratios, no plot).
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

import psutil
import ray

from arrow_split.testing import WORKLOADS as WORKLOADS_BY_NAME
from arrow_split.testing import make_lengths, make_train_data
from benchmarks import report, tables
from benchmarks.config import DP_SIZES, MOE_SHAPE, Options, Progress, Workload
from benchmarks.phases import run_phases

__all__ = [
    "classic_fits",
    "dp_sizes_arg",
    "local_ray",
    "main",
    "parse_args",
    "run",
    "write_outputs",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
_MIB = 2**20


def dp_sizes_arg(text: str, *, allow_empty: bool = False) -> tuple[int, ...]:
    """An argparse type: comma-separated positive ints (``""`` too, with ``allow_empty``)."""
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        values = ()
    if (not values and not (allow_empty and not text.strip())) or min(values, default=1) < 1:
        msg = f"expected comma-separated positive ints such as 8,64,256, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return values


def parse_args(argv: list[str] | None = None) -> Options:
    """Parse the command line into :class:`benchmarks.config.Options`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workload", choices=list(DP_SIZES), default="medium")
    parser.add_argument("--moe", action="store_true", help="add rollout_routed_experts")
    parser.add_argument("--dp-sizes", type=dp_sizes_arg, default=None, help="e.g. 8,64,256")
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


def _store_bytes(shape: dict[str, Any], moe_bytes: int, classic: bool = True) -> int:
    """A store that holds two pickled classic batches and three Arrow batches at once."""
    tokens, response = shape["num_tokens"], shape["response_tokens"]
    pickled = 5 * tokens + 11 * response + moe_bytes if classic else 0
    arrow = 4 * tokens + 5 * response + moe_bytes
    return max(512 * _MIB, 2 * pickled + 3 * arrow + 256 * _MIB)


def classic_fits(options: Options) -> tuple[bool, dict[str, Any]]:
    """Whether the classic path's Python lists fit in half the memory available now.

    A Python int token costs 36 bytes in a list (pointer and object), a float log-prob 32, a
    cached 0/1 mask 8: the driver holds the lists, a delayed rank unpickles a second copy, and
    the store keeps two pickles (5 and 11 bytes per token and response token).
    """
    config = dataclasses.replace(WORKLOADS_BY_NAME[options.workload], seed=options.seed)
    lengths = make_lengths(config)
    prompt_mean = sum(config.prompt_tokens) / 2
    tokens, response = int(lengths.sum()), int(lengths.sum() - config.samples * prompt_mean)
    lists = 36 * tokens + 40 * response
    needed = 2 * lists + 2 * (5 * tokens + 11 * response)
    available = int(psutil.virtual_memory().available)
    estimate = {"needed_bytes": needed, "available_bytes": available}
    return needed <= available // 2, estimate


def _workload(options: Options, classic: bool) -> Workload:
    """The seeded workload; without the classic path, its numpy arrays only (no lists)."""
    if classic:
        return Workload.generate(options.workload, seed=options.seed, moe=options.moe)
    config = dataclasses.replace(
        WORKLOADS_BY_NAME[options.workload],
        seed=options.seed,
        moe_shape=MOE_SHAPE if options.moe else None,
    )
    arrays = make_train_data(dataclasses.replace(config, as_numpy=True))
    return Workload(options.workload, config, {}, arrays)


def run(options: Options) -> dict[str, Any]:
    """Run the whole benchmark; return every figure, JSON-ready (nothing is written)."""
    started = time.perf_counter()
    load_before = os.getloadavg()
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    classic, estimate = classic_fits(options)
    with Progress(enabled=options.progress) as progress:
        progress.expect(1)
        with progress.task("generate workload"):
            workload = _workload(options, classic)
        experts = workload.arrays.get("rollout_routed_experts", [])
        moe_bytes = 4 * sum(array.size for array in experts)
        store = _store_bytes(workload.describe(), moe_bytes, classic)
        with local_ray(store):
            results = run_phases(workload, options, progress, classic=classic)
    results["classic"] = {"measured": classic, **estimate}
    results["meta"] = report.machine_and_versions()
    results["meta"].update(
        started=stamp,
        wall_s=time.perf_counter() - started,
        load_average={"before": list(load_before), "after": list(os.getloadavg())},
        object_store_bytes=store,
        options={key: str(value) for key, value in dataclasses.asdict(options).items()},
    )
    if classic:
        results["ratios"] = report.ratios(results)
        results["targets"] = report.targets(results)
    return results


def write_outputs(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """Write ``results.json``, ``results.md`` and ``per_rank.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    if not results["classic"]["measured"]:
        paths = {"json": out / "results.json", "markdown": out / "results.md"}
        report.write_json(results, paths["json"])
        paths["markdown"].write_text(_arrow_only_markdown(results), encoding="utf-8")
        return paths
    paths = {
        "json": out / "results.json",
        "markdown": out / "results.md",
        "plot": out / "per_rank.png",
    }
    report.write_json(results, paths["json"])
    paths["markdown"].write_text(tables.markdown(results), encoding="utf-8")
    report.plot(results, paths["plot"])
    return paths


def _mib(nbytes: float) -> str:
    return f"{nbytes / _MIB:,.0f} MiB"


def _arrow_only_markdown(results: dict[str, Any]) -> str:
    """A short report of an arrow_split-only run: puts, driver memory, ranks' medians."""
    workload, put = results["workload"], results["put"]
    batch = workload["batch_nbytes"]
    lines = [
        f"## {workload['name']}: arrow_split only (the classic path does not fit in memory)",
        "",
        f"{workload['num_samples']:,} samples, {workload['num_tokens']:,} tokens, "
        f"batch {_mib(batch)}; classic path needs ~{_mib(results['classic']['needed_bytes'])}, "
        f"available {_mib(results['classic']['available_bytes'])}.",
        "",
        "| step | median s | driver private peak | / batch bytes | store bytes |",
        "|---|---|---|---|---|",
    ]
    steps = [("build from numpy", results["build"]["from_numpy"])]
    steps += [("build + put delayed", put["arrow_build_and_put"])]
    steps += [("put delayed", put["arrow_delayed"])]
    steps += [(f"put eager dp={dp}", figures) for dp, figures in put["arrow_eager"].items()]
    for name, figures in steps:
        private = figures["driver"]["private_increase_bytes"]
        lines.append(
            f"| {name} | {figures['seconds']['median']:.3f} | {_mib(private)} | "
            f"{private / batch:.2f} | {_mib(figures.get('store_bytes', 0))} |"
        )
    lines += ["", "| rank | dp_size | mode | median s (sum of steps) |", "|---|---|---|---|"]
    for record in results["per_rank"]:
        lines.append(
            f"| {record['rank']} | {record['dp_size']} | {record['mode']} | "
            f"{record['sum']['median']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; prints the tables and where the files went."""
    options = parse_args(argv)
    results = run(options)
    paths = write_outputs(results, options.out)
    print(paths["markdown"].read_text(encoding="utf-8"))
    for kind, path in paths.items():
        print(f"wrote {kind}: {path}")
    print(f"wall time: {results['meta']['wall_s']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
