"""The faults the delayed split exists for, on a simulated 3-node cluster: nothing may be lost.

The driver puts on the head (node 0), whose object store is Ray's minimum plus a little (80 MiB),
so a step of a few tens of MiB spills. Four ranks run on nodes 1 and 2 (two each) and take their
rows node-aware (the default ``locality="auto"``): on the head, through its helper actor. Every
shard is checked against the core's split by CRC32 of its values. Ranks are killed mid-step (and
restarted, or lost for good), a node is removed without warning, the owner of a batch dies;
every survivor finishes the step, and a lost batch is a library error that names the step and
the rank, never a hang. Many steps in a row leave the object store and the driver's memory as
they were.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arrow_split import RolloutBatch, split_train_data_by_dp_raw
from tests.ray.simulated_cluster import (
    MIB,
    SimulatedCluster,
    box,
    bytes_on_disk,
    crc32_of,
    driver_memory_bytes,
    gather,
    make_batch,
    on_node,
    raylet_spill_stats,
    start_cluster,
    stop_cluster,
    store_capacity,
)
from tests.ray.support import rollout_failure, store_bytes_free, wait_until

ray = pytest.importorskip("ray")

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from arrow_split.ray import (  # noqa: E402
    HELPER_NAME_PREFIX,
    process_rollout_data,
    split_train_data_by_dp,
)

pytestmark = pytest.mark.ray

STORE_BYTES = 80 * MIB  # Ray refuses less than 75 MiB
RANK_NODES = [1, 1, 2, 2]
DP_SIZE = len(RANK_NODES)
CALL_TIMEOUT_S = 60.0


@ray.remote(num_cpus=0)
class Rank:
    """A train actor that reports a CRC32 of its shard (shards stay on the actor)."""

    def step(self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any) -> int:
        return crc32_of(process_rollout_data(boxed["refs"], dp_rank, dp_size, **kwargs))

    def step_and_fetches(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> tuple[int, list[list[Any]]]:
        fetched: list[Any] = []
        shard = process_rollout_data(
            boxed["refs"], dp_rank, dp_size, on_fetch=fetched.append, **kwargs
        )
        return crc32_of(shard), [fetched]

    def slow_step(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, delay_s: float, **kwargs: Any
    ) -> int:
        time.sleep(delay_s)
        return self.step(boxed, dp_rank, dp_size, **kwargs)

    def step_then_die_once(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, marker: str, **kwargs: Any
    ) -> int:
        crc = self.step(boxed, dp_rank, dp_size, **kwargs)
        if not os.path.exists(marker):  # the first attempt dies after its take, mid-step
            Path(marker).touch()
            os._exit(1)
        return crc

    def failure(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> tuple[str, str]:
        return rollout_failure(boxed["refs"], dp_rank, dp_size, **kwargs)

    def pid(self) -> int:
        return os.getpid()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    spill_root = Path(tmp_path_factory.mktemp("spill"))
    simulated = start_cluster(
        3,
        object_store_bytes=STORE_BYTES,
        spill_root=spill_root,
    )
    try:
        yield simulated
    finally:
        stop_cluster(simulated)


@pytest.fixture(scope="module")
def ranks(cluster: SimulatedCluster) -> list[Any]:
    handles = [on_node(Rank, node) for node in RANK_NODES]
    gather([handle.pid.remote() for handle in handles])
    return handles


def expected_crcs(batch: RolloutBatch, dp_size: int, *, balance_data: bool = True) -> list[int]:
    shards = split_train_data_by_dp_raw(batch, dp_size, balance_data=balance_data)
    return [crc32_of(shard) for shard in shards]


def step_calls(
    ranks: list[Any], refs_or_ref: Any, dp_size: int, *, first_rank: int = 0, **kwargs: Any
) -> list[Any]:
    """One call per rank; ``ranks[i]`` plays DP rank ``first_rank + i``."""
    return [
        rank.step.remote(box(refs_or_ref), r, dp_size, balance_data=True, **kwargs)
        for r, rank in enumerate(ranks, start=first_rank)
    ]


def rows_of(batch: RolloutBatch, dp_rank: int, dp_size: int) -> np.ndarray:
    (shard,) = [split_train_data_by_dp_raw(batch, dp_size, balance_data=True)[dp_rank]]
    assert shard.partition is not None
    return shard.partition


def spilled_bytes(refs: list[Any]) -> int:
    """The size of every distinct object that Ray says was spilled (``did_spill``)."""
    total = 0
    for ref in {ref.hex(): ref for ref in refs}.values():
        location = ray.experimental.get_object_locations([ref])[ref]
        total += location["object_size"] if location["did_spill"] else 0
    return total


# --- the object store is smaller than a step ---------------------------------------------------


def run_spilling_step(
    ranks: list[Any], refs: list[Any], ref: Any, expected: list[int]
) -> list[Any]:
    """Eager, node-aware and plain delayed in turn; every CRC must match. Returns the fetches."""
    fetched: list[Any] = []
    for refs_or_ref, options in (
        (refs, {}),
        (ref, {"locality": "auto"}),
        (ref, {"locality": "local"}),
    ):
        results = gather(
            [
                rank.step_and_fetches.remote(
                    box(refs_or_ref), r, DP_SIZE, balance_data=True, **options
                )
                for r, rank in enumerate(ranks)
            ],
            CALL_TIMEOUT_S,
        )
        assert [crc for crc, _ in results] == expected, options
        fetched += [item for _, nested in results for item in nested[0]]
    # The driver reads the eager shards back too: the head restores them from its spill files.
    for rank in range(len(refs)):
        assert crc32_of(process_rollout_data(refs, rank, DP_SIZE)) == expected[rank]
    return fetched


def test_a_step_larger_than_the_store_spills_and_comes_back_intact(
    cluster: SimulatedCluster, ranks: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    batch = make_batch(1400, seed=21, max_tokens=2000)
    assert batch.nbytes > 0.5 * STORE_BYTES
    expected = expected_crcs(batch, DP_SIZE)
    rank_nodes = [cluster.node_ids[node] for node in RANK_NODES]  # one eager object per node
    refs = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, rank_nodes=rank_nodes)
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    on_disk_after_puts = bytes_on_disk(cluster.spill_dirs)
    assert on_disk_after_puts > 0, "a step larger than the store must spill"
    fetched = run_spilling_step(ranks, refs, ref, expected)
    spilled = spilled_bytes([*refs, ref, *fetched])
    on_disk = max(on_disk_after_puts, bytes_on_disk(cluster.spill_dirs))
    with capsys.disabled():
        print(
            f"\nspill: a step of {2 * batch.nbytes / MIB:.1f} MiB (eager + delayed) into "
            f"{STORE_BYTES / MIB:.0f} MiB stores; spilled and read back, CRC-checked: "
            f"{spilled / MIB:.1f} MiB (Ray's did_spill); spill files {on_disk / MIB:.1f} MiB; "
            f"raylets logged {raylet_spill_stats(cluster)}"
        )
    assert spilled > 0
    del refs, ref, fetched
    assert wait_until(lambda: bytes_on_disk(cluster.spill_dirs) == 0), "spill files remain"


# --- ranks die --------------------------------------------------------------------------------


def test_a_rank_killed_mid_step_restarts_and_gets_the_same_shard(
    ranks: list[Any], tmp_path: Path
) -> None:
    victim = on_node(Rank, 1, max_restarts=1, max_task_retries=1)
    batch = make_batch(200, seed=22)
    expected = expected_crcs(batch, DP_SIZE)
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    # The victim starts the head's helper, which dies with it: the others must not notice.
    assert gather([victim.step.remote(box(ref), 0, DP_SIZE, balance_data=True)]) == expected[:1]
    pid_before = gather([victim.pid.remote()])[0]
    marker = str(tmp_path / "died")
    calls = [victim.step_then_die_once.remote(box(ref), 0, DP_SIZE, marker, balance_data=True)]
    calls += step_calls(ranks[1:], ref, DP_SIZE, first_rank=1)
    assert gather(calls, CALL_TIMEOUT_S) == expected
    assert Path(marker).exists()
    assert gather([victim.pid.remote()])[0] != pid_before
    ray.kill(victim)


def test_a_rank_lost_for_good_is_split_again_without_a_new_put(
    ranks: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    victim = on_node(Rank, 2)
    batch = make_batch(240, seed=23)
    ref = split_train_data_by_dp(batch, DP_SIZE + 1, balance_data=True, delay=True)
    doomed = victim.slow_step.remote(box(ref), DP_SIZE, DP_SIZE + 1, 30.0, balance_data=True)
    first = gather(step_calls(ranks, ref, DP_SIZE + 1), CALL_TIMEOUT_S)
    assert first == expected_crcs(batch, DP_SIZE + 1)[:DP_SIZE]
    ray.kill(victim, no_restart=True)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed, timeout=CALL_TIMEOUT_S)

    def no_put(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.put was called")

    monkeypatch.setattr(ray, "put", no_put)
    # The survivors split the same reference again, for one rank fewer.
    again = gather(step_calls(ranks, ref, DP_SIZE, resplit=True), CALL_TIMEOUT_S)
    assert again == expected_crcs(batch, DP_SIZE)
    rows = np.concatenate([rows_of(batch, r, DP_SIZE) for r in range(DP_SIZE)])
    assert np.bincount(rows, minlength=len(batch)).tolist() == [1] * len(batch)


def test_driver_owned_data_survives_the_death_of_a_rank_and_of_the_helper(
    cluster: SimulatedCluster, ranks: list[Any]
) -> None:
    victim = on_node(Rank, 1)
    batch = make_batch(200, seed=24)
    expected = expected_crcs(batch, DP_SIZE)
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    # The victim borrows the batch and (re)starts the helper; both die, the batch does not.
    assert gather([victim.step.remote(box(ref), 1, DP_SIZE, balance_data=True)]) == expected[1:2]
    helper = ray.get_actor(HELPER_NAME_PREFIX + cluster.node_ids[0])
    ray.kill(victim, no_restart=True)
    ray.kill(helper, no_restart=True)
    assert gather(step_calls(ranks, ref, DP_SIZE), CALL_TIMEOUT_S) == expected
    assert ray.get(ref, timeout=CALL_TIMEOUT_S).equals(batch)


# --- the batch's owner dies -------------------------------------------------------------------


@ray.remote(num_cpus=0)
class Owner:
    """Puts a step itself, and so owns it: its death loses the batch (as with any ray.put)."""

    def put(self, batch: RolloutBatch) -> dict[str, Any]:
        return box(split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True))


@pytest.mark.parametrize("locality", ["auto", "holder", "local"])
def test_a_batch_lost_with_its_owner_names_the_step_and_every_rank(
    ranks: list[Any], locality: str
) -> None:
    owner = on_node(Owner, 1)
    boxed = ray.get(owner.put.remote(make_batch(200, seed=25)), timeout=CALL_TIMEOUT_S)
    ray.kill(owner)
    # Ray frees a dead owner's objects asynchronously: poll until every rank sees the loss.
    deadline = time.monotonic() + 30
    outcomes: list[tuple[str, str]] = []
    while time.monotonic() < deadline:
        calls = [
            rank.failure.remote(boxed, r, DP_SIZE, balance_data=True, locality=locality, step=7)
            for r, rank in enumerate(ranks)
        ]
        outcomes = gather(calls, CALL_TIMEOUT_S)  # a bounded wait: a hang fails the test
        if all(kind for kind, _ in outcomes):
            break
        time.sleep(0.2)
    for rank, (kind, message) in enumerate(outcomes):
        assert kind == "TransportError", (rank, message)
        assert message.startswith(
            f"step 7, dp_rank {rank}: the object store lost the delayed reference ("
        ), message
        assert "the driver should own the batch" in message


# --- a node goes away -------------------------------------------------------------------------


def test_a_node_removed_without_warning_leaves_the_survivors_to_finish(
    cluster: SimulatedCluster, ranks: list[Any], tmp_path: Path
) -> None:
    index = cluster.add_node(object_store_bytes=STORE_BYTES, spill_root=tmp_path)
    doomed = [on_node(Rank, index) for _ in range(2)]
    gather([rank.pid.remote() for rank in doomed])
    batch = make_batch(240, seed=26)
    dp_size = DP_SIZE + len(doomed)
    ref = split_train_data_by_dp(batch, dp_size, balance_data=True, delay=True)
    in_flight = [
        rank.slow_step.remote(box(ref), DP_SIZE + i, dp_size, 30.0, balance_data=True)
        for i, rank in enumerate(doomed)
    ]
    cluster.cluster.remove_node(cluster.nodes[index], allow_graceful=False)
    for call in in_flight:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(call, timeout=CALL_TIMEOUT_S)
    # The step goes on with the survivors: the same reference, split for them.
    survivors = gather(step_calls(ranks, ref, DP_SIZE, resplit=True), CALL_TIMEOUT_S)
    assert survivors == expected_crcs(batch, DP_SIZE)


@ray.remote(num_cpus=0, max_retries=3)
def produce(batch: RolloutBatch, marker: str) -> RolloutBatch:
    """A batch with its plan as a task's return value; a re-run (a rebuild) takes 3 s."""
    if os.path.exists(marker):
        time.sleep(3.0)
    Path(marker).touch()
    return batch.with_plan(batch.make_plan(2, balance_data=True))


