"""miles' delayed step in real Ray processes: miles' classic dict against the drop-in everywhere.

A rollout actor runs the stand-in miles' ``generate`` (``tests/standin``, laid out like miles):
in delayed mode it puts the train data inline through miles' store singleton. Train actors, one
process each, call ``process_rollout_data`` through the stand-in's ``get_rollout_data``.
*classic*: the stand-in as it is (the whole dict pickled; each rank unpickles it and splits it
for every rank). *arrow_split*: the same code in processes started with ``ARROW_SPLIT_MILES``
set, so each installs the drop-in when miles is imported and the put stores one Arrow batch.

Per rank: ``get_rollout_data`` in the rank's process; whole step: the put plus the slowest
measured rank. Floors: the lists' conversion alone (put), ``tolist`` of flat arrays (rank).
The modes' steps alternate; one warm-up step, then medians. Writes ``miles_job.json``.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import time
from argparse import Namespace
from typing import Any

import numpy as np
import ray

from arrow_split import RolloutBatch
from arrow_split.compat.miles import ENV_VAR, current_installation
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks._common import (
    REPO_ROOT,
    MemoryGauge,
    Results,
    benchmark_parser,
    local_ray,
    object_sizes,
    run_main,
)

__all__ = ["main"]

STANDIN = REPO_ROOT / "tests" / "standin"
STEP_DATA: dict[int, dict[str, Any]] = {}  # the rollout process's step, made before the timing


def cached_train_data(args: Namespace, rollout_id: int) -> dict[str, Any]:
    """The stand-in's rollout function: the step's train data, made before ``generate``."""
    return STEP_DATA[rollout_id]


@ray.remote(num_cpus=0)
class RolloutSide:
    """The rollout manager's process: makes a step's data, then times miles' ``generate``."""

    def __init__(self, args: Namespace) -> None:
        from miles.ray.rollout.rollout_manager import RolloutManager

        self.config = dataclasses.replace(WORKLOADS["medium"], samples=args.num_samples)
        self.manager = RolloutManager(args, {"dp_size": args.dp_size})

    def step(self, rollout_id: int) -> dict[str, Any]:
        from benchmarks import miles_job  # the module the stand-in's rollout function reads

        miles_job.STEP_DATA.clear()
        miles_job.STEP_DATA[rollout_id] = make_train_data(self.config, rollout_id)
        with MemoryGauge() as gauge:
            started = time.perf_counter()
            ref = self.manager.generate(rollout_id)["data_ref"]
            seconds = time.perf_counter() - started
        floor = time.perf_counter()
        RolloutBatch.from_train_data(miles_job.STEP_DATA[rollout_id])
        floor = time.perf_counter() - floor
        installed = current_installation() is not None
        return {
            "ref": ref,
            "put_s": seconds,
            "floor_s": floor,
            "installed": installed,
            **gauge.figures,
        }


@ray.remote(num_cpus=0)
class RankSide:
    """One train actor's process: ``get_rollout_data`` of its rank, timed."""

    def __init__(self, args: Namespace, dp_rank: int) -> None:
        from miles.ray.train_actor import TrainRayActor

        self.actor = TrainRayActor(args, dp_rank, args.dp_size)

    def take(self, boxed: dict[str, Any]) -> dict[str, Any]:
        with MemoryGauge() as gauge:
            started = time.perf_counter()
            rollout_data = self.actor.get_rollout_data(boxed["ref"])
            seconds = time.perf_counter() - started
        lists = [np.concatenate(value) for value in rollout_data.values() if _ragged(value)]
        floor = time.perf_counter()  # the least a dict of Python lists costs: its values alone
        for flat in lists:
            flat.tolist()
        floor = time.perf_counter() - floor
        samples = len(rollout_data["tokens"])
        del rollout_data
        installed = current_installation() is not None
        return {
            "seconds": seconds,
            "list_floor_s": floor,
            "samples": samples,
            "installed": installed,
            **gauge.figures,
        }


def _ragged(value: object) -> bool:
    """A per-sample list of lists of numbers (what a rank's dict holds as Python lists)."""
    return isinstance(value, list) and bool(value) and isinstance(value[0], list)


