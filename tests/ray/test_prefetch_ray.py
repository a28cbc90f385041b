"""The Ray leaf's prefetcher gives each step the shard process_rollout_data gives, ahead of time."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
import ray

from arrow_split import (
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    RolloutBatch,
    Shard,
    TransportError,
    shard_for_rank,
)
from arrow_split.block import RankBlock
from arrow_split.ray import (
    RolloutPrefetcher,
    fill_rank_block,
    process_rollout_data,
    split_train_data_by_dp,
)
from tests.error_facts import assert_facts, raises_facts

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]


def step_data(step: int) -> dict[str, Any]:
    rng = np.random.default_rng(step)
    lengths = rng.integers(1, 30, 12)
    return {"tokens": [rng.integers(0, 100, n).tolist() for n in lengths]}


def test_each_step_gets_its_shard_and_a_replan_takes_them_again() -> None:
    batches = [RolloutBatch.from_train_data(step_data(step)) for step in range(3)]
    refs = [split_train_data_by_dp(b, 2, balance_data=True, delay=True) for b in batches]
    with RolloutPrefetcher(1, 2, convert=lambda shard: shard, lookahead=2) as prefetcher:
        for step, ref in enumerate(refs):
            prefetcher.submit(step, ref)
        first = prefetcher.get(0)
        assert isinstance(first, Shard)
        assert first.equals(shard_for_rank(batches[0], 1, 2, balance_data=True))
        prefetcher.replan(2, 3)  # a rank joined: the steps not taken are split for 3
        assert (prefetcher.dp_rank, prefetcher.dp_size) == (2, 3)
        for step in (1, 2):
            expected = shard_for_rank(batches[step], 2, 3, balance_data=True, resplit=True)
            assert prefetcher.get(step).equals(expected)


def test_a_bad_object_raises_at_its_step() -> None:
    good = split_train_data_by_dp(step_data(0), 2, balance_data=True, delay=True)
    with RolloutPrefetcher(0, 2, convert=len) as prefetcher:
        prefetcher.submit(0, ray.put({"not": "a batch"}))
        prefetcher.submit(1, good)
        with raises_facts(NotARolloutBatchError, key="ref", got="dict"):
            prefetcher.get(0)
        assert prefetcher.get(1) == len(shard_for_rank(step_data(0), 0, 2, balance_data=True))


def test_fill_rank_block_holds_the_ranks_rows_in_one_copy() -> None:
    from arrow_split import PlanMismatchError

    batch = RolloutBatch.from_train_data(step_data(5))
    refs = split_train_data_by_dp(batch, 3, balance_data=True)
    block = RankBlock()
    for rank in range(3):
        filled = fill_rank_block(refs, rank, 3, block, balance_data=True)
        expected = shard_for_rank(batch, rank, 3, balance_data=True).numeric_columns()[0]
        np.testing.assert_array_equal(filled.columns["tokens"].values, expected.values)
        np.testing.assert_array_equal(filled.columns["tokens"].offsets, expected.offsets)
    assert block.allocations == 1
    with raises_facts(
        PlanMismatchError, key="refs[0]", expected="rank 0's rows of a 3-rank strided plan"
    ):
        fill_rank_block(refs, 0, 3, block, balance_data=False)
    with raises_facts(PlanError, key="refs", expected="2", got="3"):
        fill_rank_block(refs, 0, 2, block)


def test_fill_rank_block_of_a_delayed_put_gathers_here_in_one_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arrow_split import PlanMismatchError
    from arrow_split.ray import _block

    batch = RolloutBatch.from_train_data(step_data(7))
    delayed = split_train_data_by_dp(batch, 3, balance_data=True, delay=True)
    block = RankBlock()

    def tokens_of(filled: Any) -> tuple[list[int], list[int]]:
        column = filled.columns["tokens"]
        return column.values.tolist(), column.offsets.tolist()

    def expected(rank: int, dp_size: int) -> tuple[list[int], list[int]]:
        shard = shard_for_rank(batch, rank, dp_size, balance_data=True, resplit=True)
        column = shard.numeric_columns()[0]
        return column.values.tolist(), column.offsets.tolist()

    with monkeypatch.context() as patched:  # the batch as put for 3 ranks: no take, no shard
        patched.setattr(_block, "process_rollout_data", lambda *a, **k: pytest.fail("a take"))
        for rank in range(3):
            assert tokens_of(fill_rank_block(delayed, rank, 3, block)) == expected(rank, 3)
            filled = fill_rank_block(ray.get(delayed), rank, 3, block, balance_data=True)
            assert tokens_of(filled) == expected(rank, 3)  # what Ray hands a task: the batch
    for rank in range(2):  # a rank of another dp_size: planned again, taken, then copied
        filled = fill_rank_block(delayed, rank, 2, block, resplit=True)
        assert tokens_of(filled) == expected(rank, 2)
    assert block.allocations == 1
    with raises_facts(PlanMismatchError, key="dp_size"):
        fill_rank_block(delayed, 0, 2, block)
    with raises_facts(PlanMismatchError, key="balance_data"):
        fill_rank_block(delayed, 0, 3, block, balance_data=False)
    with raises_facts(NotARolloutBatchError, key="ref", got="dict"):
        fill_rank_block(ray.put({"not": "a batch"}), 0, 3, block)
    grouped = split_train_data_by_dp(batch, 2, balance_data=True, rank_nodes=["a", "b"])
    with raises_facts(PlanError, key="ref"):  # one node group's rows: the eager list is due
        process_rollout_data(grouped[0], 0, 2)
    with raises_facts(PlanError, key="ref"):  # the same mistake, the same error
        fill_rank_block(grouped[0], 0, 2, block)


def test_fill_rank_block_of_node_groups_fetches_once_and_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from arrow_split import PlanMismatchError
    from arrow_split.ray import _nodes

    batch = RolloutBatch.from_train_data(step_data(9))
    nodes = ["a", "b", "a", "b"]
    grouped = split_train_data_by_dp(batch, 4, balance_data=True, rank_nodes=nodes)
    fetched: list[str] = []
    fetch = _nodes.fetch
    monkeypatch.setattr(
        _nodes, "fetch", lambda ref, *rest: (fetched.append(ref.hex()), fetch(ref, *rest))[1]
    )
    block = RankBlock()
    for rank in range(4):
        fetched.clear()
        filled = fill_rank_block(grouped, rank, 4, block, balance_data=True)
        assert fetched == [grouped[rank].hex()]  # its group's object, once
        expected = shard_for_rank(batch, rank, 4, balance_data=True).numeric_columns()[0]
        np.testing.assert_array_equal(filled.columns["tokens"].values, expected.values)
        np.testing.assert_array_equal(filled.columns["tokens"].offsets, expected.offsets)
    misplaced = [grouped[0]] * 4  # rank 1 given the object of ranks 0 and 2
    for refs, balance in ((grouped, False), (misplaced, True)):
        with pytest.raises(PlanMismatchError) as door:
            process_rollout_data(refs, 1, 4, balance_data=balance)
        with pytest.raises(PlanMismatchError) as filled_door:
            fill_rank_block(refs, 1, 4, block, balance_data=balance)
        assert filled_door.value.facts == door.value.facts  # the same mistake, the same error
        assert door.value.facts["key"] == "refs[1]"
    with raises_facts(NotARolloutBatchError, key="refs[0]", got="dict"):
        fill_rank_block([ray.put({"not": "a batch"})], 0, 1, block)


@ray.remote(num_cpus=0)
class Owner:
    """An actor that puts a step itself, and so owns its objects: killing it loses them."""

    def put(self, batch: RolloutBatch) -> list[Any]:
        return split_train_data_by_dp(batch, 1, balance_data=False)


def test_fill_rank_block_of_an_object_lost_with_its_owner_is_a_transport_error() -> None:
    owner = Owner.remote()  # type: ignore[attr-defined]
    refs = ray.get(owner.put.remote(RolloutBatch.from_train_data(step_data(6))), timeout=60)
    ray.kill(owner)
    # Ray frees a dead owner's objects asynchronously: until then the block is still filled
    deadline = time.monotonic() + 30
    while True:
        try:
            fill_rank_block(refs, 0, 1, RankBlock())
        except Exception as error:  # any class: which one is the point of the test
            lost = error
            break
        assert time.monotonic() < deadline, "the object outlived its owner"
        time.sleep(0.2)
    assert isinstance(lost, TransportError), repr(lost)
    assert_facts(lost, {"key": refs[0].hex()})
    with raises_facts(TransportError, key=refs[0].hex()):  # as process_rollout_data says
        process_rollout_data(refs, 0, 1)


def test_bad_options_are_refused_when_the_prefetcher_is_made() -> None:
    names = "one of 'balance_data', 'resplit', 'witness_ids', 'locality', 'on_fetch', 'pad_to_dp'"
    with raises_facts(OptionError, key="balanec_data", expected=names, mistake="option_value"):
        RolloutPrefetcher(0, 2, balanec_data=True)
    with raises_facts(OptionError, key="step", expected=names, mistake="option_value"):
        RolloutPrefetcher(0, 2, step=3)  # the prefetcher passes each step itself
    with raises_facts(OptionTypeError, key="on_fetch", mistake="option_type"):
        RolloutPrefetcher(0, 2, on_fetch=5)
    with raises_facts(OptionTypeError, key="convert"):
        RolloutPrefetcher(0, 2, convert=5)  # type: ignore[arg-type]


def test_a_failed_replan_changes_nothing() -> None:
    prefetcher: RolloutPrefetcher[Shard] = RolloutPrefetcher(1, 2, balance_data=True)
    before = (1, 2, {"balance_data": True})
    with raises_facts(PlanError, key="dp_rank", mistake="plan_value"):
        prefetcher.replan(3, 3)
    assert (prefetcher.dp_rank, prefetcher.dp_size, prefetcher._options) == before
    prefetcher.stop()
    with raises_facts(OptionError, expected="a running prefetcher", got="stopped"):
        prefetcher.replan(2, 3)
    assert (prefetcher.dp_rank, prefetcher.dp_size, prefetcher._options) == before
