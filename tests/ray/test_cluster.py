"""The delayed split at cluster scale, on a simulated 3-node cluster (one object store per node).

The driver puts on the head (node 0); two ranks run on each of the three nodes. Ray moves an
object between nodes whole, so the plain delayed split (``locality="local"``) brings the whole
batch to each of the two other nodes: (nodes - 1) x the batch crosses. The node-aware modes take
the off-head ranks' rows on the head and move only their shards, as eager mode does. Every mode
must give every rank the core's shard, bit for bit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arrow_split import OptionError, RolloutBatch, split_train_data_by_dp_raw
from tests.error_facts import raises_facts
from tests.ray.simulated_cluster import (
    MIB,
    SimulatedCluster,
    box,
    cross_node_bytes,
    gather,
    make_batch,
    on_node,
    start_cluster,
    stop_cluster,
)

ray = pytest.importorskip("ray")

from arrow_split.block import RankBlock  # noqa: E402
from arrow_split.ray import (  # noqa: E402
    HELPER_NAME_PREFIX,
    fill_rank_block,
    process_rollout_data,
    split_train_data_by_dp,
)

pytestmark = pytest.mark.ray

NUM_NODES = 3
RANKS_PER_NODE = 2
DP_SIZE = NUM_NODES * RANKS_PER_NODE
MODES = ["eager", "local", "auto", "holder"]


@ray.remote(num_cpus=0)
class Rank:
    """A train actor; returns its shard and the references its call fetched (kept alive)."""

    def step(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> tuple[RolloutBatch, list[list[Any]]]:
        fetched: list[Any] = []
        shard = process_rollout_data(
            boxed["refs"], dp_rank, dp_size, on_fetch=fetched.append, **kwargs
        )
        # Nested in a list, the references travel as references: the driver measures them.
        return shard, [fetched]

    def fill(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int
    ) -> dict[str, tuple[bytes, list[int] | None]]:
        """Its rows of the put through :func:`fill_rank_block` (``locality="auto"``)."""
        filled = fill_rank_block(boxed["refs"], dp_rank, dp_size, RankBlock(), balance_data=True)
        return {name: _bytes_and_offsets(column) for name, column in filled.columns.items()}

    def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


def _bytes_and_offsets(column: Any) -> tuple[bytes, list[int] | None]:
    offsets = None if column.offsets is None else column.offsets.tolist()
    return column.values.tobytes(), offsets


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedCluster]:
    spill_root = Path(tmp_path_factory.mktemp("spill"))
    simulated = start_cluster(NUM_NODES, object_store_bytes=100 * MIB, spill_root=spill_root)
    try:
        yield simulated
    finally:
        stop_cluster(simulated)


@pytest.fixture(scope="module")
def ranks(cluster: SimulatedCluster) -> list[Any]:
    """Rank ``r`` runs on node ``r // RANKS_PER_NODE``."""
    handles = [on_node(Rank, rank // RANKS_PER_NODE) for rank in range(DP_SIZE)]
    placed = gather([handle.node_id.remote() for handle in handles])
    assert placed == [cluster.node_ids[rank // RANKS_PER_NODE] for rank in range(DP_SIZE)]
    return handles


@pytest.fixture(scope="module")
def batch() -> RolloutBatch:
    return make_batch(600, seed=11)


def put_step(
    batch: RolloutBatch, mode: str, rank_nodes: list[str], *, balance_data: bool = True
) -> Any:
    """What the driver puts for ``mode``: one object per node (eager), or the batch once."""
    if mode != "eager":
        return split_train_data_by_dp(batch, DP_SIZE, balance_data=balance_data, delay=True)
    return split_train_data_by_dp(batch, DP_SIZE, balance_data=balance_data, rank_nodes=rank_nodes)


@pytest.fixture(scope="module")
def rank_nodes(cluster: SimulatedCluster) -> list[str]:
    """Each rank's node id, as a framework collects them from its train actors."""
    return [cluster.node_ids[rank // RANKS_PER_NODE] for rank in range(DP_SIZE)]


def run_step(
    ranks: list[Any], refs_or_ref: Any, mode: str, *, balance_data: bool = True
) -> tuple[list[RolloutBatch], int, list[list[Any]]]:
    """One step in ``mode``: the shards, the bytes that crossed nodes, each rank's fetches."""
    options = {} if mode == "eager" else {"locality": mode}
    results = gather(
        [
            rank.step.remote(box(refs_or_ref), r, DP_SIZE, balance_data=balance_data, **options)
            for r, rank in enumerate(ranks)
        ]
    )
    fetched = [nested[0] for _, nested in results]
    driver_refs = list(refs_or_ref) if mode == "eager" else [refs_or_ref]
    crossed = cross_node_bytes(driver_refs + [ref for refs in fetched for ref in refs])
    return [shard for shard, _ in results], crossed, fetched


def object_size(ref: Any) -> int:
    return int(ray.experimental.get_object_locations([ref])[ref]["object_size"])


@pytest.mark.parametrize("balance_data", [False, True])
def test_every_mode_gives_every_rank_the_core_shard(
    ranks: list[Any], rank_nodes: list[str], batch: RolloutBatch, balance_data: bool
) -> None:
    expected = split_train_data_by_dp_raw(batch, DP_SIZE, balance_data=balance_data)
    for mode in MODES:
        refs_or_ref = put_step(batch, mode, rank_nodes, balance_data=balance_data)
        shards, _, _ = run_step(ranks, refs_or_ref, mode, balance_data=balance_data)
        for rank, shard in enumerate(shards):
            assert shard.equals(expected[rank]), (mode, rank)


def test_node_aware_moves_what_eager_moves_and_local_moves_the_batch_per_node(
    ranks: list[Any], rank_nodes: list[str], batch: RolloutBatch
) -> None:
    crossed = {mode: run_step(ranks, put_step(batch, mode, rank_nodes), mode)[1] for mode in MODES}
    batch_object_bytes = object_size(put_step(batch, "local", rank_nodes))
    # Eager: one object per node, shared by the node's ranks.
    assert len({ref.hex() for ref in put_step(batch, "eager", rank_nodes)}) == NUM_NODES
    # The two off-head nodes hold 4 of the 6 ranks: 2/3 of the rows cross, in eager mode.
    assert 0.6 * batch.nbytes < crossed["eager"] < 0.8 * batch.nbytes
    assert crossed["local"] == (NUM_NODES - 1) * batch_object_bytes
    assert crossed["auto"] <= 1.25 * crossed["eager"]
    assert crossed["holder"] <= 1.25 * crossed["eager"]
    summary = {mode: round(value / MIB, 2) for mode, value in crossed.items()}
    print(f"cross-node MiB per step, batch {batch.nbytes / MIB:.2f} MiB: {summary}")


def test_auto_takes_here_where_the_node_holds_the_batch(
    cluster: SimulatedCluster, ranks: list[Any], batch: RolloutBatch
) -> None:
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    results = gather(
        [rank.step.remote(box(ref), r, DP_SIZE, balance_data=True) for r, rank in enumerate(ranks)]
    )
    for rank, (shard, nested) in enumerate(results):
        (fetched,) = nested[0]
        if rank < RANKS_PER_NODE:  # on the head, which holds the batch: a zero-copy local take
            assert fetched == ref
        else:  # elsewhere: only the shard the head's helper took came here
            assert fetched != ref
            assert object_size(fetched) < 1.2 * shard.nbytes + 64 * 1024
    # One helper, on the head; none on a node that never held the batch.
    assert ray.get_actor(HELPER_NAME_PREFIX + cluster.node_ids[0])
    for node_id in cluster.node_ids[1:]:
        with pytest.raises(ValueError, match="Failed to look up actor"):
            ray.get_actor(HELPER_NAME_PREFIX + node_id)
    # Once every node holds a copy (a plain delayed step pulled it), auto takes everywhere
    # locally: no new object, nothing more crosses.
    _, crossed_local, _ = run_step(ranks, ref, "local")
    assert crossed_local == (NUM_NODES - 1) * object_size(ref)
    _, crossed_auto, fetched = run_step(ranks, ref, "auto")
    assert fetched == [[ref]] * DP_SIZE
    assert crossed_auto == crossed_local


def test_a_delayed_block_is_filled_where_the_rows_are_taken(
    cluster: SimulatedCluster, ranks: list[Any], batch: RolloutBatch
) -> None:
    ref = split_train_data_by_dp(batch, DP_SIZE, balance_data=True, delay=True)
    filled = gather([rank.fill.remote(box(ref), r, DP_SIZE) for r, rank in enumerate(ranks)])
    expected = split_train_data_by_dp_raw(batch, DP_SIZE, balance_data=True)
    for rank, columns in enumerate(filled):
        shard = {column.spec.name: column for column in expected[rank].numeric_columns()}
        assert columns == {name: _bytes_and_offsets(shard[name]) for name in shard}, rank
    # The batch stayed on the head: the other nodes' ranks took their rows there, not here.
    assert ray.experimental.get_object_locations([ref])[ref]["node_ids"] == cluster.node_ids[:1]


def test_a_bad_locality_lists_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = split_train_data_by_dp(make_batch(8, seed=12), 2, balance_data=False, delay=True)

    def no_get(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.get was called")

    monkeypatch.setattr(ray, "get", no_get)
    with raises_facts(OptionError, key="locality"):
        process_rollout_data(ref, 0, 2, balance_data=False, locality="remote")  # type: ignore[arg-type]
    with raises_facts(OptionError, key="locality"):
        process_rollout_data([ref, ref], 0, 2, balance_data=False, locality=None)  # type: ignore[arg-type]


def test_a_location_lookup_that_times_out_early_is_asked_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ray 2.49 waits ``timeout_ms`` microseconds: a loaded owner answers "too late" at once.

    Taken as "no holder known", that made ``"auto"`` fetch the whole batch to the rank's node.
    """
    from arrow_split.ray import _nodes

    ref, answer, asked = object(), {"node_ids": ["head"], "object_size": 1}, []

    def times_out_twice(refs: list[Any], timeout_ms: int) -> dict[Any, Any]:
        asked.append(timeout_ms)
        if len(asked) < 3:
            raise ray.exceptions.GetTimeoutError("Failed querying object locations in time.")
        return {refs[0]: answer}

    monkeypatch.setattr(ray.experimental, "get_object_locations", times_out_twice)
    assert _nodes._location(ref) == answer  # type: ignore[arg-type]
    assert len(asked) == 3
    assert all(0 < timeout_ms <= 10_000 for timeout_ms in asked)

    def never_answers(refs: list[Any], timeout_ms: int) -> dict[Any, Any]:
        asked.append(timeout_ms)
        raise ray.exceptions.GetTimeoutError("Failed querying object locations in time.")

    asked.clear()
    monkeypatch.setattr(ray.experimental, "get_object_locations", never_answers)
    monkeypatch.setattr(_nodes, "_LOOKUP_TIMEOUT_S", 0.2)
    assert _nodes._location(ref) is None  # type: ignore[arg-type]
    assert len(asked) > 2
    assert asked[-1] == 1  # asked until the wait was spent (1 ms left), not given up at once
