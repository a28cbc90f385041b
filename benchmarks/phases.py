"""The phases of one harness run, on a running Ray: build, agreement, puts, planner, ranks.

- **Agreement**: before anything is timed, every measured rank must get the same shard from
  the baseline (:func:`benchmarks.baseline.classic_split`) and from arrow_split (``shard_for_rank``,
  and the Ray leaf's eager and delayed ``process_rollout_data``), compared in the classic
  rollout layout (``to_train_data(layout="rollout")``).
- **Puts**: timed from the call to its return; the bytes each leaves in the store come from Ray:
  ``ray.experimental.get_object_locations(refs)[ref]["object_size"]`` summed over the refs, and
  ``did_spill`` says whether any was spilled. ``driver`` holds the driver's memory figures
  (:class:`benchmarks.timing.MemoryGauge`, the worst repeat).
- **Ranks**: for every dp_size and (path, mode), the objects are put (untimed), a fresh
  :class:`benchmarks.ranks.RankActor` times a few ranks, and the delayed arrow_split actor also
  times a memcpy of each rank's bytes.
- **Without the classic path** (``classic=False``, when its Python lists would not fit in memory:
  the ``large`` workload): the workload has no lists; the agreement check compares against the
  baseline's split of the numpy arrays, and nothing of the baseline is timed.
  ``put.arrow_build_and_put`` then times ``from_train_data`` and the delayed put as one call, for
  the driver's peak memory of the whole path.
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import ray

from arrow_split import RolloutBatch, shard_for_rank, split_train_data_by_dp_raw
from arrow_split.ray import process_rollout_data
from benchmarks import arrow_path, baseline
from benchmarks.bench_planner import measure_planner
from benchmarks.config import CONFIGS, PLANNER_TARGET, Options, Progress, Workload, pick_ranks
from benchmarks.ranks import RankActor
from benchmarks.timing import MemoryGauge, Repeats, summarize

__all__ = ["run_phases", "shard_differences"]


# --- agreement ---------------------------------------------------------------------------------


def _same(left: Any, right: Any) -> bool:
    """Equal values; numpy arrays (one per sample, or whole) compare by shape and values."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return bool(np.array_equal(np.asarray(left), np.asarray(right)))
    both_lists = isinstance(left, list) and isinstance(right, list)
    if both_lists and any(isinstance(value, np.ndarray) for value in [*left, *right]):
        return len(left) == len(right) and all(map(_same, left, right))
    return bool(left == right)


def shard_differences(classic: Mapping[str, Any], arrow: Mapping[str, Any]) -> list[str]:
    """The keys on which two classic-layout shards differ (missing ones included), or ``[]``."""
    keys = sorted(set(classic) | set(arrow))
    return [
        k for k in keys if k not in classic or k not in arrow or not _same(classic[k], arrow[k])
    ]


def _check_agreement(
    data: Mapping[str, Any], batch: RolloutBatch, dp_size: int, ranks: list[int], balance: bool
) -> dict[str, Any]:
    """Raise ``AssertionError`` unless every path gives each of ``ranks`` the baseline's shard."""
    classic = baseline.classic_split(data, dp_size, balance)
    refs = arrow_path.put_eager(batch, dp_size, balance)
    ref = arrow_path.put_delayed(batch, dp_size, balance)
    for rank in ranks:
        shards = {
            "shard_for_rank": shard_for_rank(batch, rank, dp_size, balance_data=balance),
            "eager leaf": process_rollout_data(refs, rank, dp_size, balance_data=balance),
            "delayed leaf": process_rollout_data(ref, rank, dp_size, balance_data=balance),
        }
        for where, shard in shards.items():
            differences = shard_differences(classic[rank], shard.to_train_data(layout="rollout"))
            if differences:
                msg = (
                    f"dp_size={dp_size}, rank={rank}, {where}: the baseline and arrow_split "
                    f"disagree on keys {differences}"
                )
                raise AssertionError(msg)
    return {"dp_size": dp_size, "ranks": ranks, "paths": ["shard_for_rank", "eager", "delayed"]}


