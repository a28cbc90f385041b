"""A list per token (``per_token_list``: ``rollout_sampling_masks``) and finiteness where it counts.

The column against a plain-Python reference (lists of lists, list indexing): round trip, take,
split, builder, dump; miles' sampling-mask keys through ``compat.miles``; NaN and infinity refused
only where the loss mask is 1, in ``from_train_data``, the builder and a dump read back.
"""

from __future__ import annotations

import dataclasses
import math
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    ColumnSpec,
    ColumnTypeError,
    DumpError,
    RaggedLengthError,
    RolloutBatch,
    RolloutBatchBuilder,
    SchemaError,
    TokenLists,
    ValueRangeError,
    split_train_data_by_dp_raw,
    take_rows,
)
from arrow_split.compat import miles
from arrow_split.testing import RolloutConfig, assert_batches_equal, make_train_data
from tests.error_facts import assert_facts, raises_facts
from tests.reference_split import reference_split

_MASKS = "rollout_sampling_masks"


@st.composite
def _masked_train_data(draw: st.DrawFn) -> dict[str, Any]:
    """Samples with a response, its loss mask and 1+ ids per response token (lists of lists)."""
    count = draw(st.integers(0, 8))
    data: dict[str, Any] = {key: [] for key in ("tokens", "response_lengths", "loss_masks", _MASKS)}
    for _ in range(count):
        response = draw(st.integers(0, 5))
        prompt = draw(st.integers(1, 3))
        data["tokens"].append(list(range(prompt + response)))
        data["response_lengths"].append(response)
        data["loss_masks"].append(
            draw(st.lists(st.sampled_from([0, 1]), min_size=response, max_size=response))
        )
        token_ids = st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=4)
        data[_MASKS].append(draw(st.lists(token_ids, min_size=response, max_size=response)))
    return data


def _as_csr(token_lists: list[list[int]]) -> TokenLists:
    offsets = [0]
    for ids in token_lists:
        offsets.append(offsets[-1] + len(ids))
    return TokenLists([value for ids in token_lists for value in ids], offsets)


@given(_masked_train_data(), st.data())
@example({"tokens": [], "response_lengths": [], "loss_masks": [], _MASKS: []}, None)
def test_round_trip_take_and_split_equal_the_reference(
    data: dict[str, Any], picks: st.DataObject | None
) -> None:
    batch = RolloutBatch.from_train_data(data)
    assert batch.column(_MASKS).type == pa.large_list(pa.large_list(pa.int32()))
    assert batch.to_train_data() == data
    csr = {**data, _MASKS: [_as_csr(sample) for sample in data[_MASKS]]}
    assert_batches_equal(RolloutBatch.from_train_data(csr), batch)
    n = len(data["tokens"])
    rows = picks.draw(st.lists(st.integers(0, n - 1))) if picks is not None and n else []
    taken = take_rows(batch, np.asarray(rows, dtype=np.int64))
    assert taken.to_train_data(layout="rollout")[_MASKS] == [data[_MASKS][row] for row in rows]
    for dp_size in (1, 3):
        shards = split_train_data_by_dp_raw(batch, dp_size, balance_data=False)
        expected = reference_split(data, dp_size, balance_data=False)
        assert [s.to_train_data(layout="rollout")[_MASKS] for s in shards] == [
            e[_MASKS] for e in expected
        ]


def test_every_form_of_a_sample_gives_the_same_column() -> None:
    lists = [[[3, 4], [5]], [[6, 7, 8]]]
    base = {"tokens": [[1, 2, 3], [1, 2]], "response_lengths": [2, 1]}
    expected = RolloutBatch.from_train_data({**base, _MASKS: lists})
    forms = [
        [TokenLists(np.array([3, 4, 5], np.int32), np.array([0, 2, 3])), np.array([[6, 7, 8]])],
        [(np.array([3, 4]), [5]), TokenLists([6, 7, 8], [0, 3])],
    ]
    for form in forms:
        assert_batches_equal(RolloutBatch.from_train_data({**base, _MASKS: form}), expected)


