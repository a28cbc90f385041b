"""Bytes that cross nodes and per-rank time for eager, plain and node-aware delayed; then a soak.

On a simulated cluster (:mod:`benchmarks.simulated_cluster`; docs/benchmarks.md, "At cluster
scale"): the driver and the batch on the head, ``--nodes`` worker nodes of ``--ranks-per-node``
ranks. Per mode and step: bytes that crossed nodes (the driver's objects and those each rank's
call fetched, by the ``on_fetch`` hook), put time and each rank's time. Then
the soak (``--soak-steps``; 0 skips it). Writes ``cluster.json`` and ``cluster.png``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import ray

from arrow_split import RolloutBatch
from arrow_split.ray import process_rollout_data, split_train_data_by_dp
from arrow_split.testing import RolloutConfig, make_train_data
from benchmarks._common import (
    MIB,
    Results,
    benchmark_parser,
    object_sizes,
    pyplot,
    run_main,
    save_figure,
    status_bytes,
)
from benchmarks.simulated_cluster import (
    SimulatedCluster,
    cross_node_bytes,
    on_node,
    start_cluster,
    stop_cluster,
)

__all__ = ["parse_args", "plot_cluster", "report", "run"]

MODES = ("eager", "local", "auto", "holder")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring); ``dp_size`` added."""
    parser = benchmark_parser("cluster", __doc__, "1 node x 2 ranks, 2 MiB, 2+3 steps")
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes (besides the head)")
    parser.add_argument("--ranks-per-node", type=int, default=4)
    parser.add_argument("--batch-mib", type=float, default=40.0, help="about this many MiB")
    parser.add_argument("--steps", type=int, default=5, help="steps per mode (first + steady)")
    parser.add_argument("--soak-steps", type=int, default=300, help="soak steps; 0: no soak")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.ranks_per_node, args.batch_mib, args.steps, args.soak_steps = 1, 2, 2, 2, 3
    if min(args.nodes, args.ranks_per_node, args.steps, args.batch_mib) <= 0 or args.soak_steps < 0:
        parser.error("--nodes, --ranks-per-node, --steps and --batch-mib must be positive")
    args.dp_size = args.nodes * args.ranks_per_node
    return args


def _make_rollout_batch(batch_mib: float, dp_size: int) -> RolloutBatch:
    """A seeded batch of about ``batch_mib`` MiB, its sample count a multiple of dp_size."""
    config = RolloutConfig(
        256, 1024.0, 2048, (16, 256), moe_shape=(2, 2), seed=0, as_numpy=True, columns="numeric"
    )
    probe = RolloutBatch.from_train_data(make_train_data(config))
    wanted = batch_mib * MIB / (probe.nbytes / len(probe))
    samples = max(dp_size, int(np.ceil(wanted / dp_size)) * dp_size)
    return RolloutBatch.from_train_data(
        make_train_data(dataclasses.replace(config, samples=samples))
    )


