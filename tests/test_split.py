"""The split: exact cover, aligned columns, the classic layout, one rank alone."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    OptionError,
    OptionTypeError,
    Plan,
    PlanError,
    PlanKey,
    RolloutBatch,
    SchemaTypeError,
    pad_to_dp,
    partition_for_rank,
    plan_fingerprint,
    shard_for_rank,
    split,
    split_train_data_by_dp_raw,
    take,
    take_rows,
)
from arrow_split.testing.strategies import train_data
from tests.error_facts import assert_facts, raises_facts
from tests.reference_split import normalize, reference_split


@st.composite
def split_cases(draw: st.DrawFn) -> tuple[dict[str, Any], int, bool]:
    data = draw(train_data())
    num_samples = len(data["tokens"])
    balance_data = draw(st.booleans()) and num_samples > 0
    if balance_data:
        divisors = [d for d in range(1, num_samples + 1) if num_samples % d == 0]
        dp_size = draw(st.sampled_from(divisors))
    else:
        dp_size = draw(st.integers(1, num_samples + 3))
    return data, dp_size, balance_data


def _plain(record_batch: pa.RecordBatch) -> pa.RecordBatch:
    """Objects stored once (dictionaries: each shard has its own) as one value per row."""
    columns = [
        column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
        for column in record_batch.columns
    ]
    return pa.RecordBatch.from_arrays(columns, names=record_batch.schema.names)


def _concat(shards: list[RolloutBatch]) -> pa.Table:
    return pa.Table.from_batches([_plain(shard.record_batch) for shard in shards])


@given(split_cases())
@example(({"tokens": []}, 3, False))
@example(({"tokens": [[1]] * 4}, 4, True))
def test_every_row_lands_in_exactly_one_shard(case: tuple[dict[str, Any], int, bool]) -> None:
    data, dp_size, balance_data = case
    shards = split_train_data_by_dp_raw(data, dp_size, balance_data=balance_data)
    assert len(shards) == dp_size
    rows = np.concatenate([shard.partition for shard in shards]).astype(np.int64)
    counts = np.bincount(rows, minlength=len(data["tokens"]))
    assert counts.tolist() == [1] * len(data["tokens"])


@given(split_cases())
def test_shards_put_back_together_give_the_original_bit_for_bit(
    case: tuple[dict[str, Any], int, bool],
) -> None:
    data, dp_size, balance_data = case
    batch = RolloutBatch.from_train_data(data)
    shards = split_train_data_by_dp_raw(batch, dp_size, balance_data=balance_data)
    rows = np.concatenate([shard.partition for shard in shards])
    table = _concat(shards).take(pa.array(np.argsort(rows), type=pa.int64()))
    assert table.equals(pa.Table.from_batches([_plain(batch.record_batch)]))


@given(split_cases())
def test_split_matches_the_plain_python_reference(case: tuple[dict[str, Any], int, bool]) -> None:
    data, dp_size, balance_data = case
    shards = split_train_data_by_dp_raw(data, dp_size, balance_data=balance_data)
    expected = reference_split(data, dp_size, balance_data)
    for shard, reference in zip(shards, expected, strict=True):
        actual = shard.to_train_data(layout="rollout")
        assert actual.keys() == reference.keys()
        for key, values in reference.items():
            assert normalize(actual[key]) == values, key


@given(split_cases())
def test_layouts(case: tuple[dict[str, Any], int, bool]) -> None:
    data, dp_size, balance_data = case
    shards = split_train_data_by_dp_raw(data, dp_size, balance_data=balance_data)
    num_samples = len(data["tokens"])
    sizes = [shard.num_samples for shard in shards]
    if balance_data:
        assert sizes == [num_samples // dp_size] * dp_size
    else:
        for rank, shard in enumerate(shards):
            assert shard.partition.tolist() == list(range(rank, num_samples, dp_size))
        assert max(sizes) - min(sizes) <= 1


@given(split_cases(), st.data())
def test_one_rank_alone_equals_that_rank_of_the_full_split(
    case: tuple[dict[str, Any], int, bool], draw: st.DataObject
) -> None:
    data, dp_size, balance_data = case
    batch = RolloutBatch.from_train_data(data)
    rank = draw.draw(st.integers(0, dp_size - 1))
    alone = shard_for_rank(batch, rank, dp_size, balance_data=balance_data)
    assert alone.equals(split_train_data_by_dp_raw(batch, dp_size, balance_data=balance_data)[rank])
    from_dict = shard_for_rank(data, rank, dp_size, balance_data=balance_data)
    assert from_dict.equals(alone)


def _check_the_classic_planner(
    data: dict[str, Any], rank: int, dp_size: int, balance_data: bool, pad: bool
) -> None:
    """One rank's shard holds the rows and fingerprint the classic wrappers give its batch."""
    shard = shard_for_rank(data, rank, dp_size, balance_data=balance_data, pad_to_dp=pad)
    batch = RolloutBatch.from_train_data(data)
    whole = pad_to_dp(batch, dp_size) if pad else batch
    lengths, order_by = whole.total_lengths, whole.role_values("adapter_slot")
    assert (order_by is not None) == ("adapter_slots" in data)
    rows = partition_for_rank(lengths, rank, dp_size, balance_data=balance_data, order_by=order_by)
    fingerprint = plan_fingerprint(lengths, dp_size, balance_data=balance_data, order_by=order_by)
    method = "balanced" if balance_data else "strided"
    assert shard.partition.tolist() == rows.tolist()
    assert shard.plan_key == PlanKey(method, dp_size, fingerprint)
    assert shard.dp_rank == rank
    assert shard.rows.equals(take_rows(whole, rows).rows)
    assert np.array_equal(shard.batch_total_lengths, lengths)