def test_the_builder_equals_from_train_data_and_shifts_sample_numbers() -> None:
    config = RolloutConfig(samples=12, response_mean=8.0, response_cap=16, seed=3, sampling_top_k=4)
    data = make_train_data(config)
    builder = RolloutBatchBuilder()
    for start in range(0, 12, 5):
        builder.extend(
            {
                key: value[start : start + 5]
                if key != "dynamic_global_batch_size" and key != "step_adapter_names"
                else value
                for key, value in data.items()
            }
        )
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))
    builder.append({"tokens": [1, 2], "response_lengths": 1, _MASKS: [[7]]})
    with pytest.raises(ValueRangeError) as caught:
        builder.append({"tokens": [1, 2], "response_lengths": 1, _MASKS: TokenLists([], [0, 0])})
    assert_facts(caught.value, {"key": "rollout_sampling_masks", "sample": 1, "position": 0})


def test_a_dump_round_trips_and_a_crafted_empty_token_list_is_refused(tmp_path: Path) -> None:
    config = RolloutConfig(samples=6, response_mean=8.0, response_cap=16, seed=4, sampling_top_k=3)
    batch = RolloutBatch.from_train_data(make_train_data(config))
    batch.write(tmp_path / "step.arrow")
    assert_batches_equal(RolloutBatch.read(tmp_path / "step.arrow"), batch)
    lenient = dataclasses.replace(batch.specs[_MASKS], nonempty=False)
    data = {"tokens": [[1, 2]], "response_lengths": [1], _MASKS: [[[]]]}
    crafted = RolloutBatch.from_train_data(data, specs=[lenient])
    strict = RolloutBatch(crafted.record_batch, {**crafted.specs, _MASKS: batch.specs[_MASKS]}, {})
    strict.write(tmp_path / "crafted.arrow")
    with pytest.raises(DumpError) as caught:
        RolloutBatch.read(tmp_path / "crafted.arrow")
    assert caught.value.key == "rollout_sampling_masks"
    assert_facts(
        caught.value.__cause__, {"key": "rollout_sampling_masks", "sample": 0, "position": 0}
    )


def test_another_nested_key_is_declared_with_a_column_spec() -> None:
    spec = ColumnSpec("top_log_probs", "per_token_list", pa.float32(), length="response")
    data = {"tokens": [[1, 2, 3]], "response_lengths": [2], "top_log_probs": [[[-0.5, -1.0], []]]}
    batch = RolloutBatch.from_train_data(data, specs=[spec])
    assert batch.to_train_data()["top_log_probs"] == [[[-0.5, -1.0], []]]
    with pytest.raises(RaggedLengthError) as caught:
        RolloutBatch.from_train_data({**data, "top_log_probs": [[[0.0]]]}, specs=[spec])
    assert_facts(caught.value, {"key": "top_log_probs", "sample": 0})


# --- compat.miles: miles' two flat keys in and out -------------------------------------------

_ARGS = Namespace(balance_data=False, multi_lora=False)


def _miles_data() -> dict[str, Any]:
    return {
        "tokens": [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11]],
        "response_lengths": [4, 1, 2],
        "loss_masks": [[1, 1, 1, 1], [1], [0, 1]],
        "rollout_sampling_mask_ids": [[0, 7, 1, 8, 2, 9, 3, 10], [5], [4, 6, 2]],
        "rollout_sampling_mask_offsets": [[0, 2, 4, 6, 8], [0, 1], [0, 1, 3]],
    }


def test_compat_takes_and_gives_miles_two_keys() -> None:
    data = _miles_data()
    shards = miles.split_train_data_by_dp_raw(_ARGS, data, dp_size=2)
    assert data == _miles_data()  # not mutated
    for shard in shards:
        assert _MASKS not in shard
        for key in ("rollout_sampling_mask_ids", "rollout_sampling_mask_offsets"):
            assert shard[key] == [data[key][row] for row in shard["partition"]]
            assert all(type(value) is int for sample in shard[key] for value in sample)


