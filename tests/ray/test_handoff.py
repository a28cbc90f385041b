"""The Ray hand-off: a driver puts, DP actors take their own rows, in a real local cluster.

Every shard an actor gets must equal the core's split; the delayed get must be zero-copy; an actor
must pay for its shard only; writes must stay private; a step's objects must be freed once the
driver drops its references; and bad input must fail fast, naming the rank.
"""

from __future__ import annotations

import gc
import importlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrow_split
from arrow_split import (
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanMismatchError,
    RaggedLengthError,
    RolloutBatch,
    Shard,
    TokenLists,
    TransportError,
    shard_for_rank,
    split_train_data_by_dp_raw,
)

ray = pytest.importorskip("ray")

from arrow_split.ray import process_rollout_data, split_train_data_by_dp  # noqa: E402
from tests.error_facts import raises_facts  # noqa: E402
from tests.ray.support import rollout_failure, store_bytes_free, wait_until  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

NUM_WORKERS = 6
CALL_TIMEOUT_S = 60


def make_train_data(num_samples: int, seed: int, *, experts: bool = False) -> dict[str, Any]:
    """A rollout batch as the rollout side builds it: ragged tokens of a few hundred ids."""
    rng = np.random.default_rng(seed)
    total = rng.integers(64, 400, size=num_samples)
    response = total - rng.integers(8, 48, size=num_samples)
    data: dict[str, Any] = {
        "tokens": [rng.integers(0, 32000, size=int(n), dtype=np.int32) for n in total],
        "response_lengths": response.tolist(),
        "loss_masks": [rng.integers(0, 2, size=int(r), dtype=np.uint8) for r in response],
        "rollout_log_probs": [-rng.random(int(r), dtype=np.float32) for r in response],
        "rewards": rng.random(num_samples).tolist(),
        "prompt": [f"prompt {seed}-{i}" for i in range(num_samples)],
        "raw_reward": rng.random(num_samples).tolist(),
        "rollout_sampling_masks": sampling_masks(response.tolist(), seed),
    }
    if experts:
        data["rollout_routed_experts"] = [
            rng.integers(0, 8, size=(int(n) - 1, 2, 2), dtype=np.int32) for n in total
        ]
    return data


def sampling_masks(response_lengths: list[int], seed: int) -> list[TokenLists]:
    """1 to 4 ids per response token (a list per token), from a stream of their own."""
    rng = np.random.default_rng(seed + 1)
    masks = []
    for length in response_lengths:
        counts = rng.integers(1, 5, size=length)
        offsets = np.concatenate([[0], np.cumsum(counts)])
        masks.append(TokenLists(rng.integers(0, 32000, size=int(offsets[-1])), offsets))
    return masks


def make_batch(num_samples: int, seed: int, *, experts: bool = False) -> RolloutBatch:
    return RolloutBatch.from_train_data(make_train_data(num_samples, seed, experts=experts))


def box(refs_or_ref: Any) -> dict[str, Any]:
    """Wrap a reference so that Ray hands it to the actor as it is, not resolved."""
    return {"refs": refs_or_ref}


def buffers_of(record_batch: pa.RecordBatch) -> list[pa.Buffer]:
    """Every Arrow buffer of a record batch (``Array.buffers`` includes the children's)."""
    return [buffer for column in record_batch.columns for buffer in column.buffers() if buffer]


