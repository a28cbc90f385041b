"""The phases of one benchmark run (build, agreement, puts, planner, ranks), on a running Ray.

:func:`run_phases` returns every figure as a JSON-ready dict; :mod:`benchmarks.harness` starts
and stops Ray around it and :mod:`benchmarks.report` turns the figures into ratios and tables.
"""

from __future__ import annotations

import functools
import gc
from typing import Any

from arrow_split import RolloutBatch, split_train_data_by_dp_raw
from benchmarks import agreement, arrow_path, baseline, driver
from benchmarks.bench_planner import measure_planner
from benchmarks.config import CONFIGS, PLANNER_TARGET, Options, Progress, pick_ranks
from benchmarks.rank_phase import rank_phase
from benchmarks.workloads import Workload

__all__ = ["run_phases"]


def _build_phase(
    workload: Workload, options: Options, progress: Progress
) -> tuple[dict[str, Any], RolloutBatch]:
    with progress.task("build from numpy arrays"):
        from_numpy, _ = driver.measure_build(workload.arrays, options.runs)
    with progress.task("build from Python lists"):
        from_lists, batch = driver.measure_build(workload.lists, options.runs)
    return {"from_lists": from_lists, "from_numpy": from_numpy}, batch


def _agreement_phase(
    workload: Workload, batch: RolloutBatch, options: Options, progress: Progress
) -> list[dict[str, Any]]:
    checked = []
    for dp_size in options.dp_sizes:
        with progress.task(f"agreement dp={dp_size}"):
            ranks = pick_ranks(dp_size, options.ranks_per_config)
            checked.append(
                agreement.check_agreement(
                    workload.lists, batch, dp_size, ranks, options.balance_data
                )
            )
    return checked


def _put_phase(
    workload: Workload, batch: RolloutBatch, options: Options, progress: Progress
) -> dict[str, Any]:
    repeats, balance = options.runs, options.balance_data
    first = options.dp_sizes[0]
    puts: dict[str, Any] = {"baseline_eager": {}, "arrow_eager": {}, "per_rank_buffers": {}}
    with progress.task("put one contiguous buffer"):
        puts["single_buffer"] = driver.single_buffer_put(batch.nbytes, repeats)
    with progress.task("put arrow delayed"):
        puts["arrow_delayed"] = driver.measure_put(
            lambda: arrow_path.put_delayed(batch, first, balance), repeats
        )
    with progress.task("put baseline delayed"):
        puts["baseline_delayed"] = driver.measure_put(
            lambda: baseline.put_delayed(workload.lists), repeats
        )
    for dp_size in options.dp_sizes:
        with progress.task(f"put {dp_size} plain buffers"):
            sizes = [
                shard.nbytes
                for shard in split_train_data_by_dp_raw(batch, dp_size, balance_data=balance)
            ]
            puts["per_rank_buffers"][str(dp_size)] = driver.per_rank_buffers_put(sizes, repeats)
        with progress.task(f"put arrow eager dp={dp_size}"):
            puts["arrow_eager"][str(dp_size)] = driver.measure_put(
                functools.partial(arrow_path.put_eager, batch, dp_size, balance), repeats
            )
        with progress.task(f"put baseline eager dp={dp_size}"):
            puts["baseline_eager"][str(dp_size)] = driver.measure_put(
                functools.partial(baseline.put_eager, workload.lists, dp_size, balance), repeats
            )
    return puts


def _planner_sizes(workload: Workload, options: Options) -> list[tuple[int, int]]:
    """The workload's size at every dp_size the balanced plan accepts, then the reference point."""
    n = workload.num_samples
    sizes = [(n, dp_size) for dp_size in options.dp_sizes if n >= dp_size and n % dp_size == 0]
    return [*sizes, PLANNER_TARGET]


def _planner_phase(workload: Workload, options: Options, progress: Progress) -> list[Any]:
    planner = []
    for n, dp_size in _planner_sizes(workload, options):
        with progress.task(f"planner n={n} dp={dp_size}"):
            planner.append(measure_planner(n, dp_size, options.repeats, seed=options.seed))
    return planner


def run_phases(workload: Workload, options: Options, progress: Progress) -> dict[str, Any]:
    """Run every phase on the running Ray; return the figures (ratios are added later)."""
    dp_count = len(options.dp_sizes)
    puts = 3 + 2 * dp_count
    configs = dp_count * len(CONFIGS)
    progress.expect(2 + dp_count + puts + len(_planner_sizes(workload, options)) + configs)
    build, batch = _build_phase(workload, options, progress)
    description = {**workload.describe(), "batch_nbytes": batch.nbytes}
    results: dict[str, Any] = {
        "workload": description,
        "plan": "balanced" if options.balance_data else "strided",
        "dp_sizes": list(options.dp_sizes),
        "repeats": options.repeats,
        "min_seconds": options.min_seconds,
        "build": build,
        "agreement": _agreement_phase(workload, batch, options, progress),
    }
    results["put"] = _put_phase(workload, batch, options, progress)
    results["planner"] = _planner_phase(workload, options, progress)
    results.update(rank_phase(workload, batch, options, progress))
    del batch
    gc.collect()
    return results
