"""Known columns: read-only ``KNOWN_COLUMNS``, the PPO keys, and ``register_column``."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

import arrow_split
from arrow_split import ColumnSpec, SchemaError, SchemaTypeError
from arrow_split.schema import _KNOWN
from tests.error_facts import raises_facts

PPO_KEYS = ("advantages", "returns", "values", "ref_log_probs")


@pytest.fixture
def known() -> Iterator[None]:
    saved = dict(_KNOWN)
    yield
    _KNOWN.clear()
    _KNOWN.update(saved)


def test_known_columns_is_read_only() -> None:
    with pytest.raises(TypeError):
        arrow_split.KNOWN_COLUMNS["x"] = ColumnSpec("x", "per_sample_object")  # type: ignore[index]


@pytest.mark.parametrize("key", PPO_KEYS)
def test_ppo_keys_are_known_as_rollout_log_probs_is(key: str) -> None:
    spec = arrow_split.KNOWN_COLUMNS[key]
    reference = arrow_split.KNOWN_COLUMNS["rollout_log_probs"]
    assert (spec.kind, spec.value_type, spec.length) == (
        reference.kind,
        reference.value_type,
        reference.length,
    )


def test_a_ppo_batch_needs_no_specs() -> None:
    data = {
        "tokens": [[1, 2, 3], [4, 5]],
        "response_lengths": [2, 1],
        "loss_masks": [[1, 1], [1]],
        **{key: [[0.5, -1.0], [2.0]] for key in PPO_KEYS},
    }
    batch = arrow_split.RolloutBatch.from_train_data(data)
    assert batch.to_train_data()["advantages"] == [[0.5, -1.0], [2.0]]
    with raises_facts(arrow_split.RaggedLengthError, key="advantages", sample=0):
        arrow_split.RolloutBatch.from_train_data({**data, "advantages": [[0.5], [2.0]]})


@pytest.mark.usefixtures("known")
def test_a_registered_column_is_known_in_this_process() -> None:
    data = {"tokens": [[1, 2]], "response_lengths": [1], "kl": [0.25]}
    with raises_facts(SchemaError, key="kl"):
        arrow_split.RolloutBatch.from_train_data(data)
    arrow_split.register_column(ColumnSpec("kl", "per_sample_scalar", pa.float64()))
    assert arrow_split.RolloutBatch.from_train_data(data).to_train_data()["kl"] == [0.25]


@pytest.mark.usefixtures("known")
def test_registering_refuses_a_known_key_unless_replaced() -> None:
    spec = ColumnSpec("rewards", "per_sample_scalar", pa.float32())
    with raises_facts(SchemaError, key="rewards"):
        arrow_split.register_column(spec)
    arrow_split.register_column(spec, replace=True)
    assert arrow_split.KNOWN_COLUMNS["rewards"].value_type == pa.float32()


@pytest.mark.usefixtures("known")
def test_registering_refuses_bad_specs() -> None:
    with raises_facts(SchemaTypeError, key="spec"):
        arrow_split.register_column("kl")  # type: ignore[arg-type]
    with raises_facts(SchemaError, key="total_lengths"):
        arrow_split.register_column(ColumnSpec("total_lengths", "per_sample_scalar", pa.int64()))
    taken = ColumnSpec("ids", "per_sample_scalar", pa.int64(), role="rollout_id")
    with raises_facts(SchemaError, key="ids"):
        arrow_split.register_column(taken)
    assert "ids" not in arrow_split.KNOWN_COLUMNS
