"""RolloutBatch: train data in, the same train data out; the Arrow layout it promises."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given

import arrow_split
from arrow_split import ColumnSpec, RolloutBatch, Shard
from arrow_split.testing.strategies import train_data
from tests.reference_split import normalize


def _same_train_data(left: dict, right: dict) -> bool:
    return left.keys() == right.keys() and all(
        normalize(left[key]) == normalize(right[key]) for key in left
    )


@given(train_data())
@example({"tokens": []})
@example({"tokens": [[7]], "response_lengths": [0], "loss_masks": [[]]})
def test_round_trip_gives_back_the_input(data: dict) -> None:
    before = copy.deepcopy(data)
    batch = RolloutBatch.from_train_data(data)
    assert _same_train_data(batch.to_train_data(), data)
    assert _same_train_data(data, before)  # never mutated
    assert not isinstance(batch, Shard)
    assert batch.num_samples == len(data["tokens"])


@given(train_data())
def test_total_lengths_are_derived_from_tokens(data: dict) -> None:
    batch = RolloutBatch.from_train_data(data)
    assert batch.total_lengths.dtype == np.int64
    assert batch.total_lengths.tolist() == [len(tokens) for tokens in data["tokens"]]
    assert np.array_equal(batch.batch_total_lengths, batch.total_lengths)


@given(train_data(max_samples=8))
def test_pickle_round_trip_is_exact(data: dict) -> None:
    batch = RolloutBatch.from_train_data(data)
    assert pickle.loads(pickle.dumps(batch, protocol=5)).equals(batch)


def test_every_list_column_has_64_bit_offsets() -> None:
    batch = RolloutBatch.from_train_data(
        {
            "tokens": [[1, 2, 3]],
            "response_lengths": [2],
            "loss_masks": [[1, 1]],
            "rollout_log_probs": [[-1.0, -2.0]],
            "rollout_routed_experts": [np.zeros((2, 4, 2), dtype=np.int32)],
            "weight_versions": [["a"]],
            "prompt": ["p"],
        }
    )
    schema = batch.record_batch.schema
    assert schema.field("tokens").type == pa.large_list(pa.int32())
    assert schema.field("loss_masks").type == pa.large_list(pa.uint8())
    assert schema.field("rollout_log_probs").type == pa.large_list(pa.float32())
    experts = pa.large_list(pa.list_(pa.list_(pa.uint8(), 2), 4))  # narrow storage: ids < 256
    assert schema.field("rollout_routed_experts").type == experts
    assert schema.field("weight_versions").type == pa.large_list(pa.large_string())
    assert schema.field("prompt").type == pa.large_string()


def test_numpy_and_python_input_build_the_same_batch() -> None:
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 1000, size) for size in (5, 1, 9)]
    log_probs = [rng.standard_normal(size).astype(np.float32) for size in (2, 1, 4)]
    from_numpy = RolloutBatch.from_train_data(
        {"tokens": tokens, "response_lengths": np.array([2, 1, 4]), "rollout_log_probs": log_probs}
    )
    from_lists = RolloutBatch.from_train_data(
        {
            "tokens": [t.tolist() for t in tokens],
            "response_lengths": [2, 1, 4],
            "rollout_log_probs": [p.tolist() for p in log_probs],
        }
    )
    assert from_numpy.equals(from_lists)


def test_float64_values_that_are_float32_round_trip_bit_exactly() -> None:
    values = np.float32([-0.1, 1e-30, -3.4e38]).astype(np.float64).tolist()
    batch = RolloutBatch.from_train_data(
        {"tokens": [[1, 2, 3]], "response_lengths": [3], "rollout_log_probs": [values]}
    )
    assert batch.to_train_data()["rollout_log_probs"] == [values]


def test_floats_are_rounded_to_nearest_float32_by_default() -> None:
    batch = RolloutBatch.from_train_data(
        {"tokens": [[1]], "response_lengths": [1], "rollout_log_probs": [[-0.1]]}
    )
    assert batch.to_train_data()["rollout_log_probs"] == [[float(np.float32(-0.1))]]


def test_allow_nonfinite_keeps_nan_and_inf() -> None:
    batch = RolloutBatch.from_train_data(
        {"tokens": [[1, 2]], "rewards": [float("nan")], "raw_reward": [float("inf")]},
        allow_nonfinite=True,
    )
    train_data = batch.to_train_data()
    assert np.isnan(train_data["rewards"][0])
    assert train_data["raw_reward"] == [float("inf")]


def test_declared_columns_are_stored_with_their_spec() -> None:
    specs = [
        ColumnSpec("advantages", "per_token", pa.float32(), length="response"),
        ColumnSpec("score", "per_sample_scalar", pa.float64()),
        ColumnSpec("notes", "per_sample_object"),
        ColumnSpec("step_id", "batch_global", global_shape="int"),
    ]
    data = {
        "tokens": [[1, 2, 3], [4]],
        "response_lengths": [2, 1],
        "advantages": [[0.5, 0.25], [1.0]],
        "score": [1, 2.5],
        "notes": [("a", 1), None],
        "step_id": 7,
    }
    batch = RolloutBatch.from_train_data(data, specs=specs)
    assert batch.specs["advantages"].kind == "per_token"
    assert _same_train_data(batch.to_train_data(), data)
    assert batch.to_train_data()["notes"] == [("a", 1), None]  # pickled objects keep tuples


def test_prompt_that_is_not_a_string_falls_back_to_pickle() -> None:
    chat = [{"role": "user", "content": "hi"}]
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]], "prompt": ["plain", chat]})
    assert batch.specs["prompt"].codec == "pickle"
    assert batch.to_train_data()["prompt"] == ["plain", chat]


def test_multimodal_samples_may_have_more_routed_expert_rows() -> None:
    data = {
        "tokens": [[1, 2, 3], [4, 5]],
        "rollout_routed_experts": [np.zeros((5, 1, 2), np.int32), np.zeros((1, 1, 2), np.int32)],
        "multimodal_train_inputs": [{"pixel_values": np.ones((2, 2), np.float32)}, None],
    }
    batch = RolloutBatch.from_train_data(data)
    out = batch.to_train_data()
    assert np.array_equal(out["multimodal_train_inputs"][0]["pixel_values"], np.ones((2, 2)))
    assert out["rollout_routed_experts"][0].shape == (5, 1, 2)


def test_matching_total_lengths_input_is_accepted_and_derived() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]], "total_lengths": [2, 1]})
    assert "total_lengths" not in batch.to_train_data()
    assert batch.total_lengths.tolist() == [2, 1]


def test_add_train_data_appends_a_validated_scalar_column() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    extended = batch.add_train_data({"seq_witness_ids": [10, 11]})
    assert extended.to_train_data()["seq_witness_ids"] == [10, 11]
    assert extended.column("tokens") is not None
    assert "seq_witness_ids" not in batch.column_names


def test_the_batch_does_not_share_memory_with_the_callers_arrays() -> None:
    rewards = np.array([1.0, 2.0])
    tokens = [np.array([1, 2], dtype=np.int32), np.array([3], dtype=np.int32)]
    batch = RolloutBatch.from_train_data({"tokens": tokens, "rewards": rewards})
    rewards[0] = 99.0
    tokens[0][0] = 99
    assert batch.to_train_data()["rewards"] == [1.0, 2.0]
    assert batch.to_train_data()["tokens"] == [[1, 2], [3]]


def test_partition_and_lengths_are_read_only() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3], [4, 5, 6]]})
    shard = arrow_split.shard_for_rank(batch, 0, 2, balance_data=False)
    assert shard.partition is not None
    with pytest.raises(ValueError, match="read-only"):
        shard.partition[0] = 5


def test_repr_names_the_kind_and_columns() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2]], "raw_reward": [1.0]})
    assert repr(batch).startswith("RolloutBatch: 1 samples, 1 columns, 2 tokens")
    assert "raw_reward" in repr(batch)


def test_first_reads_of_cached_properties_from_two_threads() -> None:
    """``total_lengths`` and ``batch_globals`` are made on first use: two threads at once may
    both make them (equal values), never an error from the batch's immutability guard."""
    import sys
    import threading

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    failures: list[BaseException] = []
    try:
        for _ in range(30):
            batch = RolloutBatch.from_train_data(
                {"tokens": [[1, 2, 3]] * 2000, "dynamic_global_batch_size": 4}
            )

            def read(batch: RolloutBatch = batch) -> None:
                try:
                    assert batch.total_lengths[0] == 3
                    assert batch.batch_globals["dynamic_global_batch_size"] == 4
                except BaseException as exc:  # any error is the failure
                    failures.append(exc)

            threads = [threading.Thread(target=read) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []
