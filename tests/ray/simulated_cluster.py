"""A simulated multi-node Ray cluster on this machine, shared by the cluster and fault tests.

``ray.cluster_utils.Cluster`` starts the head node and each worker node as its own raylet with
its own object store (objects cross between them as between machines). Node ``i`` carries the
custom resource ``node_<i>``; an actor that asks for ``0.01`` of it lands there. The driver runs
on the head, node 0, so what it puts lives there. Each node spills to its own directory.

A module starts one such cluster in a module-scoped fixture and stops it (``ray.shutdown`` and
``Cluster.shutdown``) after its last test, so it never meets the module-scoped local Ray of
``conftest.py``, which test modules request by name.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import KNOWN_COLUMNS, RolloutBatch

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

REPO_ROOT = str(Path(__file__).resolve().parents[2])
MIB = 1024 * 1024

# Node death is noticed within about a second (Ray's default is 15 s of missed health checks).
FAST_FAILURE_CONFIG: dict[str, Any] = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 200,
    "health_check_failure_threshold": 3,
}


@dataclasses.dataclass
class SimulatedCluster:
    """A running simulated cluster: node ``i`` is ``nodes[i]`` with id ``node_ids[i]``."""

    cluster: Any
    nodes: list[Any]
    node_ids: list[str]
    spill_dirs: list[Path]

    def add_node(self, *, object_store_bytes: int, spill_root: Path) -> int:
        """Start one more worker node; return its index."""
        index = len(self.nodes)
        spill_dir = spill_root / f"node_{index}"
        spill_dir.mkdir(parents=True, exist_ok=True)
        node = self.cluster.add_node(
            num_cpus=1,
            object_store_memory=object_store_bytes,
            resources={f"node_{index}": 1.0},
            object_spilling_directory=str(spill_dir),
        )
        self.nodes.append(node)
        self.spill_dirs.append(spill_dir)
        self.node_ids.append(_node_id_of(index))
        return index


def start_cluster(
    num_nodes: int,
    *,
    object_store_bytes: int,
    spill_root: Path,
    system_config: dict[str, Any] | None = None,
) -> SimulatedCluster:
    """Start a head and ``num_nodes - 1`` worker nodes and connect this driver to them."""
    python_path = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    spill_dir = spill_root / "node_0"
    spill_dir.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path)  # the raylets pass it on to their workers
        cluster = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 1,
                "object_store_memory": object_store_bytes,
                "resources": {"node_0": 1.0},
                "include_dashboard": False,
                "object_spilling_directory": str(spill_dir),
                "_system_config": {**FAST_FAILURE_CONFIG, **(system_config or {})},
            },
        )
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        simulated = SimulatedCluster(cluster, [cluster.head_node], [_node_id_of(0)], [spill_dir])
        for _ in range(num_nodes - 1):
            simulated.add_node(object_store_bytes=object_store_bytes, spill_root=spill_root)
    return simulated


def stop_cluster(simulated: SimulatedCluster) -> None:
    ray.shutdown()
    simulated.cluster.shutdown()


def _node_id_of(index: int) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for node in ray.nodes():
            if node["Alive"] and f"node_{index}" in node["Resources"]:
                return str(node["NodeID"])
        time.sleep(0.1)
    msg = f"node {index} did not join the cluster"
    raise RuntimeError(msg)


def on_node(actor_class: Any, index: int, **options: Any) -> Any:
    """Start an actor of ``actor_class`` on node ``index``."""
    return actor_class.options(resources={f"node_{index}": 0.01}, **options).remote()


def box(refs_or_ref: Any) -> dict[str, Any]:
    """Wrap a reference so that Ray hands it to the actor as it is, not resolved."""
    return {"refs": refs_or_ref}


def make_batch(num_samples: int, seed: int, *, max_tokens: int = 400) -> RolloutBatch:
    """A seeded rollout batch with ragged tokens, per-token columns and routed experts."""
    rng = np.random.default_rng(seed)
    total = rng.integers(max_tokens // 4, max_tokens, size=num_samples)
    response = total - rng.integers(4, max_tokens // 8, size=num_samples)
    return RolloutBatch.from_train_data(
        {
            "tokens": [rng.integers(0, 32000, size=int(n), dtype=np.int32) for n in total],
            "response_lengths": response.tolist(),
            "loss_masks": [rng.integers(0, 2, size=int(r), dtype=np.uint8) for r in response],
            "rollout_log_probs": [-rng.random(int(r), dtype=np.float32) for r in response],
            "rollout_routed_experts": [
                rng.integers(0, 64, size=(int(n) - 1, 2, 2), dtype=np.int32) for n in total
            ],
            "rewards": rng.random(num_samples).tolist(),
            "raw_reward": rng.random(num_samples).tolist(),
        },
        # The int32 layout of the ids, so that the batch's size against the store stays put.
        specs=[dataclasses.replace(KNOWN_COLUMNS["rollout_routed_experts"], storage="exact")],
    )


def crc32_of(shard: RolloutBatch) -> int:
    """A CRC32 of a shard's values: its record batch's Arrow IPC bytes, rows and globals."""
    # Compact columns first: the IPC bytes of a slice (an eager shard) depend on its parent's.
    record_batch = shard.record_batch
    columns = [pa.concat_arrays([column]) for column in record_batch.columns]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, record_batch.schema) as writer:
        writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=record_batch.schema))
    crc = zlib.crc32(sink.getvalue())
    arrays = [shard.partition, shard.batch_total_lengths]
    arrays += [np.asarray(shard.batch_globals[key]) for key in sorted(shard.batch_globals)]
    for array in arrays:
        if array is not None:
            crc = zlib.crc32(np.ascontiguousarray(array).tobytes(), crc)
    return crc


def gather(calls: Sequence[Any], timeout_s: float = 60.0) -> list[Any]:
    return list(ray.get(list(calls), timeout=timeout_s))


def store_capacity() -> float:
    return float(ray.cluster_resources()["object_store_memory"])


def bytes_on_disk(directories: Sequence[Path]) -> int:
    """The size of every file under the spill directories."""
    return sum(
        file.stat().st_size
        for directory in directories
        for file in directory.rglob("*")
        if file.is_file()
    )


_LOGGED = re.compile(r"(Spilled|Restored) (\d+) MiB, (\d+) objects")


def raylet_spill_stats(simulated: SimulatedCluster) -> dict[str, dict[str, int]]:
    """The last cumulative ``Spilled``/``Restored`` totals each raylet logged (no gRPC needed).

    MiB and objects. A raylet logs them at most about once a second, so they are lower bounds;
    a raylet that pushes a spilled object straight from its file to another node restores
    nothing.
    """
    logs = Path(simulated.cluster.head_node.get_session_dir_path()) / "logs"
    stats: dict[str, dict[str, int]] = {}
    for log in sorted(logs.glob("raylet*.out")):
        text = log.read_text(errors="replace")
        node = stats.setdefault(log.name, {})
        for kind, mib, objects in _LOGGED.findall(text):
            node[f"{kind.lower()} MiB"] = int(mib)
            node[f"{kind.lower()} objects"] = int(objects)
    return stats


def driver_memory_bytes() -> dict[str, int]:
    """This process's RSS and its private part (Linux ``/proc/self/status``).

    RSS also counts the object store's shared-memory pages this process has touched (its puts
    write there), up to the store's size: ``private`` (``RssAnon``) is what a leak would grow.
    """
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {
        "rss": 1024 * int(fields["VmRSS"].split()[0]),
        "private": 1024 * int(fields["RssAnon"].split()[0]),
    }
