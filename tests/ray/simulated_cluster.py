"""Test helpers around the simulated cluster of :mod:`benchmarks.simulated_cluster`.

The cluster itself (start, stop, ``on_node``, ``cross_node_bytes``) is the benchmarks' module, so
the cluster and fault tests and the cluster benchmarks run on one setup; this module adds what
only the tests need: a seeded batch, CRCs of shards, the spill figures, the driver's memory.

A module starts one cluster in a module-scoped fixture and stops it (``ray.shutdown`` and
``Cluster.shutdown``) after its last test, so it never meets the module-scoped local Ray of
``conftest.py``, which test modules request by name.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import KNOWN_COLUMNS, RolloutBatch, Shard

ray = pytest.importorskip("ray")

from benchmarks.simulated_cluster import (  # noqa: E402
    FAST_FAILURE_CONFIG,
    MIB,
    SimulatedCluster,
    cross_node_bytes,
    on_node,
    start_cluster,
    stop_cluster,
)

__all__ = [
    "FAST_FAILURE_CONFIG",
    "MIB",
    "SimulatedCluster",
    "box",
    "bytes_on_disk",
    "crc32_of",
    "cross_node_bytes",
    "driver_memory_bytes",
    "gather",
    "make_batch",
    "on_node",
    "raylet_spill_stats",
    "start_cluster",
    "stop_cluster",
    "store_capacity",
]


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


def crc32_of(shard: Shard) -> int:
    """A CRC32 of a shard's values: its record batch's Arrow IPC bytes, rows and globals."""
    # Compact columns first: the IPC bytes of a slice (an eager shard) depend on its parent's,
    # and a slice of objects stored once keeps its node's whole dictionary: one value per row.
    record_batch = shard.record_batch
    columns = [
        column.cast(column.type.value_type)
        if pa.types.is_dictionary(column.type)
        else pa.concat_arrays([column])
        for column in record_batch.columns
    ]
    compact = pa.RecordBatch.from_arrays(columns, names=record_batch.schema.names)
    compact = compact.replace_schema_metadata(record_batch.schema.metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, compact.schema) as writer:
        writer.write_batch(compact)
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