@pytest.mark.parametrize(
    ("change", "error", "facts"),
    [
        (
            {"rollout_sampling_mask_offsets": [[0, 2, 4, 6, 8], [0, 1], [0, 3, 3]]},
            ValueRangeError,
            {"key": "rollout_sampling_masks", "sample": 2, "position": 1},
        ),
        (
            {"rollout_sampling_mask_offsets": [[0, 2, 4, 6, 8], [0, 1], [1, 2, 3]]},
            ValueRangeError,
            {"key": "rollout_sampling_masks", "sample": 2, "got": "1"},
        ),
        (
            {"rollout_sampling_mask_offsets": [[0, 2, 4, 6, 7], [0, 1], [0, 1, 3]]},
            RaggedLengthError,
            {"key": "rollout_sampling_masks", "sample": 0, "expected": "8", "got": "7"},
        ),
        (
            {"rollout_sampling_mask_offsets": [[0, 2, 4, 8], [0, 1], [0, 1, 3]]},
            RaggedLengthError,
            {"key": "rollout_sampling_masks", "sample": 0},
        ),
        (
            {"rollout_sampling_mask_offsets": None},
            SchemaError,
            {"key": "rollout_sampling_mask_offsets"},
        ),
    ],
)
def test_compat_refuses_masks_that_break_miles_rules(
    change: dict[str, Any], error: type[Exception], facts: dict[str, Any]
) -> None:
    data = {**_miles_data(), **change}
    data = {key: value for key, value in data.items() if value is not None}
    with raises_facts(error, **facts):
        miles.split_train_data_by_dp_raw(_ARGS, data, dp_size=2)


# --- finiteness where the loss counts -----------------------------------------------------------


def _with_log_probs(log_probs: list[list[float]], masks: list[list[int]]) -> dict[str, Any]:
    return {
        "tokens": [[1, 2, 3], [4, 5]],
        "response_lengths": [2, 1],
        "loss_masks": masks,
        "rollout_log_probs": log_probs,
    }


def test_nan_on_a_masked_token_is_kept_and_refused_where_the_loss_counts(tmp_path: Path) -> None:
    data = _with_log_probs([[-0.5, math.nan], [-math.inf]], [[1, 0], [0]])
    batch = RolloutBatch.from_train_data(data)
    assert batch.specs["rollout_log_probs"].finite
    batch.write(tmp_path / "masked.arrow")
    assert_batches_equal(RolloutBatch.read(tmp_path / "masked.arrow"), batch)
    builder = RolloutBatchBuilder()
    builder.extend(data)
    assert_batches_equal(builder.finish(), batch)
    counted = _with_log_probs([[-0.5, math.nan], [-1.0]], [[1, 1], [0]])
    with raises_facts(ValueRangeError, key="rollout_log_probs", sample=0, position=1, got="nan"):
        RolloutBatch.from_train_data(counted)
    builder.extend(data)
    with raises_facts(ValueRangeError, key="rollout_log_probs", sample=2, position=1, got="nan"):
        builder.extend(counted)


def test_allow_nonfinite_keeps_every_nan_and_its_dump_reads_back(tmp_path: Path) -> None:
    counted = _with_log_probs([[-0.5, math.nan], [-1.0]], [[1, 1], [0]])
    batch = RolloutBatch.from_train_data(counted, allow_nonfinite=True)
    assert not batch.specs["rollout_log_probs"].finite
    batch.write(tmp_path / "allowed.arrow")
    assert_batches_equal(RolloutBatch.read(tmp_path / "allowed.arrow"), batch)
    specs = {**batch.specs, "rollout_log_probs": KNOWN_LOG_PROBS}
    RolloutBatch(batch.record_batch, specs, {}).write(tmp_path / "crafted.arrow")
    with raises_facts(DumpError, key="rollout_log_probs") as caught:
        RolloutBatch.read(tmp_path / "crafted.arrow")
    cause = caught.value.__cause__  # the rule's own error holds the location
    assert_facts(cause, {"key": "rollout_log_probs", "sample": 0, "position": 1, "got": "nan"})


KNOWN_LOG_PROBS = ColumnSpec("rollout_log_probs", "per_token", pa.float32(), length="response")


def test_nulls_and_bools_are_refused_even_where_the_mask_is_0() -> None:
    with pytest.raises(ColumnTypeError) as caught:
        RolloutBatch.from_train_data(_with_log_probs([[-0.5, None], [-1.0]], [[1, 0], [0]]))  # type: ignore[list-item]
    assert_facts(caught.value, {"key": "rollout_log_probs", "sample": 0, "position": 1})
    with pytest.raises(ColumnTypeError) as caught:
        RolloutBatch.from_train_data(_with_log_probs([[-0.5, True], [-1.0]], [[1, 0], [0]]))
    assert_facts(caught.value, {"key": "rollout_log_probs", "sample": 0, "position": 1})
