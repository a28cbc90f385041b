"""Values that are values: read-only batch globals and arrays, typed errors at the small edges."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import OptionTypeError, PlanTypeError, RolloutBatch, SchemaError, pad_to_dp, take
from arrow_split._args import as_offsets
from tests.error_facts import assert_facts, raises_facts


def _data() -> dict[str, Any]:
    return {
        "tokens": [[1, 2], [3], [4, 5, 6], [7]],
        "response_lengths": [1, 1, 2, 1],
        "loss_masks": [[1], [1], [1, 0], [1]],
        "truncated": [True, False, True, False],
        "prompt_group_sizes": [2, 2],
        "step_adapter_batch_sizes": {0: 4},
        "raw_reward": [0.5, 1.0, 0.0, 1.0],
    }


def test_batch_globals_cannot_be_mutated_through_a_shard() -> None:
    batch = RolloutBatch.from_train_data(_data())
    plan = batch.make_plan(2, balance_data=False)
    shard, other = take(batch, plan, 0), take(batch, plan, 1)
    with pytest.raises(AttributeError):
        shard.batch_globals["prompt_group_sizes"].append(5)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        shard.batch_globals["step_adapter_batch_sizes"][1] = 3  # type: ignore[index]
    with pytest.raises(ValueError, match="read-only"):
        shard.batch_globals["raw_reward"][0] = 9.0  # type: ignore[index]
    for holder in (batch, shard.rows, other.rows):
        assert holder.batch_globals["prompt_group_sizes"] == (2, 2)
        assert holder.to_train_data()["prompt_group_sizes"] == [2, 2]
        assert holder.to_train_data()["step_adapter_batch_sizes"] == {0: 4}


def test_to_train_data_lists_are_fresh_and_miles_types() -> None:
    batch = RolloutBatch.from_train_data(_data())
    first = batch.to_train_data()
    first["prompt_group_sizes"].append(5)
    first["step_adapter_batch_sizes"][1] = 3
    again = batch.to_train_data()
    assert again["prompt_group_sizes"] == [2, 2]
    assert again["step_adapter_batch_sizes"] == {0: 4}


def test_a_callers_list_is_not_shared_with_the_batch() -> None:
    data = _data()
    batch = RolloutBatch.from_train_data(data)
    again = RolloutBatch(batch.record_batch, batch.specs, {**batch.batch_globals})
    data["prompt_group_sizes"].append(5)
    assert again.to_train_data()["prompt_group_sizes"] == [2, 2]
    assert again.equals(batch)


def test_numeric_columns_are_read_only() -> None:
    batch = RolloutBatch.from_train_data(_data())
    for column in batch.numeric_columns():
        for array in (column.values, column.offsets, column.token_offsets):
            if array is not None:
                assert not array.flags.writeable, column.spec.name
                with pytest.raises(ValueError, match="read-only"):
                    array[...] = 0


def test_role_values_of_the_length_source_is_typed() -> None:
    batch = RolloutBatch.from_train_data(_data())
    shard = take(batch, batch.make_plan(2, balance_data=False), 0)
    with raises_facts(SchemaError, key="tokens"):
        shard.role_values("length_source")
    padded = pad_to_dp(batch, 3)
    flags = padded.role_values("padding")
    assert flags is not None
    assert not flags.flags.writeable


@pytest.mark.parametrize("dp_size", [np.array(2), np.array(2, dtype=np.uint8), np.int32(2)])
def test_zero_d_integer_arrays_are_dp_sizes(dp_size: object) -> None:
    batch = RolloutBatch.from_train_data(_data())
    plan = batch.make_plan(dp_size, balance_data=False)  # type: ignore[arg-type]
    assert plan.dp_size == 2
    assert len(pad_to_dp(batch, dp_size)) == 4  # type: ignore[arg-type]
    assert take(batch, plan, np.array(1)).dp_rank == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("dp_size", [np.array(True), np.array(2.0), np.array([2])])
def test_zero_d_bool_and_float_arrays_are_refused(dp_size: object) -> None:
    batch = RolloutBatch.from_train_data(_data())
    with pytest.raises(PlanTypeError) as caught:
        batch.make_plan(dp_size, balance_data=False)  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "dp_size"})


def test_zero_d_torch_tensors_are_dp_sizes() -> None:
    torch = pytest.importorskip("torch")
    batch = RolloutBatch.from_train_data(_data())
    assert batch.make_plan(torch.tensor(2), balance_data=False).dp_size == 2
    with pytest.raises(PlanTypeError):
        batch.make_plan(torch.tensor(True), balance_data=False)


def _object_array(items: list[Any]) -> np.ndarray:
    array = np.empty(len(items), dtype=object)
    for index, item in enumerate(items):
        array[index] = item
    return array


@given(st.lists(st.lists(st.integers(0, 1000), min_size=1, max_size=6), max_size=8))
def test_a_column_given_as_one_numpy_array_equals_the_lists(rows: list[list[int]]) -> None:
    expected = RolloutBatch.from_train_data({"tokens": rows}).to_train_data()
    arrays = [np.asarray(row, dtype=np.int64) for row in rows]
    for column in (_object_array(rows), _object_array(arrays)):
        assert RolloutBatch.from_train_data({"tokens": column}).to_train_data() == expected
    if rows and len({len(row) for row in rows}) == 1:
        two_d = np.asarray(rows, dtype=np.int64)
        assert RolloutBatch.from_train_data({"tokens": two_d}).to_train_data() == expected


def test_an_empty_two_d_array_is_an_empty_column() -> None:
    batch = RolloutBatch.from_train_data({"tokens": np.zeros((0, 3), dtype=np.int64)})
    assert batch.to_train_data()["tokens"] == []


def test_bools_among_offsets_are_refused() -> None:
    with raises_facts(OptionTypeError, key="micro_batch_offsets"):
        as_offsets("micro_batch_offsets", [0, True, 2])