@ray.remote(num_cpus=0)
class DPWorker:
    """A train actor of one DP rank (the rank is an argument, so one actor can play several)."""

    def __init__(self) -> None:
        self.kept: list[RolloutBatch] = []

    def process(self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any) -> Any:
        return process_rollout_data(boxed["refs"], dp_rank, dp_size, **kwargs)

    def process_resolved(self, batch: Any, dp_rank: int, dp_size: int, **kwargs: Any) -> Any:
        # Ray resolved the top-level reference: `batch` is the RolloutBatch itself.
        return process_rollout_data(batch, dp_rank, dp_size, **kwargs)

    def failure(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> tuple[str, str]:
        return rollout_failure(boxed["refs"], dp_rank, dp_size, **kwargs)

    def get_twice(self, boxed: dict[str, Any]) -> dict[str, Any]:
        before = pa.total_allocated_bytes()
        first = ray.get(boxed["refs"])
        second = ray.get(boxed["refs"])
        grown = pa.total_allocated_bytes() - before
        first_buffers = buffers_of(first.record_batch)
        second_buffers = buffers_of(second.record_batch)
        return {
            "grown": grown,
            "first": [buffer.address for buffer in first_buffers],
            "second": [buffer.address for buffer in second_buffers],
            "mutable": [buffer.is_mutable for buffer in first_buffers + second_buffers],
            "nbytes": first.nbytes,
        }

    def allocation_of(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> dict[str, Any]:
        before = pa.total_allocated_bytes()
        shard = process_rollout_data(boxed["refs"], dp_rank, dp_size, **kwargs)
        grown = pa.total_allocated_bytes() - before
        arrays = [shard.partition, shard.batch_total_lengths, *shard.batch_globals.values()]
        return {
            "grown": grown,
            "shard_nbytes": shard.nbytes,
            # The store's memory is read-only: a mutable buffer is one this process allocated.
            "mutable": [buffer.is_mutable for buffer in buffers_of(shard.record_batch)],
            "arrays_own_memory": [
                array.base is None for array in arrays if isinstance(array, np.ndarray)
            ],
        }

    def write_into_tensors(
        self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any
    ) -> dict[str, Any]:
        import torch

        from arrow_split.torch import to_tensors

        shard = process_rollout_data(boxed["refs"], dp_rank, dp_size, **kwargs)
        tensors = to_tensors(shard, layout="packed", token_dtype=torch.int32)
        tokens, log_probs = tensors["tokens"], tensors["rollout_log_probs"]
        assert isinstance(tokens, torch.Tensor)
        assert isinstance(log_probs, torch.Tensor)
        tokens.fill_(-7)
        log_probs.fill_(99.0)
        return {
            "tokens": tokens.tolist(),
            "log_probs": log_probs.tolist(),
            "shard_tokens": shard.column("tokens").values.to_pylist(),
        }

    def slice_of(self, boxed: dict[str, Any], dp_rank: int, dp_size: int) -> dict[str, Any]:
        node_rows = ray.get(boxed["refs"][dp_rank])
        before = pa.total_allocated_bytes()
        shard = process_rollout_data(boxed["refs"], dp_rank, dp_size)
        grown = pa.total_allocated_bytes() - before
        buffers = buffers_of(shard.record_batch)
        # The Arrow buffers, and the numpy views of the rank's own values within them.
        views = [(b.address, b.size) for b in buffers]
        views += [
            (column.values.ctypes.data, column.values.nbytes)
            for column in shard.numeric_columns()
            if column.values.dtype != np.bool_  # booleans are unpacked into a copy
        ]
        return {
            "object_buffers": [
                (b.address, b.size) for b in buffers_of(node_rows.rows.record_batch)
            ],
            "object_rows": node_rows.rows.record_batch.num_rows,
            "shard_buffers": views,
            "mutable": [buffer.is_mutable for buffer in buffers],
            "grown": grown,
            "shard_nbytes": shard.nbytes,
        }

    def keep(self, boxed: dict[str, Any], dp_rank: int, dp_size: int, **kwargs: Any) -> int:
        shard = process_rollout_data(boxed["refs"], dp_rank, dp_size, **kwargs)
        self.kept.append(shard)
        return len(shard)

    def drop(self) -> int:
        dropped = len(self.kept)
        self.kept.clear()
        return dropped


@ray.remote(num_cpus=0)
class Owner:
    """An actor that puts a step itself, and so owns its objects: killing it loses them."""

    def put(self, batch: RolloutBatch) -> list[Any]:
        return split_train_data_by_dp(batch, 1, balance_data=False)


@pytest.fixture(scope="module")
def workers(ray_cluster: None) -> Iterator[list[Any]]:
    handles = [DPWorker.remote() for _ in range(NUM_WORKERS)]  # type: ignore[attr-defined]
    ray.get([handle.drop.remote() for handle in handles], timeout=CALL_TIMEOUT_S)
    yield handles
    for handle in handles:
        ray.kill(handle)


def gather(calls: list[Any]) -> list[Any]:
    return ray.get(calls, timeout=CALL_TIMEOUT_S)  # type: ignore[no-any-return]


def expected_shards(batch: RolloutBatch, dp_size: int, balance_data: bool) -> list[Shard]:
    return split_train_data_by_dp_raw(batch, dp_size, balance_data=balance_data)


def assert_actor_train_data(shard: Shard, expected: Shard) -> None:
    train_data = shard.to_train_data(layout="actor")
    assert "partition" not in train_data
    assert train_data["total_lengths"] == expected.total_lengths.tolist()
    assert train_data["global_total_lengths"] == expected.batch_total_lengths.tolist()
    assert train_data["tokens"] == expected.to_train_data(layout="actor")["tokens"]
    assert train_data["raw_reward"] == expected.batch_globals["raw_reward"].tolist()  # type: ignore[attr-defined]


# --- shards equal the core's split, in both modes --------------------------------------------


@pytest.mark.parametrize("balance_data", [False, True])
def test_eager_and_delayed_give_the_core_split(workers: list[Any], balance_data: bool) -> None:
    batch = make_batch(96, seed=1, experts=True)
    dp_size = NUM_WORKERS
    expected = expected_shards(batch, dp_size, balance_data)
    refs = split_train_data_by_dp(batch, dp_size, balance_data=balance_data)
    ref = split_train_data_by_dp(batch, dp_size, balance_data=balance_data, delay=True)
    assert isinstance(refs, list)
    assert len(refs) == dp_size
    assert isinstance(ref, ray.ObjectRef)
    options = {"balance_data": balance_data}
    eager = gather(
        [w.process.remote(box(refs), r, dp_size, **options) for r, w in enumerate(workers)]
    )
    delayed = gather(
        [w.process.remote(box(ref), r, dp_size, **options) for r, w in enumerate(workers)]
    )
    resolved = gather(
        [w.process_resolved.remote(ref, r, dp_size, **options) for r, w in enumerate(workers)]
    )
    for rank in range(dp_size):
        for shard in (eager[rank], delayed[rank], resolved[rank]):
            assert shard.equals(expected[rank]), rank
            assert_actor_train_data(shard, expected[rank])


def test_eager_objects_hold_only_their_nodes_rows() -> None:
    train_data = make_train_data(256, seed=2, experts=True)
    batch = RolloutBatch.from_train_data(train_data)
    # Four nodes, ranks 0 and 5 on node "a": one object per node, shared by its ranks.
    rank_nodes = ["a", "b", "c", "d", "b", "a", "c", "d"]
    refs = split_train_data_by_dp(train_data, 8, balance_data=False, rank_nodes=rank_nodes)
    assert len(refs) == 8
    assert len({ref.hex() for ref in refs}) == 4
    assert [refs.index(ref) for ref in refs] == [0, 1, 2, 3, 1, 0, 2, 3]
    total = 0
    for ref in {ref.hex(): ref for ref in refs}.values():
        node_rows = ray.get(ref, timeout=CALL_TIMEOUT_S)
        # A slice view would carry the whole parent: each object's buffers are its own rows only.
        size = sum(buffer.size for buffer in buffers_of(node_rows.rows.record_batch))
        assert node_rows.rows.record_batch.get_total_buffer_size() < batch.nbytes / 3
        assert size < batch.nbytes / 3
        total += node_rows.rows.record_batch.nbytes
    assert total == pytest.approx(batch.nbytes, rel=0.01)
    # Without `rank_nodes`: one object for every rank, the batch as it is with its plan (the
    # driver gathers nothing).
    refs = split_train_data_by_dp(train_data, 8, balance_data=False)
    assert len({ref.hex() for ref in refs}) == 1
    whole = ray.get(refs[0], timeout=CALL_TIMEOUT_S)
    assert whole.equals(batch)
    assert whole.plan is not None
    assert whole.plan.key == batch.make_plan(8, balance_data=False).key


@pytest.mark.parametrize("balance_data", [False, True])
def test_ranks_grouped_by_node_get_the_core_split(workers: list[Any], balance_data: bool) -> None:
    batch = make_batch(96, seed=11)
    dp_size = NUM_WORKERS
    expected = expected_shards(batch, dp_size, balance_data)
    for rank_nodes in (["n1", "n0", "n1", "n0", "n2", "n2"], ["n"] * dp_size, None):
        refs = split_train_data_by_dp(
            batch, dp_size, balance_data=balance_data, rank_nodes=rank_nodes
        )
        shards = gather(
            [
                w.process.remote(box(refs), r, dp_size, balance_data=balance_data)
                for r, w in enumerate(workers)
            ]
        )
        for rank, shard in enumerate(shards):
            assert shard.equals(expected[rank]), (rank_nodes, rank)


def test_an_eager_shard_is_a_zero_copy_slice_of_its_nodes_object(workers: list[Any]) -> None:
    batch = make_batch(256, seed=12, experts=True)
    refs = split_train_data_by_dp(batch, 4, balance_data=True, rank_nodes=["a", "a", "b", "b"])
    probes = gather([workers[0].slice_of.remote(box(refs), r, 4) for r in range(4)])
    for rank, probe in enumerate(probes):
        assert probe["shard_buffers"]
        # Every buffer of the shard lies inside a buffer of its node's object, mapped read-only
        # from the store (the same addresses as a plain get of that object in this process).
        inside = [
            any(
                start <= address and address + size <= start + length
                for start, length in probe["object_buffers"]
            )
            for address, size in probe["shard_buffers"]
        ]
        assert all(inside), rank
        assert not any(probe["mutable"])
        # pyarrow allocated nothing for the values: the slice is a view.
        assert probe["grown"] < probe["shard_nbytes"] / 10
        # The object holds its node's two ranks' rows, no more.
        partitions = batch.make_plan(4, balance_data=True).partitions
        first = rank - rank % 2
        assert probe["object_rows"] == len(partitions[first]) + len(partitions[first + 1])


def test_the_delayed_ref_splits_again_for_a_smaller_dp_size(workers: list[Any]) -> None:
    batch = make_batch(96, seed=3)
    ref = split_train_data_by_dp(batch, 6, balance_data=True, delay=True)
    first = gather(
        [w.process.remote(box(ref), r, 6, balance_data=True) for r, w in enumerate(workers)]
    )
    # A rank died: the four survivors split the same object again, without a new put.
    survivors = workers[:4]
    again = gather(
        [
            w.process.remote(box(ref), r, 4, balance_data=True, resplit=True)
            for r, w in enumerate(survivors)
        ]
    )
    for shards, dp_size in ((first, 6), (again, 4)):
        partitions = np.concatenate(
            [shard.to_train_data(layout="rollout")["partition"] for shard in shards]
        )
        assert np.bincount(partitions, minlength=len(batch)).tolist() == [1] * len(batch)
        for shard, expected in zip(shards, expected_shards(batch, dp_size, True), strict=True):
            assert shard.equals(expected)


@pytest.mark.parametrize("delay", [False, True])
def test_pad_to_dp_in_both_modes_and_on_a_resplit(workers: list[Any], delay: bool) -> None:
    batch = make_batch(29, seed=4)  # 29 samples: 6 ranks need 1 padding row, 4 ranks need 3
    expected = split_train_data_by_dp_raw(batch, 6, balance_data=True, pad_to_dp=True)
    put = split_train_data_by_dp(batch, 6, balance_data=True, delay=delay, pad_to_dp=True)
    shards = gather([w.process.remote(box(put), r, 6) for r, w in enumerate(workers)])
    for shard, want in zip(shards, expected, strict=True):
        assert shard.equals(want)
    assert sum(sum(shard.to_train_data(layout="actor")["is_padding"]) for shard in shards) == 1
    if delay:  # four survivors split the padded batch again, padding it for their size
        again = gather(
            [
                w.process.remote(box(put), r, 4, resplit=True, pad_to_dp=True)
                for r, w in enumerate(workers[:4])
            ]
        )
        assert {shard.num_samples for shard in again} == {8}
        padding = [shard.to_train_data(layout="actor")["is_padding"] for shard in again]
        assert sum(sum(flags) for flags in padding) == 3


@pytest.mark.parametrize("delay", [False, True])
def test_witness_ids_follow_their_rows(workers: list[Any], delay: bool) -> None:
    batch = make_batch(64, seed=4)
    witness_ids = np.arange(1000, 1000 + len(batch), dtype=np.int64)[::-1].copy()
    refs_or_ref = split_train_data_by_dp(batch, 4, balance_data=True, delay=delay)
    shards = gather(
        [
            w.process.remote(box(refs_or_ref), r, 4, balance_data=True, witness_ids=witness_ids)
            for r, w in enumerate(workers[:4])
        ]
    )
    # The same shards as the core gives for the whole batch with the ids added as a column.
    with_ids = batch.add_train_data({"seq_witness_ids": witness_ids})
    for shard, expected in zip(shards, expected_shards(with_ids, 4, True), strict=True):
        assert shard.equals(expected)
        train_data = shard.to_train_data(layout="rollout")
        assert train_data["seq_witness_ids"] == witness_ids[train_data["partition"]].tolist()


# --- zero copy and per-rank memory ------------------------------------------------------------


def test_the_delayed_get_maps_the_store_without_a_copy(workers: list[Any]) -> None:
    batch = make_batch(256, seed=5, experts=True)
    ref = split_train_data_by_dp(batch, 4, balance_data=False, delay=True)
    probe = gather([workers[0].get_twice.remote(box(ref))])[0]
    assert probe["nbytes"] == batch.nbytes
    # Read-only buffers, the same addresses on both gets: both views map the store's memory.
    assert probe["mutable"]
    assert not any(probe["mutable"])
    assert probe["first"] == probe["second"]
    # pyarrow allocated nothing for the batch on either get.
    assert probe["grown"] < batch.nbytes / 100
    original = {buffer.address for buffer in buffers_of(batch.record_batch)}
    driver_views = buffers_of(ray.get(ref, timeout=CALL_TIMEOUT_S).record_batch)
    assert not original & {buffer.address for buffer in driver_views}
    assert not any(buffer.is_mutable for buffer in driver_views)


@pytest.mark.parametrize("delay", [True, False])
def test_an_actor_pays_for_its_shard_not_the_batch(workers: list[Any], delay: bool) -> None:
    # Delayed, and eager on one node (the batch put once with its plan): each rank takes its
    # own rows into fresh buffers and holds no view of the store.
    batch = make_batch(512, seed=6, experts=True)
    assert batch.nbytes > 1_000_000
    ref = split_train_data_by_dp(batch, 4, balance_data=True, delay=delay)
    probes = gather(
        [
            w.allocation_of.remote(box(ref), r, 4, balance_data=True)
            for r, w in enumerate(workers[:4])
        ]
    )
    for probe in probes:
        assert probe["grown"] < batch.nbytes / 2
        assert 0.9 * probe["shard_nbytes"] <= probe["grown"] <= 1.2 * probe["shard_nbytes"] + 65536
        # The shard owns fresh buffers and no view of the store (so it pins nothing).
        assert probe["mutable"]
        assert all(probe["mutable"])
        assert probe["arrays_own_memory"] == [True, True, True]


@pytest.mark.parametrize("mode", ["delayed", "eager", "eager by node"])
def test_writes_stay_in_the_writing_actor(workers: list[Any], mode: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("arrow_split.torch")
    batch = make_batch(64, seed=7)
    nodes = ["a", "b"] if mode == "eager by node" else None
    refs_or_ref = split_train_data_by_dp(
        batch, 2, balance_data=False, delay=mode == "delayed", rank_nodes=nodes
    )
    written = gather(
        [workers[0].write_into_tensors.remote(box(refs_or_ref), 0, 2, balance_data=False)]
    )[0]
    assert set(written["tokens"]) == {-7}
    assert set(written["log_probs"]) == {99.0}
    # Delayed, and eager on one node: the tensors wrap the actor's own fresh shard (taken from
    # the batch). Eager by node: the shard maps its node's object read-only, so the tensors are
    # copies and the shard keeps its values.
    assert (set(written["shard_tokens"]) == {-7}) is (mode != "eager by node")
    # Another actor, and the driver, still read the original values from the same object.
    expected = expected_shards(batch, 2, False)[0]
    other = gather([workers[1].process.remote(box(refs_or_ref), 0, 2, balance_data=False)])[0]
    assert other.equals(expected)
    if isinstance(refs_or_ref, list):
        assert process_rollout_data(refs_or_ref, 0, 2).equals(expected)
    else:
        assert ray.get(refs_or_ref, timeout=CALL_TIMEOUT_S).equals(batch)


# --- lifetimes --------------------------------------------------------------------------------


def test_dropping_a_steps_refs_frees_the_store(workers: list[Any]) -> None:
    # `object_store_memory` in `ray.available_resources()` falls by what is put and comes back
    # once no reference to it is left, on the driver or in any actor (Ray frees asynchronously,
    # hence the polls). It does not count a view an actor still holds after the owner freed the
    # object: that the delayed shards hold no such view is checked by
    # `test_an_actor_pays_for_its_shard_not_the_batch` (every buffer of theirs is private).
    batch = make_batch(512, seed=8, experts=True)
    ranks = list(enumerate(workers[:4]))
    gather([w.drop.remote() for w in workers])
    gc.collect()
    capacity = float(ray.cluster_resources()["object_store_memory"])
    assert wait_until(lambda: store_bytes_free() == capacity), "earlier objects are still alive"
    for _ in range(3):
        ref = split_train_data_by_dp(batch, 4, balance_data=True, delay=True)
        refs = split_train_data_by_dp(batch, 4, balance_data=True)
        # The store reports both puts (the whole batch once, plus its shards).
        assert wait_until(lambda: capacity - store_bytes_free() >= 1.9 * batch.nbytes)
        # The actors keep their delayed shards alive: these must not keep the batch alive.
        gather([w.keep.remote(box(ref), r, 4, balance_data=True) for r, w in ranks])
        gather([w.process.remote(box(refs), r, 4, balance_data=True) for r, w in ranks])
        del ref, refs
        assert wait_until(lambda: store_bytes_free() == capacity), (
            f"the store still holds {capacity - store_bytes_free():.0f} bytes of the step"
        )
    assert sum(gather([w.drop.remote() for w in workers])) == 3 * len(ranks)


# --- bad input --------------------------------------------------------------------------------


def test_a_list_of_the_wrong_length_is_a_plan_error() -> None:
    refs = split_train_data_by_dp(make_batch(16, seed=9), 4, balance_data=False)
    with raises_facts(PlanError, key="refs", expected="4", got="3"):
        process_rollout_data(refs[:3], 0, 4, balance_data=False)


def test_refs_out_of_order_are_a_plan_mismatch() -> None:
    batch = make_batch(16, seed=9)
    refs = split_train_data_by_dp(batch, 4, balance_data=False, rank_nodes=["a", "b", "c", "c"])
    held = "the rows of ranks 2, 3 of a 4-rank strided plan"
    expected = "rank 1's rows of a 4-rank strided plan"
    with raises_facts(PlanMismatchError, key="refs[1]", expected=expected, got=held):
        process_rollout_data(refs[::-1], 1, 4, balance_data=False)
    held = "the rows of rank 0 of a 4-rank strided plan"
    with raises_facts(PlanMismatchError, key="refs[3]", got=held):
        process_rollout_data(refs[::-1], 3, 4, balance_data=False)
    expected = "rank 1's rows of a 4-rank balanced plan"
    with raises_facts(PlanMismatchError, key="refs[1]", expected=expected):
        process_rollout_data(refs, 1, 4, balance_data=True)


@pytest.mark.parametrize("delay", [False, True])
def test_ranks_asking_for_another_method_get_a_plan_mismatch(
    workers: list[Any], delay: bool
) -> None:
    batch = make_batch(16, seed=4)
    put = split_train_data_by_dp(batch, 2, balance_data=True, delay=delay)
    good = gather([workers[0].process.remote(box(put), 0, 2, balance_data=True)])[0]
    assert good.equals(shard_for_rank(batch, 0, 2, balance_data=True))
    kind, message = gather([workers[1].failure.remote(box(put), 1, 2, balance_data=False)])[0]
    assert kind == "PlanMismatchError"
    assert "strided" in message
    assert "balanced" in message
    followed = gather([workers[1].process.remote(box(put), 1, 2)])[0]  # no balance_data: follow
    assert followed.plan_fingerprint == good.plan_fingerprint
    assert followed.equals(shard_for_rank(batch, 1, 2, balance_data=True))


def test_a_delayed_rank_with_another_dp_size_must_ask_for_a_resplit(workers: list[Any]) -> None:
    batch = make_batch(12, seed=5)
    ref = split_train_data_by_dp(batch, 4, balance_data=False, delay=True)
    kind, message = gather([workers[0].failure.remote(box(ref), 0, 3, balance_data=False)])[0]
    assert kind == "PlanMismatchError"
    assert "`dp_size=3` but the batch was put for `dp_size=4`" in message
    shard = gather([workers[0].process.remote(box(ref), 0, 3, resplit=True)])[0]
    assert shard.partition.tolist() == [0, 3, 6, 9]


def test_an_eager_ref_passed_top_level_gives_its_ranks_rows(workers: list[Any]) -> None:
    batch = make_batch(16, seed=9)
    refs = split_train_data_by_dp(batch, 4, balance_data=False, rank_nodes=["a", "a", "b", "b"])
    # Ray resolves a top-level reference: the actor gets the node's object, which holds rank 1.
    shard = gather([workers[0].process_resolved.remote(refs[1], 1, 4, balance_data=False)])[0]
    assert shard.equals(expected_shards(batch, 4, False)[1])
    call = workers[0].process_resolved.remote(refs[1], 2, 4, balance_data=False)
    expected = "rank 2's rows of a 4-rank strided plan"
    with raises_facts(PlanMismatchError, expected=expected):  # node a's rows: ranks 0, 1
        ray.get(call, timeout=CALL_TIMEOUT_S)
    # One of the eager references where the delayed one is expected: a plan error.
    with raises_facts(PlanError, key="ref"):  # 8 rows put for ranks, not the whole batch
        process_rollout_data(refs[0], 0, 4, balance_data=False)


def test_a_one_node_eager_ref_passed_top_level_gives_each_ranks_rows(workers: list[Any]) -> None:
    # On one node every reference names the batch with its plan: resolved top-level, it is the
    # planned batch, and each rank takes its own rows of the driver's plan.
    batch = make_batch(16, seed=10)
    refs = split_train_data_by_dp(batch, 4, balance_data=True)
    expected = expected_shards(batch, 4, True)
    shards = gather([workers[0].process_resolved.remote(refs[r], r, 4) for r in range(4)])
    for rank, shard in enumerate(shards):
        assert shard.equals(expected[rank]), rank
    # The plan travels with it: another method is a mismatch, not another split.
    call = workers[0].process_resolved.remote(refs[0], 0, 4, balance_data=False)
    facts = {"key": "balance_data", "expected": "balanced", "got": "strided"}
    with raises_facts(PlanMismatchError, **facts):
        ray.get(call, timeout=CALL_TIMEOUT_S)
    held = "a whole batch put for a 4-rank balanced plan"
    with raises_facts(PlanMismatchError, key="refs[0]", got=held):
        process_rollout_data(refs, 0, 4, balance_data=False)


def test_an_eager_list_of_batches_without_a_plan_is_a_plan_error() -> None:
    # A list of what `ray.put(batch)` holds: whole batches that carry no plan to take from.
    batch = make_batch(8, seed=13)
    with raises_facts(PlanError, key="refs[1]"):  # a RolloutBatch without a plan
        process_rollout_data([batch, batch], 1, 2)
    # The same batches with the driver's plan: each rank takes its rows of it.
    planned = batch.with_plan(batch.make_plan(2, balance_data=True))
    for rank, expected in enumerate(expected_shards(batch, 2, True)):
        assert process_rollout_data([planned, planned], rank, 2).equals(expected)


def test_a_bad_rank_fails_before_any_get(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = split_train_data_by_dp(make_batch(16, seed=9), 4, balance_data=False, delay=True)

    def no_get(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.get was called")

    monkeypatch.setattr(ray, "get", no_get)
    with raises_facts(PlanError, key="dp_rank", expected="in [0, 4)", got="4"):
        process_rollout_data(ref, 4, 4, balance_data=False)
    with raises_facts(PlanError, key="dp_rank", expected="in [0, 4)", got="-1"):
        process_rollout_data([ref] * 4, -1, 4, balance_data=False)


def test_bad_splits_fail_before_any_put(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_put(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.put was called")

    monkeypatch.setattr(ray, "put", no_put)
    batch = make_batch(10, seed=9)
    for delay in (False, True):
        multiple = {"expected": "a multiple of 4 samples", "got": "10"}
        with raises_facts(PlanError, key="dp_size", **multiple):
            split_train_data_by_dp(batch, 4, balance_data=True, delay=delay)
        with raises_facts(PlanError, key="dp_size", got="0", mistake="plan_value"):
            split_train_data_by_dp(batch, 0, balance_data=False, delay=delay)
    with raises_facts(OptionError, key="rank_nodes", expected="2", got="3"):
        split_train_data_by_dp(batch, 2, balance_data=False, rank_nodes=["a", "b", "c"])
    with raises_facts(OptionTypeError, key="rank_nodes[1]"):
        split_train_data_by_dp(batch, 2, balance_data=False, rank_nodes=["a", 1])  # type: ignore[list-item]
    with raises_facts(OptionTypeError, key="rank_nodes"):
        split_train_data_by_dp(batch, 2, balance_data=False, rank_nodes="ab")


def test_a_failed_put_frees_what_was_put_and_names_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = make_batch(2048, seed=13, experts=True)  # objects large enough to count
    gc.collect()
    capacity = float(ray.cluster_resources()["object_store_memory"])
    assert wait_until(lambda: store_bytes_free() == capacity), "earlier objects are still alive"
    put = ray.put
    calls: list[int] = []

    def third_put_fails(value: object, **kwargs: Any) -> Any:
        calls.append(len(calls))
        if len(calls) == 3:
            raise ray.exceptions.ObjectStoreFullError("the store is full")
        return put(value, **kwargs)

    monkeypatch.setattr(ray, "put", third_put_fails)
    rank_nodes = ["a", "b", "c", "d", "a", "b", "c", "d"]
    with pytest.raises(
        TransportError,
        match=r"the put of group 3 of 4 \(node c\), ranks 2, 6, failed \(ObjectStoreFullError: "
        r".*the store is full.*\); the 2 objects already put were freed",
    ) as caught:
        split_train_data_by_dp(batch, 8, balance_data=True, rank_nodes=rank_nodes)
    assert isinstance(caught.value.__cause__, ray.exceptions.ObjectStoreFullError)
    assert calls == [0, 1, 2]
    monkeypatch.undo()
    # Ray reports the store's use with a lag: once an object put after the failure shows, the
    # two objects put before it (half the batch) would show too, had they not been freed,
    # though the error (and its traceback) is still alive.
    control = ray.put(np.zeros(4 * 2**20, dtype=np.uint8))
    assert wait_until(lambda: capacity - store_bytes_free() >= 4 * 2**20)
    assert wait_until(lambda: capacity - store_bytes_free() < 4 * 2**20 + batch.nbytes / 8), (
        f"the store still holds {capacity - store_bytes_free():.0f} bytes"
    )
    del control


def test_a_ref_to_something_else_names_the_rank_and_the_type() -> None:
    ref = ray.put({"tokens": [[1, 2]]})
    with raises_facts(NotARolloutBatchError, key="ref", got="dict"):
        process_rollout_data(ref, 2, 4, balance_data=False)
    with raises_facts(NotARolloutBatchError, key="refs[1]", got="dict"):
        process_rollout_data([ref, ref], 1, 2, balance_data=False)


def test_witness_ids_of_the_wrong_length_name_both_counts() -> None:
    ref = split_train_data_by_dp(make_batch(16, seed=9), 4, balance_data=False, delay=True)
    with raises_facts(RaggedLengthError, key="witness_ids", expected="16", got="4 values"):
        process_rollout_data(ref, 0, 4, balance_data=False, witness_ids=[1, 2, 3, 4])


def test_bad_doors_of_a_rank_fail_before_any_get(monkeypatch: pytest.MonkeyPatch) -> None:
    batch = make_batch(10, seed=9)
    ref = split_train_data_by_dp(batch, 2, balance_data=True, delay=True)
    refs = split_train_data_by_dp(batch, 2, balance_data=True, pad_to_dp=True)

    def no_get(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.get was called")

    monkeypatch.setattr(ray, "get", no_get)
    with raises_facts(OptionTypeError, key="on_fetch", got="int 5"):
        process_rollout_data(ref, 0, 2, on_fetch=5)  # type: ignore[arg-type]
    for bad in ("0123456789", [1.5] * 10, [[1]] * 10, 7, [0, True] * 5):
        with raises_facts(OptionTypeError, key="witness_ids"):
            process_rollout_data(ref, 0, 2, witness_ids=bad)  # type: ignore[arg-type]
    # an eager list was split on the driver: padding on the rank can never apply to it
    with raises_facts(OptionError, key="pad_to_dp", got="True"):
        process_rollout_data(refs, 0, 2, pad_to_dp=True)


def test_witness_ids_take_any_one_dimensional_ints() -> None:
    torch = pytest.importorskip("torch")
    batch = make_batch(10, seed=9)
    ref = split_train_data_by_dp(batch, 2, balance_data=True, delay=True)
    refs = split_train_data_by_dp(batch, 2, balance_data=True)
    with_ids = batch.add_train_data({"seq_witness_ids": np.arange(10)})
    expected = shard_for_rank(with_ids, 1, 2, balance_data=True)
    for witness_ids in (range(10), torch.arange(10), np.arange(10, dtype=np.uint8), [*range(10)]):
        for refs_or_ref in (ref, refs):
            shard = process_rollout_data(refs_or_ref, 1, 2, witness_ids=witness_ids)
            assert shard.equals(expected), type(witness_ids)
    with raises_facts(RaggedLengthError, key="witness_ids", expected="10", got="9 values"):
        process_rollout_data(ref, 1, 2, witness_ids=range(9))


def test_witness_ids_count_the_drivers_padding_not_the_ranks() -> None:
    batch = make_batch(10, seed=9)
    padded = split_train_data_by_dp(batch, 4, balance_data=True, delay=True, pad_to_dp=True)
    for refs_or_ref in (
        padded,
        split_train_data_by_dp(batch, 4, balance_data=True, pad_to_dp=True),
    ):
        with raises_facts(RaggedLengthError, key="witness_ids", expected="12"):
            process_rollout_data(refs_or_ref, 0, 4, witness_ids=range(10))
        process_rollout_data(refs_or_ref, 0, 4, witness_ids=range(12))
    # pad_to_dp on the rank changes nothing for a batch put for this dp_size (as planned)
    same = process_rollout_data(padded, 3, 4, pad_to_dp=True, resplit=True)
    assert same.equals(process_rollout_data(padded, 3, 4))
    # a re-split the rank pads: ids of the batch as put; its padding rows copy the last id
    ref = split_train_data_by_dp(batch, 5, balance_data=True, delay=True)
    shards = [
        process_rollout_data(ref, r, 4, resplit=True, pad_to_dp=True, witness_ids=range(10))
        for r in range(4)
    ]
    rows = [shard.to_train_data(layout="actor") for shard in shards]
    padding = [
        witness
        for row in rows
        for witness, pad in zip(row["seq_witness_ids"], row["is_padding"], strict=True)
        if pad
    ]
    assert padding == [9, 9]


@ray.remote(num_cpus=0)
def produce(batch: RolloutBatch, delay_s: float) -> RolloutBatch:
    """A batch with its plan, as a remote task's return value, ``delay_s`` after it starts."""
    time.sleep(delay_s)
    return batch.with_plan(batch.make_plan(2, balance_data=True))


def test_a_pending_object_is_waited_for_not_reported_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import arrow_split.ray._nodes as nodes

    # the waits of a rank, short: a task that takes 6 times the window is still not lost
    monkeypatch.setattr(nodes, "_GET_RECHECK_S", 0.2)
    monkeypatch.setattr(nodes, "_GONE_AFTER_S", 0.5)
    batch = make_batch(12, seed=11)
    for locality in ("auto", "holder"):
        started = time.monotonic()
        shard = process_rollout_data(produce.remote(batch, 3.0), 0, 2, locality=locality)
        assert time.monotonic() - started >= 3.0
        assert shard.equals(shard_for_rank(batch, 0, 2, balance_data=True))


def test_a_reference_this_session_cannot_read_is_a_transport_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arrow_split.ray import fetch, ref_to_bytes, ref_to_json

    stray = ray.ObjectRef.from_random()  # no owner: never put in this (or any) session
    for call in (
        lambda: process_rollout_data(stray, 0, 2),
        lambda: process_rollout_data(stray, 0, 2, locality="holder"),
        lambda: process_rollout_data([stray, stray], 1, 2),
        lambda: fetch(stray, "dp_rank 0", "the reference", None),
        lambda: ref_to_bytes(stray),
        lambda: ref_to_json(stray, step=1),
    ):
        with raises_facts(TransportError, key=stray.hex()):
            call()
    ref = split_train_data_by_dp(make_batch(4, seed=9), 2, balance_data=True, delay=True)
    # Ray not initialized here: refused, and no local Ray started to fail in
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: pytest.fail("Ray was started"))
    for call in (lambda: process_rollout_data(ref, 0, 2), lambda: ref_to_json(ref)):
        with raises_facts(TransportError, key=ref.hex()):
            call()


def test_the_owner_is_looked_up_in_this_process_else_asked_of_ray(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arrow_split.ray import _wire, fetch

    assert _wire._owner_lookup() is not None  # the supported Rays: no call to the owner
    stray = ray.ObjectRef.from_random()
    batch = make_batch(4, seed=12)
    ref = ray.put(batch)
    monkeypatch.setattr(_wire, "_owner_lookup", lambda: None)  # a Ray without the lookup
    asked: list[Any] = []
    locations = ray.experimental.get_object_locations

    def counted(refs: list[Any], timeout_ms: int) -> Any:
        asked.append(refs)
        return locations(refs, timeout_ms=timeout_ms)

    monkeypatch.setattr(ray.experimental, "get_object_locations", counted)
    with raises_facts(TransportError, key=stray.hex()):
        fetch(stray, "dp_rank 0", "the reference", None)
    assert fetch(ref, "dp_rank 0", "the reference", None).equals(batch)
    assert asked == [[stray], [ref]]


def test_an_object_lost_with_its_owner_is_a_transport_error(workers: list[Any]) -> None:
    owner = Owner.remote()  # type: ignore[attr-defined]
    refs = ray.get(owner.put.remote(make_batch(16, seed=10)), timeout=CALL_TIMEOUT_S)
    ray.kill(owner)
    # Ray frees a dead owner's objects asynchronously (about a second here): until then a rank
    # may still read the shard; after that every rank gets a TransportError, never a hang.
    outcome = ("", "")
    deadline = time.monotonic() + 30
    while outcome == ("", "") and time.monotonic() < deadline:
        outcome = gather([workers[0].failure.remote(box(refs), 0, 1, balance_data=False)])[0]
        time.sleep(0.2)
    kind, message = outcome
    assert kind == "TransportError"
    assert "dp_rank 0: the object store lost `refs[0]` (object " in message
    assert f"{refs[0].hex()}, OwnerDiedError)" in message
    assert "the driver should own the batch" in message
    with raises_facts(TransportError, key=refs[0].hex()):  # the delayed reference is lost
        process_rollout_data(refs[0], 0, 1, balance_data=False)


def test_the_leaf_fails_fast_without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    for name in [name for name in sys.modules if name.startswith("arrow_split.ray")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(
        ImportError, match=r"needs Ray; install it with `pip install arrow-split\[ray\]`"
    ):
        importlib.import_module("arrow_split.ray")


def test_the_leaf_is_exported_and_the_core_does_not_import_it() -> None:
    import arrow_split.ray as leaf

    assert leaf.__all__ == sorted(leaf.__all__)
    assert {"process_rollout_data", "split_train_data_by_dp"} <= set(leaf.__all__)
    assert "ray" not in arrow_split.__all__
