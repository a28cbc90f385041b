"""Padding to the DP size (miles #2694): fewest rows, their values, the splits, statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    OptionTypeError,
    Plan,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
    pad_to_dp,
    shard_for_rank,
    split_train_data_by_dp_raw,
)
from arrow_split.testing.strategies import train_data
from tests.error_facts import assert_facts
from tests.reference_pad import reference_pad_to_dp
from tests.reference_split import normalize, reference_split


def small_batch(num_samples: int) -> dict[str, Any]:
    return {
        "tokens": [list(range(3 + i)) for i in range(num_samples)],
        "response_lengths": [2] * num_samples,
        "loss_masks": [[1, 1]] * num_samples,
        "rewards": [float(i) for i in range(num_samples)],
        "sample_indices": list(range(num_samples)),
        "rollout_ids": list(range(num_samples)),
        "rollout_mask_sums": [2] * num_samples,
        "raw_reward": [float(i) for i in range(num_samples)],
    }


@given(train_data(max_samples=12), st.integers(1, 8))
@example({"tokens": []}, 4)
def test_padding_matches_the_reference(data: dict[str, Any], dp_size: int) -> None:
    batch = RolloutBatch.from_train_data(data)
    padded = pad_to_dp(batch, dp_size)
    num_samples = len(data["tokens"])
    assert padded.num_samples % dp_size == 0
    assert padded.num_samples - num_samples == -num_samples % dp_size < dp_size
    expected = reference_pad_to_dp(data, dp_size)
    actual = padded.to_train_data()
    assert actual.keys() == expected.keys()
    for key, values in expected.items():
        assert normalize(actual[key]) == normalize(values), key
    assert batch.num_samples == num_samples  # the input batch is unchanged
    assert RolloutBatch.from_train_data(actual).equals(padded)  # the padded dict is valid input


def test_padding_rows_follow_miles_2694() -> None:
    # miles' own test: 5 samples, dp 4 -> indices [0..4, -1, -1, -1], zero loss on the pads
    padded = pad_to_dp(RolloutBatch.from_train_data(small_batch(5)), 4).to_train_data()
    assert padded["sample_indices"] == [0, 1, 2, 3, 4, -1, -1, -1]
    assert padded["rollout_ids"][5:] == [-1, -1, -1]
    assert padded["loss_masks"][5:] == [[0, 0]] * 3
    assert padded["loss_masks"][4] == [1, 1]
    assert padded["rollout_mask_sums"][5:] == [0, 0, 0]
    assert padded["tokens"][5:] == [padded["tokens"][4]] * 3  # copies of the last sample
    assert padded["is_padding"] == [False] * 5 + [True] * 3
    assert padded["raw_reward"] == [0.0, 1.0, 2.0, 3.0, 4.0]  # statistics: real samples only


def test_a_batch_that_divides_gains_only_the_flag_and_padding_twice_is_a_no_op() -> None:
    batch = RolloutBatch.from_train_data(small_batch(4))
    padded = pad_to_dp(batch, 2)
    assert padded.num_samples == 4
    assert padded.to_train_data()["is_padding"] == [False] * 4
    assert pad_to_dp(padded, 2) is padded
    again = pad_to_dp(pad_to_dp(RolloutBatch.from_train_data(small_batch(5)), 2), 4)
    assert again.to_train_data()["is_padding"] == [False] * 5 + [True] * 3


@given(train_data(max_samples=14), st.integers(1, 6), st.booleans())
def test_padded_splits_match_the_reference_and_stay_balanced(
    data: dict[str, Any], dp_size: int, balance_data: bool
) -> None:
    if not data["tokens"]:
        balance_data = False  # an empty batch stays empty: nothing to copy
    shards = split_train_data_by_dp_raw(data, dp_size, balance_data=balance_data, pad_to_dp=True)
    padded = reference_pad_to_dp(data, dp_size)
    expected = reference_split(padded, dp_size, balance_data)
    for rank, (shard, reference) in enumerate(zip(shards, expected, strict=True)):
        actual = shard.to_train_data(layout="rollout")
        for key, values in reference.items():
            assert normalize(actual[key]) == values, key
        alone = shard_for_rank(data, rank, dp_size, balance_data=balance_data, pad_to_dp=True)
        assert alone.equals(shard)
    sizes = {shard.num_samples for shard in shards}
    assert len(sizes) == 1  # every rank the same number of rows
    if balance_data:
        lengths = np.asarray([len(tokens) for tokens in padded["tokens"]])
        loads = [int(lengths[shard.partition].sum()) for shard in shards]
        assert max(loads) - min(loads) <= lengths.max()


def test_balanced_load_of_a_padded_batch() -> None:
    lengths = [30, 1, 1, 1, 1, 1, 1]  # 7 samples: dp 2 cannot split it balanced unpadded
    data = {"tokens": [list(range(n)) for n in lengths]}
    shards = split_train_data_by_dp_raw(data, 2, balance_data=True, pad_to_dp=True)
    loads = sorted(int(shard.total_lengths.sum()) for shard in shards)
    padded_lengths = [*lengths, 1]
    plan = Plan.balanced(padded_lengths, 2)
    assert loads == sorted(int(np.take(padded_lengths, rows).sum()) for rows in plan.partitions)
    assert [shard.num_samples for shard in shards] == [4, 4]
    assert loads == [4, 33]  # the long sample and three short ones, four short ones


def test_pad_to_dp_needs_a_bool_and_a_whole_batch() -> None:
    data = small_batch(3)
    with pytest.raises(OptionTypeError) as caught:
        split_train_data_by_dp_raw(data, 2, balance_data=True, pad_to_dp=1)  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "pad_to_dp"})
    shard = split_train_data_by_dp_raw(data, 1, balance_data=False)[0]
    with pytest.raises(SchemaTypeError) as caught:
        pad_to_dp(shard, 2)
    assert_facts(caught.value, {"key": "batch"})  # the argument (it was the function's name)


def test_raw_reward_of_a_padded_batch_counts_real_samples() -> None:
    padded = pad_to_dp(RolloutBatch.from_train_data(small_batch(3)), 2).to_train_data()
    padded["raw_reward"] = [0.0, 1.0, 2.0, 3.0]  # one per row, padding included
    with pytest.raises(SchemaError) as caught:
        RolloutBatch.from_train_data(padded)
    assert_facts(caught.value, {"key": "raw_reward"})


def test_a_padded_batch_dumps_and_reads_back(tmp_path: Any) -> None:
    padded = pad_to_dp(RolloutBatch.from_train_data(small_batch(3)), 4)
    padded.write(tmp_path / "padded.arrow")
    assert RolloutBatch.read(tmp_path / "padded.arrow").equals(padded)  # validated on read


def test_the_summary_leaves_padding_rows_out() -> None:
    from arrow_split.summary import summarize

    data = small_batch(3)
    data["rewards"] = [1.0, 2.0, 3.0]
    padded = pad_to_dp(RolloutBatch.from_train_data(data), 4)  # 3 -> 4 rows, reward 3.0 copied
    text = summarize(padded, dp_sizes=(4,))
    assert "tokens: 12 in all; per sample mean 4.0, min 3, max 5 (1 padding rows left out)" in text
    assert "rewards: mean 2, std 0.8165 (population)" in text