# --- driver: build and puts --------------------------------------------------------------------


def _timed(call: Callable[[], Any]) -> tuple[float, dict[str, int], Any]:
    """Seconds, driver memory figures and result of one call, after a garbage collection."""
    gc.collect()
    with MemoryGauge() as gauge:
        start = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - start
    return seconds, gauge.figures, result


def _measure(call: Callable[[], Any], repeats: Repeats, *, put: bool) -> tuple[dict[str, Any], Any]:
    """Time ``call``; for a put, read what Ray stored and drop the refs before the next run."""
    seconds, memory, store, result = [], [], {}, None
    for _ in repeats:
        result = None
        took, figures, result = _timed(call)
        seconds.append(took)
        memory.append(figures)
        if put:
            refs = result if isinstance(result, list) else [result]
            locations = ray.experimental.get_object_locations(refs)
            store = {
                "objects": len(refs),
                "store_bytes": sum(int(e.get("object_size") or 0) for e in locations.values()),
                "spilled": any(bool(e.get("did_spill")) for e in locations.values()),
            }
            del refs, locations
            result = None
    worst = {key: max(entry[key] for entry in memory) for key in memory[0]}
    return {"seconds": summarize(seconds), "driver": worst, **store}, result


def _buffers_put(sizes: list[int], repeats: Repeats) -> dict[str, Any]:
    """The limit of a put: a ``ray.put`` of a plain buffer per size (Ray's cost per object)."""
    buffers = [np.ones(max(size, 1), dtype=np.uint8) for size in sizes]
    figures, _ = _measure(lambda: [ray.put(buffer) for buffer in buffers], repeats, put=True)
    return {**figures, "bytes": sum(sizes)}


def _build_phase(
    workload: Workload, runs: Repeats, classic: bool
) -> tuple[dict[str, Any], RolloutBatch]:
    build: dict[str, Any] = {}
    forms = (("from_numpy", workload.arrays), ("from_lists", workload.lists))
    for name, data in forms if classic else forms[:1]:
        figures, batch = _measure(
            lambda data=data: RolloutBatch.from_train_data(data), runs, put=False
        )
        build[name] = {**figures, "nbytes": batch.nbytes}
    return build, batch


def _build_and_put(workload: Workload, dp_size: int, balance: bool) -> Any:
    """The driver's whole arrow_split path: build the batch and put it (delayed)."""
    return arrow_path.put_delayed(RolloutBatch.from_train_data(workload.arrays), dp_size, balance)


def _put_phase(
    workload: Workload, batch: RolloutBatch, options: Options, progress: Progress, classic: bool
) -> dict[str, Any]:
    runs, balance, first = options.runs, options.balance_data, options.dp_sizes[0]
    puts: dict[str, Any] = {"baseline_eager": {}, "arrow_eager": {}, "per_rank_buffers": {}}
    with progress.task("put one contiguous buffer"):
        puts["single_buffer"] = _buffers_put([batch.nbytes], runs)
    with progress.task("put delayed"):
        delayed = functools.partial(arrow_path.put_delayed, batch, first, balance)
        puts["arrow_delayed"], _ = _measure(delayed, runs, put=True)
        if classic:
            base = functools.partial(baseline.put_delayed, workload.lists)
            puts["baseline_delayed"], _ = _measure(base, runs, put=True)
        else:
            whole = functools.partial(_build_and_put, workload, first, balance)
            puts["arrow_build_and_put"], _ = _measure(whole, runs, put=True)
    for dp in options.dp_sizes:
        with progress.task(f"put eager dp={dp}"):
            shards = split_train_data_by_dp_raw(batch, dp, balance_data=balance)
            puts["per_rank_buffers"][str(dp)] = _buffers_put([s.nbytes for s in shards], runs)
            del shards
            eager = functools.partial(arrow_path.put_eager, batch, dp, balance)
            puts["arrow_eager"][str(dp)], _ = _measure(eager, runs, put=True)
            if classic:
                base = functools.partial(baseline.put_eager, workload.lists, dp, balance)
                puts["baseline_eager"][str(dp)], _ = _measure(base, runs, put=True)
    if not classic:
        del puts["baseline_eager"]
    return puts


