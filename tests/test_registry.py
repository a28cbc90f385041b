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


LIBRARY_KEYS = ("total_lengths", "partition", "global_total_lengths")


@pytest.mark.usefixtures("known")
@pytest.mark.parametrize("key", LIBRARY_KEYS)
def test_a_key_the_library_adds_itself_is_never_a_column(key: str) -> None:
    spec = ColumnSpec(key, "per_sample_scalar", pa.int64())
    data = {"tokens": [[1, 2], [3]], key: [2, 1]}
    with raises_facts(SchemaError, key=key, fix="give the column another name"):
        arrow_split.register_column(spec)
    assert key not in arrow_split.KNOWN_COLUMNS
    with raises_facts(SchemaError, key=key):
        arrow_split.RolloutBatch.from_train_data(data, specs=[spec])
    with raises_facts(SchemaError, key=key):
        arrow_split.RolloutBatchBuilder(specs=[spec])
    batch = arrow_split.RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    with raises_facts(SchemaError, key=key):
        batch.add_train_data({key: [2, 1]}, specs=[spec])


@pytest.mark.parametrize("key", LIBRARY_KEYS[1:])
def test_a_layout_key_in_the_data_says_it_is_the_librarys(key: str) -> None:
    with raises_facts(SchemaError, key=key, fix="give the column another name"):
        arrow_split.RolloutBatch.from_train_data({"tokens": [[1, 2]], key: [0]})


@pytest.mark.usefixtures("known")
def test_a_replaced_known_column_keeps_its_role() -> None:
    arrow_split.register_column(ColumnSpec("tokens", "per_token", pa.int64()), replace=True)
    assert arrow_split.KNOWN_COLUMNS["tokens"].role == "length_source"
    assert arrow_split.KNOWN_COLUMNS["tokens"].value_type == pa.int64()
    batch = arrow_split.RolloutBatch.from_train_data({"tokens": [[1, 2]], "response_lengths": [1]})
    assert batch.total_lengths.tolist() == [2]
    assert batch.specs["tokens"].value_type == pa.int64()


@pytest.mark.usefixtures("known")
def test_a_replacement_that_cannot_keep_its_role_is_refused() -> None:
    lengths = ColumnSpec("response_lengths", "batch_global", global_shape="int")
    with raises_facts(SchemaError, key="response_lengths") as caught:
        arrow_split.register_column(lengths, replace=True)
    assert caught.value.fix == "an override of `response_lengths` keeps its role; " + (
        "declare a kind that can play it"
    )
    assert arrow_split.KNOWN_COLUMNS["response_lengths"].kind == "per_sample_scalar"
    with raises_facts(SchemaError, key="response_lengths"):  # the same rule per batch
        arrow_split.RolloutBatch.from_train_data({"tokens": [[1]]}, specs=[lengths])
