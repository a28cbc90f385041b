"""More than 2**31 values in one column, for real: through Ray, and through the core's take.

``test_routed_experts_beyond_2_31_values_through_ray``: a batch whose ``rollout_routed_experts``
holds 2,214,457,344 ids (64 samples of ``[16383, 48, 44]``, more than 2**31 = 2,147,483,648),
stored uint8 by narrow storage (2.2 GB), split eager and delayed through a real local Ray whose
object store is sized for it (6 GiB); every rank's shard is checked against the input with a
crc32 per sample. The samples are overlapping windows of one seeded 100 MB random pool (each one
distinct, so a misplaced row changes its checksum), so the input costs 100 MB, not 2.2 GB.

Measured on the 2-core, 24 GiB development machine (other jobs running): 50 to 90 s, Ray's start
(10 s) included; peak memory 6.4 GB, the summed PSS of the test's process tree (pytest, Ray's
processes and workers, the object store's shared memory counted once) sampled every 0.25 s. The
peak is in the eager mode: the batch on the driver (2.2 GB), the shards in the store (2.2 GB) and
the memory the driver's allocator (mimalloc) keeps after the per-rank takes; the delayed mode
peaks near 3 GB (the store's batch and the ranks' shards, the driver's batch dropped after the
put). The two modes run one after the other, the store emptied in between.

``test_offsets_beyond_2_31_take_the_int64_paths`` does the same for a list column's offsets
without the bytes: a ``large_list<uint8>`` length-source column whose first sample holds
2**31 + 5 values over a zero buffer that numpy allocates lazily (``np.zeros`` maps untouched
pages: nothing is resident), so every later sample starts past 2**31. The planner reads the
lengths from those offsets and the take copies the runs of the ranks that do not hold sample 0:
the same code as for any column, with starts that do not fit int32; only the pages of the small
samples are ever touched.
"""

from __future__ import annotations

import itertools
import os
import pickle
import resource
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import (
    ColumnSpec,
    RolloutBatch,
    shard_for_rank,
    take_rows,
)

EXPERTS = "rollout_routed_experts"
SAMPLES, TOKENS, LAYERS, TOP_K = 64, 16_384, 48, 44
SHIFT = 1 << 20  # sample i is the window of the pool that starts at i * SHIFT
DP_SIZE = 4
OBJECT_STORE_BYTES = 6 * 1024**3
CALL_TIMEOUT_S = 120
REPO_ROOT = str(Path(__file__).resolve().parents[2])


def make_big_train_data(seed: int = 0) -> dict[str, Any]:
    """64 samples of ~16k tokens; routed experts ``[tokens - 1, 48, 44]`` uint8 ids < 128."""
    rng = np.random.default_rng(seed)
    totals = TOKENS - rng.integers(0, 4, SAMPLES)
    width = LAYERS * TOP_K
    pool_bytes = int(totals.max() - 1) * width + SAMPLES * SHIFT
    pool = np.frombuffer(rng.bytes(pool_bytes), dtype=np.uint8) & np.uint8(127)
    experts = [
        pool[i * SHIFT : i * SHIFT + (int(n) - 1) * width].reshape(-1, LAYERS, TOP_K)
        for i, n in enumerate(totals)
    ]
    return {
        "tokens": [rng.integers(0, 151_936, int(n), dtype=np.int32) for n in totals],
        EXPERTS: experts,
    }


def checksums(samples: Any) -> list[int]:
    """crc32 of each sample's bytes."""
    return [zlib.crc32(np.ascontiguousarray(sample)) for sample in samples]


def column_checksums(shard: RolloutBatch, name: str) -> list[int]:
    """crc32 of each row's values of a numeric column, read as numpy views (no copy)."""
    (column,) = [c for c in shard.numeric_columns() if c.spec.name == name]
    assert column.offsets is not None
    offsets = column.offsets.tolist()
    return [zlib.crc32(column.values[b:e]) for b, e in itertools.pairwise(offsets)]


def leaf_type(array: pa.Array) -> pa.DataType:
    arrow_type = array.type
    while pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        arrow_type = arrow_type.value_type
    return arrow_type


# --- through Ray -------------------------------------------------------------------------------


