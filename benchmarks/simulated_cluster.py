"""A simulated multi-node Ray cluster on this machine: the one setup the cluster benchmarks and
the cluster and fault tests share.

``ray.cluster_utils.Cluster`` starts the head node and each worker node as its own raylet with
its own object store (objects cross between them as between machines). Node ``i`` carries the
custom resource ``node_<i>``; an actor that asks for ``0.01`` of it lands there (:func:`on_node`).
The driver runs on the head, node 0, so what it puts lives there. Each node spills to its own
directory. :func:`cross_node_bytes` reads from Ray's object directory how many bytes crossed nodes
to place a set of objects.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from benchmarks._common import MIB, checkout_on_pythonpath

__all__ = [
    "FAST_FAILURE_CONFIG",
    "MIB",
    "SimulatedCluster",
    "cross_node_bytes",
    "on_node",
    "start_cluster",
    "stop_cluster",
]

FAST_FAILURE_CONFIG: dict[str, Any] = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 200,
    "health_check_timeout_ms": 200,
    "health_check_failure_threshold": 3,
}
"""Node death noticed within about a second (Ray's default is 15 s of missed health checks)."""


@dataclasses.dataclass
class SimulatedCluster:
    """A running simulated cluster: node ``i`` is ``nodes[i]`` with id ``node_ids[i]``."""

    cluster: Any
    nodes: list[Any]
    node_ids: list[str]
    spill_dirs: list[Path]

    def add_node(self, *, object_store_bytes: int, spill_root: Path) -> int:
        """Start one more worker node (one CPU); return its index."""
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
    """Start a head and ``num_nodes - 1`` worker nodes and connect this driver to them.

    The raylets' workers import this checkout (``PYTHONPATH`` is set while they start).
    """
    spill_dir = spill_root / "node_0"
    spill_dir.mkdir(parents=True, exist_ok=True)
    with checkout_on_pythonpath():
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
    """Disconnect the driver and stop every node."""
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


def cross_node_bytes(refs: Iterable[Any]) -> int:
    """Bytes that crossed nodes to place the copies of these objects, from Ray's own records.

    The sum over distinct live objects of ``object_size * (nodes holding a copy - 1)``; an
    object that travels inline counts 0. One lookup per object (a lookup of objects with several
    owners can misbehave in Ray 2.60), waiting for the owner's answer: a positive ``timeout_ms``
    is read as microseconds by Rays without the fix of ray-project/ray#65254 (2.49 among them),
    where a loaded owner then fails the lookup.
    """
    total = 0
    for ref in {ref.hex(): ref for ref in refs}.values():
        found = ray.experimental.get_object_locations([ref], timeout_ms=-1)
        location = found.get(ref) or {}
        copies = len(location.get("node_ids") or ())
        total += int(location.get("object_size") or 0) * max(copies - 1, 0)
    return total