@given(split_cases(), st.data(), st.booleans(), st.booleans())
def test_one_rank_alone_holds_the_classic_planners_rows_and_fingerprint(
    case: tuple[dict[str, Any], int, bool], draw: st.DataObject, slotted: bool, pad: bool
) -> None:
    data, dp_size, balance_data = case
    if slotted:
        count = len(data["tokens"])
        slots = draw.draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
        data = {**data, "adapter_slots": slots}
    rank = draw.draw(st.integers(0, dp_size - 1))
    _check_the_classic_planner(data, rank, dp_size, balance_data, pad)


@pytest.mark.parametrize("balance_data", [False, True])
@pytest.mark.parametrize("rank", [0, 1, 2])
def test_one_padded_rank_with_adapter_slots_holds_the_classic_planners_rows(
    balance_data: bool, rank: int
) -> None:
    data = {
        "tokens": [[1] * n for n in (5, 1, 4, 2, 7, 3, 6)],
        "adapter_slots": [2, 0, 1, 0, 2, 1, 0],
    }
    _check_the_classic_planner(data, rank, 3, balance_data, pad=True)


@given(split_cases())
def test_actor_layout_reorders_total_lengths(case: tuple[dict[str, Any], int, bool]) -> None:
    data, dp_size, balance_data = case
    for shard in split_train_data_by_dp_raw(data, dp_size, balance_data=balance_data):
        actor = shard.to_train_data(layout="actor")
        assert "partition" not in actor
        assert actor["total_lengths"] == [len(data["tokens"][row]) for row in shard.partition]
        assert actor["global_total_lengths"] == [len(tokens) for tokens in data["tokens"]]


def test_a_shard_is_compact_and_ships_only_its_own_bytes() -> None:
    rng = np.random.default_rng(1)
    data = {"tokens": [rng.integers(0, 50_000, 2_000) for _ in range(64)]}
    batch = RolloutBatch.from_train_data(data)
    shard = shard_for_rank(batch, 3, 8, balance_data=False)
    buffers: list[pickle.PickleBuffer] = []
    pickle.dumps(shard, protocol=5, buffer_callback=buffers.append)
    shipped = sum(memoryview(buffer).nbytes for buffer in buffers)
    assert shipped <= shard.nbytes + 1024
    assert shipped < batch.nbytes / 4
    tokens = shard.record_batch.column("tokens")
    assert tokens.offset == 0
    assert tokens.offsets[0].as_py() == 0


