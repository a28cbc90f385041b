"""Many steps in a row: the object store and the driver's memory must come back where they were.

Run from the repository root::

    python -m benchmarks.soak                        # 1,000 steps of a 20 MiB batch
    python -m benchmarks.soak --steps 100 --batch-mib 4

A simulated cluster (:mod:`benchmarks.simulated_cluster`): the driver on the head, which
puts; ``--nodes`` worker nodes with ``--ranks-per-node`` DP ranks each. Every step puts the same
seeded batch in each of ``--modes`` (default: eager, then node-aware delayed), has every rank
take its shard, and drops the step's references. After each step's ranks are done (before the
drop) it samples the object store's usage over all nodes (capacity minus
``ray.available_resources()['object_store_memory']``) and the driver's RSS. One warm-up step
(helper actor, connections, caches) runs before the start is measured; the end is measured after
the last step, once Ray has freed the objects (bounded polls: it frees asynchronously). Output: a
summary on stdout and ``soak.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import ray

from arrow_split import RolloutBatch
from arrow_split.ray import split_train_data_by_dp
from benchmarks._common import DOCS, MIB, pyplot, stamp, start_stamp, write_json
from benchmarks.cluster import make_rollout_batch, start_ranks, started_cluster

__all__ = ["main", "parse_args", "run"]

MODES = ("eager", "local", "auto", "holder")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-mib", type=float, default=20.0)
    parser.add_argument("--nodes", type=int, default=2, help="worker nodes (besides the head)")
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--modes", default="eager,auto", help=f"from {', '.join(MODES)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="5 steps of a 2 MiB batch, 1 node")
    parser.add_argument("--out", type=Path, default=DOCS, help="where soak.json goes")
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.batch_mib, args.nodes = 5, 2.0, 1
    args.modes = tuple(mode.strip() for mode in args.modes.split(",") if mode.strip())
    if not args.modes or set(args.modes) - set(MODES):
        parser.error(f"invalid --modes {args.modes!r}; expected some of: {', '.join(MODES)}")
    if args.steps < 1 or args.batch_mib <= 0 or args.nodes < 1 or args.ranks_per_node < 1:
        parser.error("--steps, --batch-mib, --nodes and --ranks-per-node must be positive")
    return args


def _store_used(capacity: float) -> float:
    return capacity - float(ray.available_resources().get("object_store_memory", 0.0))


def _memory() -> dict[str, float]:
    """The driver's RSS, and its private part: Linux counts the object store's shared-memory
    pages the driver has touched (its puts write there) in RSS too, up to the store's size."""
    memory = {"driver_rss": float(psutil.Process().memory_info().rss)}
    status = Path("/proc/self/status")
    if status.exists():
        fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        for name, key in (("RssAnon", "driver_rss_private"), ("RssShmem", "driver_rss_shmem")):
            memory[key] = 1024.0 * int(fields[name].split()[0])
    return memory


def _one_step(ranks: list[Any], batch: RolloutBatch, modes: tuple[str, ...]) -> None:
    """Put the batch in each mode, have every rank take its shard; the refs die on return."""
    dp_size = len(ranks)
    refs = [
        split_train_data_by_dp(batch, dp_size, balance_data=True, delay=mode != "eager")
        for mode in modes
    ]
    calls = [
        rank.step.remote({"refs": refs_or_ref}, r, dp_size, mode)
        for mode, refs_or_ref in zip(modes, refs, strict=True)
        for r, rank in enumerate(ranks)
    ]
    ray.get(calls, timeout=600)


def _settled_usage(capacity: float, timeout_s: float = 30.0) -> float:
    """The store's usage once Ray has freed what it will (polls until it reaches 0 or times out)."""
    gc.collect()
    deadline = time.monotonic() + timeout_s
    while _store_used(capacity) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    return _store_used(capacity)


def _soak(ranks: list[Any], batch: RolloutBatch, options: argparse.Namespace) -> dict[str, Any]:
    capacity = float(ray.cluster_resources()["object_store_memory"])
    _one_step(ranks, batch, options.modes)  # warm-up
    start = {"store_used": _settled_usage(capacity), **_memory()}
    samples: list[dict[str, float]] = []
    began = time.perf_counter()
    for step in range(options.steps):
        _one_step(ranks, batch, options.modes)
        samples.append({"step": step, "store_used": _store_used(capacity), **_memory()})
    seconds = time.perf_counter() - began
    end = {"store_used": _settled_usage(capacity), **_memory()}
    maxima = {key: max(sample[key] for sample in samples) for key in start}
    return {
        "capacity": capacity,
        "start": start,
        "end": end,
        "max": maxima,
        "seconds": seconds,
        "samples": samples,
    }


def run(options: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster, soak, shut down; return the figures."""
    dp_size = options.nodes * options.ranks_per_node
    batch = make_rollout_batch(options.batch_mib, dp_size, options.seed)
    store_bytes = max(256 * MIB, int(4 * len(options.modes) * batch.nbytes))
    started = start_stamp()
    with started_cluster(options.nodes, store_bytes) as simulated:
        ranks = start_ranks(options.nodes, options.ranks_per_node, simulated.node_ids)
        figures = _soak(ranks, batch, options)
    options_json = {**vars(options), "out": str(options.out)}
    report = {"options": options_json, "batch_nbytes": batch.nbytes, **figures}
    return {**report, "stamp": stamp(started)}


def _summary(report: dict[str, Any]) -> str:
    options = report["options"]
    lines = [
        f"{options['steps']} steps of a {report['batch_nbytes'] / MIB:.1f} MiB batch "
        f"({'+'.join(options['modes'])} each step, {options['nodes']} nodes x "
        f"{options['ranks_per_node']} ranks) in {report['seconds']:.0f} s; store capacity "
        f"{report['capacity'] / MIB:.0f} MiB",
        f"{'':<24} {'start':>10} {'end':>10} {'max':>10}",
    ]
    for key in report["start"]:
        label = f"{key} MiB"
        values = [report[point][key] / MIB for point in ("start", "end", "max")]
        lines.append(f"{label:<24} {values[0]:>10.1f} {values[1]:>10.1f} {values[2]:>10.1f}")
    return "\n".join(lines)


def plot_soak(report: dict[str, Any], path: Path) -> None:
    """Object-store usage and driver memory over the soak's steps."""
    plt = pyplot()
    samples = report["samples"]
    steps = [sample["step"] for sample in samples]
    figure, axis = plt.subplots(figsize=(8, 4))
    for key, label in (
        ("store_used", "object store used"),
        ("driver_rss_private", "driver private memory"),
        ("driver_rss_shmem", "driver's object-store pages"),
    ):
        axis.plot(steps, [sample[key] / MIB for sample in samples], label=label)
    axis.set_xlabel("step")
    axis.set_ylabel("MiB")
    axis.set_title(f"{len(steps)} steps of a {report['batch_nbytes'] / MIB:.1f} MiB batch")
    axis.legend(loc="center right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    report = run(options)
    print(_summary(report))
    path = write_json(report, options.out / "soak.json")
    plot_soak(report, path.with_suffix(".png"))
    print(f"wrote {path} and {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
