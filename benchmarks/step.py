"""The step benchmark: one training step, from the rollout loop to each rank's tensors.

docs/benchmarks.md ("A whole step") says what is measured and why. A *configuration* is a
(path, mode, dp_size) (the paths: :mod:`benchmarks.step_paths`); each gets a fresh
:class:`~benchmarks.step_paths.StepRankActor`, then ``1 + repeats`` steps: the rollout loop
(the driver thread's CPU), the step boundary (loop end to the put's return), then each measured
rank (the ``ranks`` with the most tokens). The first rank call is the actor's cold start; rank
figures are the warm steps' medians, a boundary the median of all steps, the critical path
boundary + slowest rank. The same run times the builder's appends taking turns with a pickle of
the classic dict, and the references (one buffer put, a memcpy, both planners, both gathers).
Writes ``step.json``, ``step.md`` (its tables) and ``step.png``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import ray

from arrow_split import RolloutBatch, plan_partitions, take_rows
from arrow_split.testing import WORKLOADS, RolloutConfig, iter_sample_groups, make_lengths
from benchmarks import baseline, step_report
from benchmarks._common import (
    MIB,
    Results,
    benchmark_parser,
    local_ray,
    object_sizes,
    run_main,
    summarize,
    timed,
)
from benchmarks.step_paths import (
    PATHS,
    StepPath,
    StepRankActor,
    boundary,
    check_agreement,
    largest_ranks,
    rollout,
)

__all__ = ["Groups", "StepOptions", "parse_args", "report", "run"]


@dataclasses.dataclass(frozen=True, slots=True)
class StepOptions:
    """What one run measures: the full run's sizes (``--smoke``: :data:`_SMOKE`)."""

    workload: str = "medium"
    eager_dp_sizes: tuple[int, ...] = (8, 64, 256)
    delayed_dp_sizes: tuple[int, ...] = (64,)
    small_samples: int = 128
    small_dp_size: int = 64
    repeats: int = 3
    ranks: int = 2
    group_size: int = 8
    seed: int = 0
    balance_data: bool = True
    out: Path = Path("docs/benchmarks")


@dataclasses.dataclass(frozen=True, slots=True)
class Groups:
    """A workload's sample groups, in the seeded rollout order, as lists and as numpy arrays."""

    name: str
    config: RolloutConfig
    lists: list[dict[str, Any]]
    arrays: list[dict[str, Any]]

    @classmethod
    def generate(cls, name: str, config: RolloutConfig, group_size: int, seed: int) -> Groups:
        lists = list(iter_sample_groups(config, group_size))
        numpy_config = dataclasses.replace(config, as_numpy=True)
        arrays = list(iter_sample_groups(numpy_config, group_size))
        order = np.random.default_rng(seed).permutation(len(lists))
        return cls(name, config, [lists[i] for i in order], [arrays[i] for i in order])

    @property
    def total_lengths(self) -> np.ndarray:
        return np.array([len(t) for group in self.arrays for t in group["tokens"]], np.int64)

    def describe(self) -> dict[str, Any]:
        lengths = self.total_lengths
        response = np.concatenate([group["response_lengths"] for group in self.arrays])
        return {
            "name": self.name,
            "num_samples": int(lengths.size),
            "num_tokens": int(lengths.sum()),
            "response_tokens": int(response.sum()),
            "groups": len(self.lists),
            "group_size": len(self.lists[0]["tokens"]) if self.lists else 0,
            "columns": sorted(self.lists[0]) if self.lists else [],
        }


def _one_step(
    path: StepPath, mode: str, dp: int, groups: Groups, actor: Any, ranks: list[int], bal: bool
) -> dict[str, Any]:
    gc.collect()
    state, loop = rollout(path, groups.arrays if path == "numpy" else groups.lists)
    refs, laps = boundary(path, mode, state, dp, bal)
    del state
    step: dict[str, Any] = {"rollout": loop, "boundary_seconds": laps.total}
    step["boundary_steps"] = laps.seconds
    step["store_bytes"] = sum(object_sizes(refs))
    step["ranks"] = {
        str(rank): ray.get(actor.run.remote(path, mode, [refs], rank, dp, bal)) for rank in ranks
    }
    del refs
    return step


def _measure_config(
    path: StepPath, mode: str, dp: int, groups: Groups, ranks: list[int], options: StepOptions
) -> dict[str, Any]:
    actor = StepRankActor.remote()  # type: ignore[attr-defined]
    pid = ray.get(actor.ready.remote())
    steps = [
        _one_step(path, mode, dp, groups, actor, ranks, options.balance_data)
        for _ in range(1 + options.repeats)
    ]
    ray.kill(actor)
    with contextlib.suppress(psutil.Error):  # its exit takes CPU the next first call would share
        psutil.Process(pid).wait(30)
    return {"path": path, "mode": mode, "dp_size": dp, "ranks": ranks, "steps": steps}