def test_a_shard_of_a_shard_maps_back_to_the_whole_batch() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[i] * (i + 1) for i in range(12)]})
    shard = shard_for_rank(batch, 1, 2, balance_data=False)  # rows 1, 3, ..., 11
    inner = take_rows(shard, np.array([2, 5]))  # its rows 2, 5
    assert inner.partition.tolist() == [5, 11]
    assert (inner.plan_key, inner.dp_rank) == (shard.plan_key, 1)
    assert inner.to_train_data(layout="rollout")["tokens"] == [[5] * 6, [11] * 12]
    assert inner.batch_total_lengths is shard.batch_total_lengths  # shared, not copied
    assert inner.batch_total_lengths.tolist() == list(range(1, 13))


def test_a_shard_is_not_a_batch_its_rows_are() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[i] * (i + 1) for i in range(12)]})
    shard = shard_for_rank(batch, 1, 2, balance_data=False)
    with raises_facts(SchemaTypeError, key="data_or_batch"):
        shard_for_rank(shard, 0, 3, balance_data=False)  # type: ignore[arg-type]
    again = shard_for_rank(shard.rows, 2, 3, balance_data=False)  # rows of the shard's rows
    assert again.partition.tolist() == [2, 5]
    assert again.batch_total_lengths.tolist() == shard.total_lengths.tolist()


def test_the_shards_of_a_split_share_the_batch_lengths() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[i] * (i + 1) for i in range(12)]})
    shards = split(batch, batch.make_plan(3, balance_data=True))
    assert all(shard.batch_total_lengths is batch.total_lengths for shard in shards)
    assert not batch.total_lengths.flags.writeable
    assert [
        take(batch, batch.make_plan(3, balance_data=True), r).equals(s)
        for r, s in enumerate(shards)
    ] == [True] * 3


def test_rank_indices_for_strided_plans_need_no_full_plan() -> None:
    lengths = np.arange(10)
    assert partition_for_rank(lengths, 2, 4, balance_data=False).tolist() == [2, 6]


@given(train_data(tensors=True), st.data())
def test_the_run_copying_take_equals_arrows_take(data: dict[str, Any], draw: st.DataObject) -> None:
    batch = RolloutBatch.from_train_data(data)
    rows = draw.draw(st.lists(st.integers(0, max(batch.num_samples - 1, 0)), max_size=30))
    indices = np.asarray(rows if batch.num_samples else [], dtype=np.int64)
    taken = take_rows(batch, indices).record_batch
    arrows = batch.record_batch.take(pa.array(indices, type=pa.int64()))
    assert _plain(taken).equals(_plain(arrows))
    for column in taken.columns:
        if pa.types.is_dictionary(column.type):  # only the values its rows use, once each
            assert len(column.dictionary) == len(column.indices.drop_null().unique())
        for buffer in column.buffers():
            assert buffer is None or buffer.is_mutable  # fresh, private buffers


def test_take_rows_rejects_rows_outside_the_batch() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2], [3]]})
    # the classes of every door's rows (they were PlanErrors): a value, then a type mistake
    with pytest.raises(OptionError) as caught:
        take_rows(batch, np.array([0, -1]))
    assert_facts(caught.value, {"key": "indices", "got": "-1", "mistake": "option_value"})
    with pytest.raises(OptionTypeError) as caught:
        take_rows(batch, np.array([[0]]))
    assert_facts(caught.value, {"key": "indices", "mistake": "option_type"})


def test_a_plan_of_another_sample_count_names_the_plan() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]]})
    plan = Plan.build([1, 1, 1], 1, balance_data=False)
    for call in (lambda: take(batch, plan, 0), lambda: split(batch, plan)):
        with raises_facts(PlanError, key="plan"):  # it had no key
            call()