@contextmanager
def _started_cluster(nodes: int, store_bytes: int) -> Iterator[SimulatedCluster]:
    """A head (node 0: the driver) and ``nodes`` worker nodes, stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="arrow_split_spill_") as spill_root:
        simulated = start_cluster(
            nodes + 1, object_store_bytes=store_bytes, spill_root=Path(spill_root)
        )
        try:
            yield simulated
        finally:
            stop_cluster(simulated)


@ray.remote(num_cpus=0)
class _BenchRank:
    """A DP rank: times its call and hands back the references it fetched (kept alive)."""

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    def step(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, mode: str
    ) -> tuple[float, list[list[Any]]]:
        """Time this rank's take; also the refs its call fetched (the library's on_fetch hook)."""
        start = time.perf_counter()
        fetched: list[Any] = []
        options: dict[str, Any] = {} if mode == "eager" else {"locality": mode}
        process_rollout_data(
            boxed["refs"], dp_rank, dp_size, balance_data=True, on_fetch=fetched.append, **options
        )
        return time.perf_counter() - start, [fetched]


def _start_ranks(nodes: int, ranks_per_node: int, node_ids: list[str]) -> list[Any]:
    """``ranks_per_node`` rank actors on each worker node (none on the head); rank-major."""
    ranks = [on_node(_BenchRank, 1 + r // ranks_per_node) for r in range(nodes * ranks_per_node)]
    placed = ray.get([rank.node_id.remote() for rank in ranks], timeout=120)
    if node_ids[0] in placed:
        msg = "a rank landed on the head node; the layout needs every rank on a worker node"
        raise RuntimeError(msg)
    return ranks


def _store_free() -> float:
    return float(ray.available_resources().get("object_store_memory", 0.0))


def _wait_for_free_store(capacity: float, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _store_free() < capacity and time.monotonic() < deadline:
        time.sleep(0.05)


def _one_step(
    ranks: list[Any], batch: RolloutBatch, mode: str, options: argparse.Namespace
) -> dict[str, Any]:
    # Eager: one object per node, from each rank's node id (as a framework collects them).
    nodes = ray.get([rank.node_id.remote() for rank in ranks]) if mode == "eager" else None
    start = time.perf_counter()
    refs_or_ref: Any = split_train_data_by_dp(
        batch, options.dp_size, balance_data=True, delay=mode != "eager", rank_nodes=nodes
    )
    put_s = time.perf_counter() - start
    boxed = {"refs": refs_or_ref}
    calls = [rank.step.remote(boxed, r, options.dp_size, mode) for r, rank in enumerate(ranks)]
    results = ray.get(calls, timeout=600)
    step_s = time.perf_counter() - start
    driver_refs = list(refs_or_ref) if mode == "eager" else [refs_or_ref]
    fetched = [ref for _, nested in results for ref in nested[0]]
    return {
        "cross_node_bytes": cross_node_bytes(driver_refs + fetched),
        "put_s": put_s,
        "step_s": step_s,
        "rank_s": [seconds for seconds, _ in results],
    }


def _run_mode(
    ranks: list[Any], batch: RolloutBatch, mode: str, options: argparse.Namespace
) -> dict[str, Any]:
    capacity = float(ray.cluster_resources()["object_store_memory"])
    steps = []
    for _ in range(options.steps):
        steps.append(_one_step(ranks, batch, mode, options))
        _wait_for_free_store(capacity)  # the next step starts from an empty store
    return {"steps": steps}


def _memory(capacity: float) -> dict[str, float]:
    """The store's usage, the driver's RSS and its private and shared-memory parts (Linux)."""
    used = capacity - _store_free()
    return {
        "store_used": used,
        "driver_rss": float(psutil.Process().memory_info().rss),
        "driver_rss_private": float(status_bytes("RssAnon") or 0),
        "driver_rss_shmem": float(status_bytes("RssShmem") or 0),
    }


def _soak(ranks: list[Any], batch: RolloutBatch, options: argparse.Namespace) -> dict[str, Any]:
    """``soak_steps`` steps of eager + node-aware delayed, each dropped once every rank took
    its shard; the store's usage and the driver's RSS after a warm-up step, at each step, and
    once Ray freed the last step's objects."""
    capacity = float(ray.cluster_resources()["object_store_memory"])
    nodes = ray.get([rank.node_id.remote() for rank in ranks])

    def step() -> None:
        eager = split_train_data_by_dp(batch, len(ranks), balance_data=True, rank_nodes=nodes)
        delayed = split_train_data_by_dp(batch, len(ranks), balance_data=True, delay=True)
        calls = [
            rank.step.remote({"refs": refs}, r, len(ranks), mode)
            for mode, refs in (("eager", eager), ("auto", delayed))
            for r, rank in enumerate(ranks)
        ]
        ray.get(calls, timeout=600)

    step()  # warm-up: the helper actor, connections, caches
    _wait_for_free_store(capacity, timeout_s=30)
    start, samples, began = _memory(capacity), [], time.perf_counter()
    for index in range(options.soak_steps):
        step()
        samples.append({"step": index, **_memory(capacity)})
    seconds = time.perf_counter() - began
    _wait_for_free_store(capacity, timeout_s=30)
    end = _memory(capacity)
    maxima = {key: max(sample[key] for sample in samples) for key in start}
    return {"start": start, "end": end, "max": maxima, "seconds": seconds, "samples": samples}