def _measure_workload(
    groups: Groups,
    eager_dp_sizes: Sequence[int],
    delayed_dp_sizes: Sequence[int],
    options: StepOptions,
) -> dict[str, Any]:
    """Every configuration of one workload, after the agreement check of its shards."""
    lengths = groups.total_lengths
    configs = [
        *(("eager", dp) for dp in eager_dp_sizes),
        *(("delayed", dp) for dp in delayed_dp_sizes),
    ]
    measured: dict[int, list[int]] = {}
    for _, dp in configs:
        partitions = plan_partitions(lengths, dp, balance_data=options.balance_data)
        measured[dp] = largest_ranks(partitions, lengths, options.ranks)
    dp = configs[-1][1]
    agreement = check_agreement(groups.lists, groups.arrays, dp, measured[dp], options.balance_data)
    records = [
        _measure_config(path, mode, dp, groups, measured[dp], options)
        for mode, dp in configs
        for path in PATHS
    ]
    return {"workload": groups.describe(), "agreement": agreement, "configs": records}


def _appends_and_pickle(groups: Groups, rounds: int) -> dict[str, Any]:
    """The builder's appends and ``pickle.dumps`` (protocol 5) of the classic dict of the same
    values, taking turns for ``rounds`` rounds (each goes first every other round): CPU seconds.
    """
    data, _ = rollout("classic", groups.lists)
    seconds: dict[str, list[float]] = {"builder": [], "pickle": []}
    sizes: list[int] = []

    def appends() -> None:
        builder, figures = rollout("builder", groups.lists)
        builder.finish()
        seconds["builder"].append(figures["cpu_seconds"])

    def pickled() -> None:
        gc.collect()
        start = time.thread_time()
        sizes.append(len(pickle.dumps(data, protocol=5)))
        seconds["pickle"].append(time.thread_time() - start)

    for index in range(max(rounds, 1)):
        for call in (appends, pickled) if index % 2 == 0 else (pickled, appends):
            gc.collect()
            call()
    builder, pickle_seconds = summarize(seconds["builder"]), summarize(seconds["pickle"])
    return {
        "rounds": max(rounds, 1),
        "builder_cpu_seconds": builder,
        "cpu_seconds": pickle_seconds,
        "bytes": sizes[-1],
        "builder_vs_pickle": builder["median"] / pickle_seconds["median"],
    }


def _warm_up_driver(groups: Groups, options: StepOptions) -> None:
    """Run every path's boundary once on ``groups`` (untimed): the driver's first calls."""
    for path in PATHS:
        for mode in ("eager", "delayed"):
            state, _ = rollout(path, groups.arrays if path == "numpy" else groups.lists)
            refs, _ = boundary(path, mode, state, 2, options.balance_data)
            del refs, state


PLANNER_TARGET = (65_536, 256)
"""The planner's reference point: (samples, dp_size)."""


def _measure_references(groups: Groups, dp_size: int, ranks: int, repeats: int) -> dict[str, Any]:
    """One buffer put of the batch's bytes; in a fresh rank actor, a memcpy of the largest
    measured rank's bytes and a ``ray.get`` of a small object; both planners at
    :data:`PLANNER_TARGET`; both gathers of rank 0's rows at ``dp_size``.
    """
    data, _ = rollout("classic", groups.lists)
    batch = RolloutBatch.from_train_data(data)
    partitions = plan_partitions(batch.total_lengths, dp_size, balance_data=True)
    measured = largest_ranks(partitions, groups.total_lengths, ranks)
    rank_bytes = max(take_rows(batch, partitions[rank]).nbytes for rank in measured)
    buffer = np.ones(max(batch.nbytes, 1), dtype=np.uint8)
    actor = StepRankActor.remote()  # type: ignore[attr-defined]
    memcpy = ray.get(actor.memcpy.remote(rank_bytes, 5 * repeats))
    small = ray.put(b"x" * 64)
    get_small = ray.get(actor.get_small.remote([small], 5 * repeats))
    ray.kill(actor)
    samples, planner_dp = PLANNER_TARGET
    lengths = make_lengths(dataclasses.replace(WORKLOADS["medium"], samples=samples))
    as_list = [int(length) for length in lengths]
    total = [int(length) for length in batch.total_lengths]
    row_list = [int(row) for row in partitions[0]]
    return {
        "workload": groups.name,
        "batch_bytes": batch.nbytes,
        "one_buffer_put": {
            "bytes": batch.nbytes,
            "seconds": timed(lambda: ray.put(buffer), 2 * repeats),
        },
        "memcpy_rank": {"dp_size": dp_size, "ranks": measured, **memcpy},
        "ray_get_small": get_small,
        "delayed_rank_floor_seconds": get_small["seconds"]["median"] + memcpy["seconds"]["median"],
        "planner": {
            "samples": samples,
            "dp_size": planner_dp,
            "classic_seconds": timed(
                lambda: baseline.classic_partitions(as_list, planner_dp, True), repeats
            ),
            "arrow_seconds": timed(
                lambda: plan_partitions(lengths, planner_dp, balance_data=True), repeats
            ),
        },
        "take": {
            "dp_size": dp_size,
            "rows": len(row_list),
            "classic_seconds": timed(
                lambda: baseline.classic_shard(data, row_list, total), repeats
            ),
            "arrow_seconds": timed(lambda: take_rows(batch, partitions[0]), repeats),
        },
    }


