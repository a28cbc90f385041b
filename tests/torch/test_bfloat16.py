"""bfloat16 tensors in float columns are stored as float32, which holds every bfloat16 exactly."""

from __future__ import annotations

import pytest

import arrow_split
from arrow_split import RolloutBatch, RolloutBatchBuilder
from tests.error_facts import raises_facts

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


def _bfloat16_values() -> torch.Tensor:
    # Every finite bfloat16 of one sign and a range of exponents: 2**16 bit patterns, spaced.
    bits = torch.arange(0, 0x7F80, 37, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.bfloat16)


def test_bfloat16_log_probs_keep_every_value() -> None:
    values = -_bfloat16_values()
    data = {"tokens": [list(range(len(values) + 1))], "response_lengths": [len(values)]}
    batch = RolloutBatch.from_train_data({**data, "rollout_log_probs": [values]}, exact_floats=True)
    stored = batch.to_train_data()["rollout_log_probs"][0]
    assert stored == values.float().tolist()
    assert batch.column("rollout_log_probs").type.value_type == "float"


def test_a_bfloat16_matrix_and_the_builder() -> None:
    values = torch.tensor([[-0.5, 1 / 3]], dtype=torch.bfloat16)
    data = {"tokens": [[1, 2, 3]], "response_lengths": [2], "advantages": values}
    batch = RolloutBatch.from_train_data(data)
    assert batch.to_train_data()["advantages"] == [values[0].float().tolist()]
    builder = RolloutBatchBuilder()
    builder.append({"tokens": [1, 2, 3], "response_lengths": 2, "advantages": values[0]})
    assert builder.finish().equals(batch)


def test_bfloat16_rewards_are_float64_exactly() -> None:
    rewards = torch.tensor([0.1, 1.0], dtype=torch.bfloat16)
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]], "rewards": rewards})
    assert batch.to_train_data()["rewards"] == rewards.float().tolist()


def test_bfloat16_ids_are_refused_as_floats() -> None:
    ids = [torch.tensor([1, 2], dtype=torch.bfloat16)]
    with raises_facts(arrow_split.ColumnTypeError, key="tokens", sample=0):
        RolloutBatch.from_train_data({"tokens": ids})