def _free_bytes() -> tuple[int, int]:
    """Memory available now and free bytes of /dev/shm (where Ray's object store lives)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            fields = dict(line.split(":", 1) for line in meminfo)
        available = int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    shm = os.statvfs("/dev/shm") if os.path.isdir("/dev/shm") else None
    return available, 0 if shm is None else shm.f_bavail * shm.f_frsize


@pytest.fixture(scope="module")
def big_ray() -> Iterator[Any]:
    """A local Ray whose object store holds the 2.2 GB batch (and the eager shards)."""
    ray = pytest.importorskip("ray")
    available, shm = _free_bytes()
    if available < 8 * 1024**3 or shm < OBJECT_STORE_BYTES:
        pytest.skip(f"needs 8 GiB of free memory and a 6 GiB /dev/shm, got {available}, {shm}")
    python_path = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path)
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            log_to_driver=False,
            logging_level="ERROR",
        )
    try:
        yield ray
    finally:
        ray.shutdown()


def _rank_report(boxed: dict[str, Any], dp_rank: int, dp_size: int) -> dict[str, Any]:
    """What a rank checks of its shard: rows, checksums, stored type (run in the actor)."""
    from arrow_split.ray import process_rollout_data

    shard = process_rollout_data(boxed["refs"], dp_rank, dp_size)
    return {
        "partition": shard.partition.tolist(),
        "experts": column_checksums(shard, EXPERTS),
        "tokens": column_checksums(shard, "tokens"),
        "type": str(shard.column(EXPERTS).type),
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }


def _run_ranks(ray: Any, refs: Any) -> list[dict[str, Any]]:
    remote = ray.remote(num_cpus=0)(_rank_report)
    calls = [remote.remote({"refs": refs}, rank, DP_SIZE) for rank in range(DP_SIZE)]
    return ray.get(calls, timeout=CALL_TIMEOUT_S)  # type: ignore[no-any-return]


def _check_ranks(reports: list[dict[str, Any]], expected: dict[str, list[int]], kind: str) -> None:
    rows = sorted(row for report in reports for row in report["partition"])
    assert rows == list(range(SAMPLES)), kind
    assert {report["type"] for report in reports} == {expected["type"]}, kind  # type: ignore[comparison-overlap]
    for report in reports:
        for key in ("experts", "tokens"):
            want = [expected[key][row] for row in report["partition"]]
            assert report[key] == want, (kind, key, report["partition"])


def _wait_for_empty_store(ray: Any, timeout_s: float = 30.0) -> None:
    """Wait until the store has freed a dropped step (Ray frees objects asynchronously)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        free = ray.available_resources().get("object_store_memory", 0.0)
        if free > OBJECT_STORE_BYTES - 2**28:
            return
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.ray
def test_routed_experts_beyond_2_31_values_through_ray(big_ray: Any) -> None:
    from arrow_split.ray import split_train_data_by_dp

    ray = big_ray
    data = make_big_train_data()
    batch = RolloutBatch.from_train_data(data)
    experts = batch.column(EXPERTS)
    assert int(experts.offsets[-1].as_py()) * LAYERS * TOP_K > 2**31
    assert leaf_type(experts) == pa.uint8()
    expected: dict[str, Any] = {
        "experts": checksums(data[EXPERTS]),
        "tokens": checksums(data["tokens"]),
        "type": str(experts.type),
    }
    del experts

    # One copy of the 2.2 GB at a time besides the store's: the batch is built again per mode.
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    del batch  # the store holds the batch now; the ranks take from it
    _check_ranks(_run_ranks(ray, ref), expected, "delayed")
    del ref
    _wait_for_empty_store(ray)

    refs = split_train_data_by_dp(RolloutBatch.from_train_data(data), DP_SIZE, balance_data=False)
    _check_ranks(_run_ranks(ray, refs), expected, "eager")
    del refs


# --- offsets beyond 2**31, without the bytes ---------------------------------------------------

HUGE = 2**31 + 5
SMALL_LENGTHS = (3, 7, 1, 0, 5, 2, 4)


def offsets_batch() -> tuple[RolloutBatch, list[list[int]]]:
    """Sample 0 holds HUGE zero values (never touched); the small samples start past 2**31."""
    lengths = np.array([HUGE, *SMALL_LENGTHS], dtype=np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = np.zeros(int(offsets[-1]), dtype=np.uint8)  # lazily mapped: nothing resident
    small = []
    for sample in range(1, len(lengths)):
        begin, end = int(offsets[sample]), int(offsets[sample + 1])
        values[begin:end] = np.arange(end - begin, dtype=np.uint8) + 10 * sample
        small.append(values[begin:end].tolist())
    tokens = pa.LargeListArray.from_arrays(
        pa.array(offsets),
        pa.Array.from_buffers(pa.uint8(), len(values), [None, pa.py_buffer(values)]),
    )
    indices = pa.array(np.arange(len(lengths), dtype=np.int64))
    record_batch = pa.RecordBatch.from_arrays([tokens, indices], names=["tokens", "sample_indices"])
    specs = {
        "tokens": ColumnSpec("tokens", "per_token", pa.uint8(), role="length_source"),
        "sample_indices": ColumnSpec("sample_indices", "per_sample_scalar", pa.int64()),
    }
    return RolloutBatch(record_batch, specs), [[], *small]


@pytest.mark.slow
def test_offsets_beyond_2_31_take_the_int64_paths() -> None:
    batch, expected = offsets_batch()
    assert int(batch.column("tokens").offsets[1].as_py()) > 2**31
    assert batch.total_lengths.tolist() == [HUGE, *SMALL_LENGTHS]
    for balance_data in (False, True):
        plan = batch.make_plan(2, balance_data=balance_data)
        assert sorted(np.concatenate(plan.partitions).tolist()) == list(range(len(expected)))
        (rank,) = [r for r, part in enumerate(plan.partitions) if 0 not in part.tolist()]
        shard = shard_for_rank(batch, rank, 2, balance_data=balance_data)
        rows = shard.partition.tolist()
        assert shard.column("tokens").to_pylist() == [expected[row] for row in rows]
        assert shard.rows.to_train_data()["sample_indices"] == rows
        assert shard.total_lengths.tolist() == [len(expected[row]) for row in rows]
        assert len(pickle.dumps(shard, protocol=5)) < 64 * 1024  # fresh buffers, not the parent
    picked = take_rows(batch, np.array([7, 2, 5, 1]))
    assert picked.column("tokens").to_pylist() == [expected[row] for row in (7, 2, 5, 1)]


def test_rows_past_2_31_equal_the_same_samples_built_alone() -> None:
    """A take of the small samples of the big-offsets batch equals a batch of them alone."""
    batch, expected = offsets_batch()
    alone = RolloutBatch.from_train_data({"tokens": expected[1:]}, specs=[batch.specs["tokens"]])
    rows = take_rows(batch, np.arange(1, len(expected)))
    assert rows.column("tokens").equals(alone.column("tokens"))