_SMOKE = StepOptions("tiny", (2,), (2,), small_samples=0, small_dp_size=2, repeats=1, ranks=1)
"""What ``--smoke`` runs: the tiny workload at dp 2, once, one rank, no small workload."""


def parse_args(argv: list[str] | None = None) -> StepOptions:
    """The command line: ``--workload`` (or ``--smoke``) and ``--out``."""
    parser = benchmark_parser("step", __doc__, "the tiny workload at dp 2, once: for the tests")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="medium")
    args = parser.parse_args(argv)
    options = _SMOKE if args.smoke else StepOptions(args.workload)
    return dataclasses.replace(options, out=args.out)


def _store_bytes(groups: Groups) -> int:
    """Room for one configuration's objects: the pickled lists of a step, three times over."""
    shape = groups.describe()
    pickled = 5 * shape["num_tokens"] + 11 * shape["response_tokens"]
    return max(768 * MIB, 3 * pickled + 256 * MIB)


def _generate(options: StepOptions) -> tuple[Groups, Groups | None, Groups]:
    def make(name: str, samples: int | None = None) -> Groups:
        base = WORKLOADS["small" if samples is not None else name]
        config = base if samples is None else dataclasses.replace(base, samples=samples)
        return Groups.generate(name, config, options.group_size, options.seed)

    main = make(options.workload)
    small = make(f"small-{options.small_samples}", options.small_samples)
    return main, (small if options.small_samples else None), make("tiny")


def _measure(options: StepOptions, groups: tuple[Groups, Groups | None, Groups]) -> dict[str, Any]:
    main, small, tiny = groups
    _warm_up_driver(tiny, options)
    results: dict[str, Any] = {"workloads": {}}
    results["workloads"][main.name] = _measure_workload(
        main, options.eager_dp_sizes, options.delayed_dp_sizes, options
    )
    results["pickle"] = _appends_and_pickle(main, 1 + 2 * options.repeats)
    if small is not None:
        dp = (options.small_dp_size,)
        results["workloads"][small.name] = _measure_workload(small, dp, dp, options)
    at = max(options.delayed_dp_sizes or options.eager_dp_sizes)
    results["references"] = _measure_references(main, at, options.ranks, options.repeats)
    return results


def run(options: StepOptions) -> dict[str, Results]:
    """Run the whole benchmark; return ``{"step.json": every figure}`` (nothing is written)."""
    groups = _generate(options)
    store = max(_store_bytes(g) for g in groups if g is not None)
    with local_ray(store):
        results = _measure(options, groups)
    results.update(
        main_workload=options.workload,
        plan="balanced" if options.balance_data else "strided",
        repeats=options.repeats,
        ranks_per_config=options.ranks,
        object_store_bytes=store,
        options={key: str(value) for key, value in dataclasses.asdict(options).items()},
    )
    results["summary"] = step_report.summaries(results)
    results["targets"] = step_report.targets(results)
    return {"step.json": results}


def report(outputs: dict[str, Results], out: Path) -> None:
    """Write ``step.md`` and ``step.png`` beside ``step.json``; print the tables."""
    results = outputs["step.json"]
    (out / "step.md").write_text(step_report.markdown(results), encoding="utf-8")
    step_report.plot(results, out / "step.png")
    print(step_report.markdown(results))


if __name__ == "__main__":
    raise SystemExit(run_main(None, parse_args, run, report))