def _processes(options: Any, name: str) -> tuple[Any, list[Any]]:
    """A rollout process and the measured ranks' processes, with or without the drop-in."""
    args = Namespace(
        balance_data=True,
        delay_split_train_data_by_dp=True,
        rollout_function_path="benchmarks.miles_job.cached_train_data",
        num_samples=options.samples,
        dp_size=options.dp_size,
    )
    env = {"env_vars": {ENV_VAR: "1" if name == "arrow_split" else ""}}
    rollout = RolloutSide.options(runtime_env=env).remote(args)  # type: ignore[attr-defined]
    ranks = [
        RankSide.options(runtime_env=env).remote(args, rank)  # type: ignore[attr-defined]
        for rank in options.ranks
    ]
    return rollout, ranks


def _step(rollout: Any, ranks: list[Any], step: int) -> dict[str, Any]:
    put = ray.get(rollout.step.remote(step))
    ref = put.pop("ref")
    takes = [ray.get(rank.take.remote({"ref": ref})) for rank in ranks]  # one at a time
    return {"put": put, "ranks": takes, "object_bytes": sum(object_sizes(ref.inner))}


def _summary(steps: list[dict[str, Any]], ranks: list[int]) -> dict[str, Any]:
    def median_of(rank: int, field: str) -> float:
        return statistics.median(step["ranks"][rank][field] for step in steps)

    rank_medians = [median_of(i, "seconds") for i in range(len(ranks))]
    return {
        "steps": steps,
        "put_s": statistics.median(s["put"]["put_s"] for s in steps),
        "conversion_floor_s": statistics.median(s["put"]["floor_s"] for s in steps),
        "rank_s": dict(zip(map(str, ranks), rank_medians, strict=True)),
        "slowest_rank_s": max(rank_medians),
        "list_floor_s": max(median_of(i, "list_floor_s") for i in range(len(ranks))),
        "whole_step_s": statistics.median(
            s["put"]["put_s"] + max(r["seconds"] for r in s["ranks"]) for s in steps
        ),
        "object_bytes": steps[-1]["object_bytes"],
        "every_process_installed": all(
            s["put"]["installed"] and all(r["installed"] for r in s["ranks"]) for s in steps
        ),
    }


def _modes(options: Any) -> dict[str, dict[str, Any]]:
    """Both modes, their steps interleaved (a load that comes and goes hits both alike)."""
    processes = {name: _processes(options, name) for name in ("classic", "arrow_split")}
    steps: dict[str, list[dict[str, Any]]] = {name: [] for name in processes}
    for step in range(options.steps + 1):  # step 0 warms each process up
        for name, (rollout, ranks) in processes.items():
            steps[name].append(_step(rollout, ranks, step))
    for rollout, ranks in processes.values():
        for handle in (rollout, *ranks):
            ray.kill(handle)
    return {name: _summary(kept[1:], options.ranks) for name, kept in steps.items()}


def run(options: Any) -> dict[str, Results]:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(STANDIN), saved]))
    sys.path.insert(0, str(STANDIN))  # the driver unpickles miles' reference type
    try:
        with local_ray(options.store_bytes):
            modes = _modes(options)
    finally:
        sys.path.remove(str(STANDIN))
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    classic, ours = modes["classic"], modes["arrow_split"]
    ratios = {
        "per_rank": classic["slowest_rank_s"] / ours["slowest_rank_s"],
        "whole_step": classic["whole_step_s"] / ours["whole_step_s"],
        "put": classic["put_s"] / ours["put_s"],
        "whole_step_floor": classic["whole_step_s"] / ours["conversion_floor_s"],
        "per_rank_floor": classic["slowest_rank_s"] / ours["list_floor_s"],
    }
    config = {
        "samples": options.samples,
        "dp_size": options.dp_size,
        "ranks": options.ranks,
        "steps": options.steps,
        "workload": "medium" if options.samples == WORKLOADS["medium"].samples else "custom",
    }
    return {"miles_job.json": {"config": config, "modes": modes, "ratios": ratios}}


def parse_args(argv: list[str] | None) -> Any:
    parser = benchmark_parser("miles_job", __doc__, "256 samples, dp 8, one step")
    parser.add_argument("--steps", type=int, default=3)
    options = parser.parse_args(argv)
    if options.smoke:
        options.samples, options.dp_size, options.steps = 256, 8, 1
        options.ranks, options.store_bytes = [0, 7], 512 * 2**20
    else:
        options.samples, options.dp_size = WORKLOADS["medium"].samples, 64
        options.ranks, options.store_bytes = [0, 31, 63], 3 * 2**30
    return options


def main(argv: list[str] | None = None) -> int:
    return run_main(argv, parse_args, run)


if __name__ == "__main__":
    raise SystemExit(main())