# --- ranks -------------------------------------------------------------------------------------


def _put_for(
    workload: Workload, batch: RolloutBatch, path: str, mode: str, dp: int, bal: bool
) -> Any:
    if path == "baseline":
        if mode == "eager":
            return baseline.put_eager(workload.lists, dp, bal)
        return baseline.put_delayed(workload.lists)
    if mode == "eager":
        return arrow_path.put_eager(batch, dp, bal)
    return arrow_path.put_delayed(batch, dp, bal)


def _rank_phase(
    workload: Workload, batch: RolloutBatch, options: Options, progress: Progress, classic: bool
) -> dict[str, Any]:
    per_rank: list[dict[str, Any]] = []
    memcpy: list[dict[str, Any]] = []
    configs = [(path, mode) for path, mode in CONFIGS if classic or path != "baseline"]
    for dp in options.dp_sizes:
        for path, mode in configs:
            with progress.task(f"ranks {path} {mode} dp={dp}"):
                refs = _put_for(workload, batch, path, mode, dp, options.balance_data)
                actor = RankActor.remote()  # type: ignore[attr-defined]
                ray.get(actor.ready.remote())
                for rank in pick_ranks(dp, options.ranks_per_config):
                    arguments = ([refs], rank, dp, options.balance_data, options.runs)
                    record = ray.get(actor.run.remote(path, mode, *arguments))
                    per_rank.append(
                        {**record, "path": path, "mode": mode, "dp_size": dp, "rank": rank}
                    )
                    if (path, mode) == ("arrow", "delayed"):
                        figures = ray.get(actor.memcpy.remote(record["rank_bytes"], options.runs))
                        memcpy.append({"dp_size": dp, "rank": rank, **figures})
                ray.kill(actor)
                del refs, actor
                gc.collect()
    return {"per_rank": per_rank, "memcpy": memcpy}


def _planner_sizes(workload: Workload, options: Options) -> list[tuple[int, int]]:
    """The workload's size at every dp_size the balanced plan accepts, then the reference point."""
    n = workload.num_samples
    return [*((n, dp) for dp in options.dp_sizes if n % dp == 0 and n >= dp), PLANNER_TARGET]


def run_phases(
    workload: Workload, options: Options, progress: Progress, *, classic: bool = True
) -> dict[str, Any]:
    """Run every phase on the running Ray; return the figures (ratios are added later).

    ``classic=False`` leaves out every timing of the baseline (see the module docstring).
    """
    dp_count, planner_sizes = len(options.dp_sizes), _planner_sizes(workload, options)
    configs = len(CONFIGS) if classic else len(CONFIGS) // 2
    progress.expect(1 + 2 * dp_count + 2 + len(planner_sizes) + dp_count * configs)
    with progress.task("build from numpy arrays and from Python lists"):
        build, batch = _build_phase(workload, options.runs, classic)
    results: dict[str, Any] = {
        "workload": {**workload.describe(), "batch_nbytes": batch.nbytes},
        "plan": "balanced" if options.balance_data else "strided",
        "dp_sizes": list(options.dp_sizes),
        "repeats": options.repeats,
        "min_seconds": options.min_seconds,
        "build": build,
        "agreement": [],
    }
    for dp in options.dp_sizes:
        with progress.task(f"agreement dp={dp}"):
            ranks = pick_ranks(dp, options.ranks_per_config)
            data = workload.lists if classic else workload.arrays
            check = _check_agreement(data, batch, dp, ranks, options.balance_data)
            results["agreement"].append(check)
    results["put"] = _put_phase(workload, batch, options, progress, classic)
    results["planner"] = []
    for n, dp in planner_sizes:
        with progress.task(f"planner n={n} dp={dp}"):
            results["planner"].append(measure_planner(n, dp, options.repeats, seed=options.seed))
    results.update(_rank_phase(workload, batch, options, progress, classic))
    del batch
    gc.collect()
    return results