def _summary(result: dict[str, Any], batch_bytes: int, eager_bytes: float) -> dict[str, Any]:
    steps = result["steps"]
    steady = steps[1:] or steps
    crossed = statistics.median(step["cross_node_bytes"] for step in steps)
    steady_rank_s = [seconds for step in steady for seconds in step["rank_s"]]
    return {
        "cross_node_mib": crossed / MIB,
        "x_batch": crossed / batch_bytes,
        "x_eager": crossed / eager_bytes if eager_bytes else float("nan"),
        "put_ms": 1000 * statistics.median(step["put_s"] for step in steady),
        "step_ms": 1000 * statistics.median(step["step_s"] for step in steady),
        "rank_ms_median": 1000 * statistics.median(steady_rank_s),
        "rank_ms_max": 1000 * max(steady_rank_s),
        "first_step_rank_ms_max": 1000 * max(steps[0]["rank_s"]),
    }


def run(options: argparse.Namespace) -> dict[str, Results]:
    """Start the cluster, run every mode, shut down; return ``{"cluster.json": the figures}``."""
    batch = _make_rollout_batch(options.batch_mib, options.dp_size)
    store_bytes = max(256 * MIB, int(4 * batch.nbytes))
    with _started_cluster(options.nodes, store_bytes) as simulated:
        ranks = _start_ranks(options.nodes, options.ranks_per_node, simulated.node_ids)
        batch_bytes = object_sizes(ray.put(batch))[0]
        results = {mode: _run_mode(ranks, batch, mode, options) for mode in MODES}
        soak = _soak(ranks, batch, options) if options.soak_steps else None
    eager_bytes = statistics.median(s["cross_node_bytes"] for s in results["eager"]["steps"])
    summaries = {mode: _summary(r, batch_bytes, eager_bytes) for mode, r in results.items()}
    report = {
        "options": {**vars(options), "out": str(options.out)},
        "layout": f"head: driver + batch; {options.nodes} worker nodes x "
        f"{options.ranks_per_node} ranks",
        "batch": {"num_samples": len(batch), "nbytes": batch.nbytes, "object_bytes": batch_bytes},
        "store_bytes_per_node": store_bytes,
        "summary": summaries,
        "modes": results,
        "soak": soak,
    }
    return {"cluster.json": report}


def plot_cluster(report: dict[str, Any], path: Path) -> None:
    """Bytes crossing nodes and per-rank time per mode; the soak's memory over its steps."""
    plt = pyplot()
    summary, soak = report["summary"], report["soak"]
    modes = list(summary)
    figure, axes = plt.subplots(1, 3 if soak else 2, figsize=(15 if soak else 10, 4))
    axes[0].bar(modes, [summary[mode]["cross_node_mib"] for mode in modes], color="tab:blue")
    batch_mib = report["batch"]["object_bytes"] / MIB
    axes[0].axhline(batch_mib, color="gray", linestyle="--", label="batch")
    axes[0].set_ylabel("MiB crossing nodes per step")
    for key, alpha in (("rank_ms_max", 0.4), ("rank_ms_median", 1.0)):
        values = [summary[mode][key] for mode in modes]
        axes[1].bar(modes, values, color="tab:orange", alpha=alpha, label=key[8:])
    axes[1].set_ylabel("per-rank ms")
    if soak:
        steps = [sample["step"] for sample in soak["samples"]]
        for key in ("store_used", "driver_rss_private", "driver_rss_shmem"):
            values = [sample.get(key, 0.0) / MIB for sample in soak["samples"]]
            axes[2].plot(steps, values, label=key)
        axes[2].set_xlabel("soak step")
        axes[2].set_ylabel("MiB")
    for axis in axes:
        axis.legend(fontsize="small")
    save_figure(figure, path, report["layout"])


def report(outputs: dict[str, Results], out: Path) -> None:
    """Write ``cluster.png`` beside ``cluster.json``."""
    plot_cluster(outputs["cluster.json"], out / "cluster.png")


if __name__ == "__main__":
    raise SystemExit(run_main(None, parse_args, run, report))
