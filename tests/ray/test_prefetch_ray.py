"""The Ray leaf's prefetcher gives each step the shard process_rollout_data gives, ahead of time."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import ray

from arrow_split import NotARolloutBatchError, RolloutBatch, Shard, shard_for_rank
from arrow_split.ray import RolloutPrefetcher, split_train_data_by_dp
from tests.error_facts import raises_facts

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
    from arrow_split import PlanError, PlanMismatchError
    from arrow_split.block import RankBlock
    from arrow_split.ray import fill_rank_block

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
    delayed = split_train_data_by_dp(batch, 3, balance_data=True, delay=True)
    with raises_facts(PlanError, key="refs", got="ObjectRef"):  # not the eager list
        fill_rank_block(delayed, 0, 3, block)  # type: ignore[arg-type]
