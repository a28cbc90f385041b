"""arrow_split.testing: seeded generators that the library accepts, and assertions that name the
first difference."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings

import arrow_split
from arrow_split import (
    KNOWN_COLUMNS,
    OptionError,
    OptionTypeError,
    PlanKey,
    RolloutBatch,
    Shard,
    shard_for_rank,
    split_train_data_by_dp_raw,
)
from arrow_split.testing import (
    WORKLOADS,
    RolloutConfig,
    assert_batches_equal,
    assert_shards_equal,
    iter_sample_groups,
    make_lengths,
    make_train_data,
)
from arrow_split.testing.strategies import rollout_batches
from tests.error_facts import assert_facts, raises_facts

SMALL = RolloutConfig(samples=24, response_mean=40.0, response_cap=64, moe_shape=(2, 3), seed=7)


def _batch(config: RolloutConfig = SMALL, step: int = 0) -> RolloutBatch:
    return RolloutBatch.from_train_data(make_train_data(config, step))


def test_every_kind_of_column_is_generated() -> None:
    batch = _batch()
    kinds = {spec.kind for spec in batch.specs.values()}
    assert kinds == {
        "per_token",
        "per_sample_tensor",
        "per_sample_scalar",
        "per_sample_object",
        "batch_global",
    }
    for key in ("teacher_log_probs", "rollout_ids", "prompt", "metadata", "weight_versions"):
        assert key in batch.column_names
    assert set(batch.batch_globals) == {
        "raw_reward",
        "dynamic_global_batch_size",
        "step_adapter_names",
    }
    assert batch.column("rollout_routed_experts").to_pylist()[0] is not None
    experts = make_train_data(SMALL)["rollout_routed_experts"]
    tokens = make_train_data(SMALL)["tokens"]
    assert [e.shape for e in experts] == [(len(t) - 1, 2, 3) for t in tokens]


def test_the_shape_follows_the_config() -> None:
    data = make_train_data(SMALL)
    responses = np.asarray(data["response_lengths"])
    totals = np.asarray([len(tokens) for tokens in data["tokens"]])
    assert len(responses) == SMALL.samples
    assert responses.min() >= 1
    assert responses.max() <= SMALL.response_cap
    assert (totals - responses).min() >= 64
    assert (totals - responses).max() <= 512
    assert data["truncated"] == (responses == SMALL.response_cap).tolist()
    assert [len(masks) for masks in data["loss_masks"]] == responses.tolist()


@pytest.mark.parametrize("step", [0, 2])
def test_lengths_alone_are_the_batch_lengths(step: int) -> None:
    lengths = make_lengths(SMALL, step)
    assert lengths.dtype == np.int64
    assert lengths.tolist() == [len(tokens) for tokens in make_train_data(SMALL, step)["tokens"]]


def test_numeric_columns_leave_out_objects_and_extras() -> None:
    data = make_train_data(WORKLOADS["tiny"])
    assert list(data) == [
        "tokens",
        "response_lengths",
        "loss_masks",
        "rollout_log_probs",
        "rewards",
        "truncated",
        "sample_indices",
        "raw_reward",
    ]


def test_generators_are_deterministic_per_seed_and_step() -> None:
    assert_batches_equal(_batch(), _batch())
    assert_batches_equal(_batch(step=3), _batch(step=3))
    other_seed = dataclasses.replace(SMALL, seed=8)
    assert not _batch(other_seed).equals(_batch())
    assert not _batch(step=1).equals(_batch())


def test_numpy_and_lists_give_the_same_batch() -> None:
    lists = make_train_data(SMALL)
    arrays = make_train_data(dataclasses.replace(SMALL, as_numpy=True))
    assert isinstance(arrays["tokens"][0], np.ndarray)
    assert isinstance(lists["tokens"][0], list)
    assert isinstance(arrays["rewards"], np.ndarray)
    assert_batches_equal(RolloutBatch.from_train_data(lists), RolloutBatch.from_train_data(arrays))


def test_as_numpy_can_name_columns() -> None:
    data = make_train_data(dataclasses.replace(SMALL, as_numpy=frozenset({"tokens"})))
    assert isinstance(data["tokens"][0], np.ndarray)
    assert isinstance(data["loss_masks"][0], list)
    assert isinstance(data["rewards"], list)


def test_the_named_workloads_keep_their_shapes() -> None:
    shapes = {
        name: (config.samples, config.response_mean, config.response_cap, config.seed)
        for name, config in WORKLOADS.items()
    }
    assert shapes == {
        "tiny": (32, 96.0, 192, 0),
        "small": (256, 2048.0, 4096, 0),
        "medium": (4096, 5000.0, 8192, 0),
        "large": (16384, 5000.0, 8192, 0),
    }
    # the lengths the benchmarks have always drawn (medium: 17,615,969 tokens, 796 at the cap)
    tiny = make_train_data(WORKLOADS["tiny"])
    assert sum(len(tokens) for tokens in tiny["tokens"]) == 12_390
    assert tiny["response_lengths"][:4] == [192, 34, 29, 143]


@pytest.mark.parametrize("group_size", [1, 5, 8, 24, 100])
def test_groups_concatenate_to_the_whole_batch(group_size: int) -> None:
    whole = make_train_data(SMALL)
    groups = list(iter_sample_groups(SMALL, group_size))
    assert len(groups) == -(-SMALL.samples // group_size)
    for group in groups:
        RolloutBatch.from_train_data(group)  # each group is valid on its own
    joined: dict[str, Any] = {}
    for key in whole:
        per_sample = KNOWN_COLUMNS[key].kind != "batch_global" or key == "raw_reward"
        joined[key] = [v for g in groups for v in g[key]] if per_sample else groups[0][key]
    assert_batches_equal(RolloutBatch.from_train_data(joined), RolloutBatch.from_train_data(whole))


def test_groups_of_an_empty_batch() -> None:
    assert list(iter_sample_groups(dataclasses.replace(SMALL, samples=0))) == []
    empty = make_train_data(dataclasses.replace(SMALL, samples=0))
    assert len(RolloutBatch.from_train_data(empty)) == 0


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"samples": -1}, OptionError),
        ({"response_mean": 0.0}, OptionError),
        ({"response_mean": "8"}, OptionTypeError),
        ({"response_mean": 8 + 0j}, OptionTypeError),
        ({"response_mean": 10**400}, OptionError),  # no float holds it
        ({"response_mean": True}, OptionTypeError),
        ({"samples": "8"}, OptionTypeError),
        ({"seed": 1.5}, OptionTypeError),
        ({"prompt_tokens": [1, 2]}, OptionTypeError),  # a list, not a tuple
        ({"as_numpy": "False"}, OptionTypeError),
        ({"prompt_tokens": (5, 2)}, OptionError),  # low above high
        ({"moe_shape": (0, 2)}, OptionError),
        ({"columns": "all"}, OptionError),
    ],
)
def test_invalid_configs(changes: dict[str, Any], error: type[Exception]) -> None:
    (key,) = changes
    with raises_facts(error, key=key) as caught:
        dataclasses.replace(SMALL, **changes)
    assert type(caught.value) is error


def test_a_0d_response_mean_is_a_number() -> None:
    config = dataclasses.replace(SMALL, response_mean=np.array(40.0))
    assert make_lengths(config).tolist() == make_lengths(SMALL).tolist()


def test_invalid_step_and_group_size() -> None:
    with pytest.raises(arrow_split.ArrowSplitError) as caught:
        make_train_data(SMALL, -1)
    assert_facts(caught.value, {"key": "step"})
    with pytest.raises(arrow_split.ArrowSplitError) as caught:
        next(iter_sample_groups(SMALL, 0))
    assert_facts(caught.value, {"key": "group_size"})


# --- the assertions ---------------------------------------------------------------------------


def _with_column(batch: RolloutBatch | Shard, name: str, column: pa.Array) -> RolloutBatch | Shard:
    index = batch.record_batch.schema.get_field_index(name)
    record_batch = batch.record_batch.set_column(index, name, column)
    rows = RolloutBatch(record_batch, batch.specs, batch.batch_globals)
    return batch.with_rows(rows) if isinstance(batch, Shard) else rows


def test_equal_batches_and_shards_pass() -> None:
    batch = _batch()
    assert_batches_equal(batch, batch)
    left = shard_for_rank(batch, 1, 4, balance_data=True)
    right = split_train_data_by_dp_raw(_batch(), 4, balance_data=True)[1]
    assert_shards_equal(left, right)


def test_one_value_difference_names_column_and_row() -> None:
    batch = _batch()
    rewards = batch.column("rewards").to_numpy().copy()
    rewards[5] += 0.5
    changed = _with_column(batch, "rewards", pa.array(rewards))
    with pytest.raises(AssertionError, match=r"column `rewards`, row 5: values differ"):
        assert_batches_equal(batch, changed)


def test_one_token_difference_names_its_row() -> None:
    data = make_train_data(SMALL)
    changed = {**data, "tokens": [list(tokens) for tokens in data["tokens"]]}
    changed["tokens"][17][3] += 1
    with pytest.raises(AssertionError, match=r"column `tokens`, row 17: values differ"):
        assert_batches_equal(
            RolloutBatch.from_train_data(data), RolloutBatch.from_train_data(changed)
        )


def test_missing_column_type_and_rows_are_named() -> None:
    data = make_train_data(SMALL)
    batch = RolloutBatch.from_train_data(data)
    fewer = RolloutBatch.from_train_data({k: v for k, v in data.items() if k != "prompt"})
    with pytest.raises(AssertionError, match=r"column names differ"):
        assert_batches_equal(batch, fewer)
    shorter = dataclasses.replace(SMALL, samples=23)
    with pytest.raises(AssertionError, match=r"numbers of rows differ"):
        assert_batches_equal(batch, _batch(shorter))
    wider = _with_column(batch, "rollout_ids", batch.column("rollout_ids").cast(pa.int32()))
    with pytest.raises(AssertionError, match=r"types of column `rollout_ids` differ"):
        assert_batches_equal(batch, wider)


def test_batch_globals_and_specs_are_compared() -> None:
    data = make_train_data(SMALL)
    batch = RolloutBatch.from_train_data(data)
    raw = np.asarray(data["raw_reward"], dtype=np.float64)
    raw[0] += 1.0
    other = RolloutBatch.from_train_data({**data, "raw_reward": raw})
    with pytest.raises(AssertionError, match=r"batch globals\[`raw_reward`\] differ"):
        assert_batches_equal(batch, other)
    size = RolloutBatch.from_train_data({**data, "dynamic_global_batch_size": 1})
    with pytest.raises(AssertionError, match=r"batch globals\[`dynamic_global_batch_size`\]"):
        assert_batches_equal(batch, size)
    spec = dataclasses.replace(KNOWN_COLUMNS["prompt"], codec="pickle")
    pickled = RolloutBatch.from_train_data(data, specs=[spec])
    with pytest.raises(AssertionError, match=r"prompt"):
        assert_batches_equal(batch, pickled)


def test_shards_differ_in_partition() -> None:
    batch = _batch()
    left = shard_for_rank(batch, 0, 4, balance_data=False)
    whole = len(left.batch_total_lengths)
    right = Shard(  # rows moved one sample on, their lengths with them: a consistent shard
        left.rows,
        partition=(left.partition + 1) % whole,
        batch_total_lengths=np.roll(left.batch_total_lengths, 1),
        plan_key=left.plan_key,
        dp_rank=left.dp_rank,
    )
    with pytest.raises(AssertionError, match=r"`partition` differ"):
        assert_shards_equal(left, right)
    assert_batches_equal(left, right)  # as batches they are equal


def test_shards_of_different_plans_differ() -> None:
    shard = shard_for_rank(_batch(), 0, 4, balance_data=False)
    other = Shard(
        shard.rows,
        partition=shard.partition,
        batch_total_lengths=shard.batch_total_lengths,
        plan_key=PlanKey("strided", 4, "0" * 16),
        dp_rank=shard.dp_rank,
    )
    assert_shards_equal(shard, shard_for_rank(_batch(), 0, 4, balance_data=False))
    with pytest.raises(AssertionError, match=r"`plan_fingerprint` differ"):
        assert_shards_equal(shard, other)


@settings(max_examples=25)
@given(rollout_batches(max_samples=8))
def test_rollout_batches_strategy(batch: RolloutBatch) -> None:
    assert_batches_equal(batch, RolloutBatch.from_train_data(batch.to_train_data()))