def test_an_object_ray_rebuilds_from_lineage_is_waited_for(
    cluster: SimulatedCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import arrow_split.ray._nodes as nodes
    from arrow_split.ray import can_free

    if can_free():
        pytest.skip(f"Ray {ray.__version__} can free objects: a rebuild's wait is bounded there")
    monkeypatch.setattr(nodes, "_GET_RECHECK_S", 0.2)  # the rebuild takes 6 times the window
    monkeypatch.setattr(nodes, "_GONE_AFTER_S", 0.5)
    index = cluster.add_node(object_store_bytes=STORE_BYTES, spill_root=tmp_path)
    batch = make_batch(200, seed=28)
    there = NodeAffinitySchedulingStrategy(cluster.node_ids[index], soft=True)
    ref = produce.options(scheduling_strategy=there).remote(batch, str(tmp_path / "ran"))
    ready, _ = ray.wait([ref], timeout=CALL_TIMEOUT_S, fetch_local=False)
    assert ready
    holders = ray.experimental.get_object_locations([ref])[ref]["node_ids"]
    assert holders == [cluster.node_ids[index]]
    cluster.cluster.remove_node(cluster.nodes[index], allow_graceful=False)
    # the only copy is gone with its node: Ray runs the task again, elsewhere
    assert wait_until(lambda: not ray.experimental.get_object_locations([ref])[ref]["node_ids"])
    shard = process_rollout_data(ref, 1, 2, locality="local")
    assert crc32_of(shard) == expected_crcs(batch, 2)[1]


# --- many steps in a row ----------------------------------------------------------------------


def _settled_store_free(timeout_s: float = 20.0) -> float:
    """The store's free bytes once they stop changing for a second (or ``timeout_s`` passes)."""
    deadline = time.monotonic() + timeout_s
    last, since = store_bytes_free(), time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - since < 1.0:
        time.sleep(0.1)
        now = store_bytes_free()
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_many_steps_leave_the_store_and_the_driver_as_they_were(ranks: list[Any]) -> None:
    batch = make_batch(400, seed=27)
    assert 1.5 * MIB < batch.nbytes < 4 * MIB

    def one_step() -> None:
        refs = split_train_data_by_dp(batch, DP_SIZE, balance_data=True)
        ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
        gather(step_calls(ranks, refs, DP_SIZE) + step_calls(ranks, ref, DP_SIZE))

    one_step()  # warm-up: helpers, connections, caches
    gc.collect()
    capacity = store_capacity()
    # What this test starts from: the store once Ray has freed the warm-up step (earlier tests
    # of the module, whose objects Ray may still be reclaiming, count in it, never against it).
    start_free = _settled_store_free()
    memory_start = driver_memory_bytes()
    lowest_free = capacity
    for _ in range(30):
        one_step()
        lowest_free = min(lowest_free, store_bytes_free())
    gc.collect()
    assert wait_until(lambda: store_bytes_free() >= start_free), (
        f"{start_free - store_bytes_free():.0f} bytes stay pinned in the store after 30 steps"
    )
    memory_end = driver_memory_bytes()
    assert memory_end["private"] - memory_start["private"] < 16 * MIB, (memory_start, memory_end)
    print(
        f"30 steps: store {capacity / MIB:.0f} MiB, lowest free {lowest_free / MIB:.1f} MiB, "
        f"back to {start_free / MIB:.1f} MiB free as at the start; "
        f"driver RSS {memory_start['rss'] / MIB:.1f} -> "
        f"{memory_end['rss'] / MIB:.1f} MiB, private {memory_start['private'] / MIB:.1f} -> "
        f"{memory_end['private'] / MIB:.1f} MiB"
    )
