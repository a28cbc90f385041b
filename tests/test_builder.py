"""The streaming builder: equal to ``from_train_data``, atomic appends, reuse, memory, inputs."""

from __future__ import annotations

import array
import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import (
    KNOWN_COLUMNS,
    ColumnSpec,
    ColumnTypeError,
    OptionTypeError,
    RaggedLengthError,
    RolloutBatch,
    RolloutBatchBuilder,
    SchemaError,
    ValueRangeError,
)
from arrow_split.testing import (
    RolloutConfig,
    assert_batches_equal,
    iter_sample_groups,
    make_train_data,
)
from arrow_split.testing.strategies import train_data
from tests.error_facts import assert_facts, raises_facts
from tests.test_errors import BAD_TRAIN_DATA


def _is_sample_key(key: str) -> bool:
    spec = KNOWN_COLUMNS.get(key)
    return spec is None or spec.is_per_sample or spec.global_shape == "float_per_sample"


def _sample(data: dict[str, Any], row: int) -> dict[str, Any]:
    return {key: value[row] for key, value in data.items() if _is_sample_key(key)}


def _group(data: dict[str, Any], start: int, stop: int, *, with_globals: bool) -> dict[str, Any]:
    return {
        key: value[start:stop] if _is_sample_key(key) else value
        for key, value in data.items()
        if with_globals or _is_sample_key(key)
    }


def _feed(builder: RolloutBatchBuilder, data: dict[str, Any], plan: list[tuple[int, str]]) -> None:
    """Give ``data`` to the builder in chunks: ``(size, how)`` with how in append/extend/globals."""
    start, given_globals = 0, False
    for size, how in plan:
        stop = start + size
        if how == "append":
            for row in range(start, stop):
                builder.append(_sample(data, row))
        else:
            given_globals = given_globals or how == "globals"
            builder.extend(_group(data, start, stop, with_globals=how == "globals"))
        start = stop
    if not given_globals:
        for key, value in data.items():
            if not _is_sample_key(key):
                builder.set_global(key, value)


@st.composite
def _plans(draw: st.DrawFn, num_samples: int) -> list[tuple[int, str]]:
    """A split of ``num_samples`` into chunks, each appended or extended (globals or not)."""
    plan, left = [], num_samples
    how = st.sampled_from(["append", "extend", "globals"])
    while left:
        size = draw(st.integers(1, left))
        plan.append((size, draw(how)))
        left -= size
    return plan or [(0, draw(st.sampled_from(["extend", "globals"])))]


@given(data=train_data(max_samples=10, cap=8), draw=st.data())
def test_finish_equals_from_train_data_for_any_grouping(data: dict[str, Any], draw: Any) -> None:
    builder = RolloutBatchBuilder()
    expected = RolloutBatch.from_train_data(data)
    for _ in range(2):  # the second step reuses the first one's buffers
        _feed(builder, data, draw.draw(_plans(len(data["tokens"]))))
        assert len(builder) == len(data["tokens"])
        assert_batches_equal(builder.finish(), expected)
        assert len(builder) == 0


def test_empty_builder_finishes_like_an_empty_batch() -> None:
    builder = RolloutBatchBuilder()
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data({"tokens": []}))
    builder.set_global("dynamic_global_batch_size", 8)
    builder.set_global("raw_reward", [])
    expected = {"tokens": [], "dynamic_global_batch_size": 8, "raw_reward": []}
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(expected))


def test_object_column_falls_back_to_pickle_for_earlier_samples() -> None:
    data = {"tokens": [[1], [2], [3]], "prompt": ["a", {"b": 1}, "c"]}
    builder = RolloutBatchBuilder()
    for row in range(3):
        builder.append(_sample(data, row))
    batch = builder.finish()
    assert batch.specs["prompt"].codec == "pickle"
    assert_batches_equal(batch, RolloutBatch.from_train_data(data))
    builder.extend({"tokens": [[1]], "prompt": ["again"]})  # a new step starts as strings
    assert builder.finish().specs["prompt"].codec == "string"


def test_tensor_shape_comes_from_the_first_sample_that_has_one() -> None:
    data = {
        "tokens": [[1], [2, 3], [4, 5, 6]],
        "rollout_routed_experts": [[], *[np.ones((n, 2, 3), np.int32) for n in (1, 2)]],
    }
    builder = RolloutBatchBuilder()
    for row in range(3):
        builder.append(_sample(data, row))
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))
    builder.append(_sample(data, 0))  # only a shapeless sample in this step
    assert_batches_equal(
        builder.finish(), RolloutBatch.from_train_data(_group(data, 0, 1, with_globals=True))
    )


def test_a_new_step_may_have_another_tensor_shape() -> None:
    builder = RolloutBatchBuilder()
    for shape in ((2, 2), (3, 1), (2, 2)):
        data = {
            "tokens": [[1, 2], [3, 4, 5]],
            "rollout_routed_experts": [np.full((n, *shape), n, np.int32) for n in (1, 2)],
        }
        builder.append(_sample(data, 0))
        builder.append(_sample(data, 1))
        assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))


def _feed_bad(
    builder: RolloutBatchBuilder, data: dict[str, Any]
) -> tuple[list[Exception], dict[str, Any]]:
    """Append ``data`` sample by sample; return the errors and the train data accepted."""
    errors: list[Exception] = []
    accepted: list[dict[str, Any]] = []
    for row in range(len(data["tokens"])):
        sample, before = _sample(data, row), len(builder)
        try:
            builder.append(sample)
        except (SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError) as error:
            errors.append(error)
            assert len(builder) == before
        else:
            accepted.append(sample)
    kept = {key: [sample[key] for sample in accepted] for key in data if _is_sample_key(key)}
    if not accepted:
        kept = {"tokens": []}
    for key, value in data.items():
        if not _is_sample_key(key):
            try:
                builder.set_global(key, value)
            except SchemaError as error:
                errors.append(error)
            else:
                kept[key] = value
    return errors, kept


def _splittable(data: dict[str, Any]) -> bool:
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        return False
    values = [value for key, value in data.items() if _is_sample_key(key)]
    return all(isinstance(v, (list, np.ndarray)) and len(v) == len(tokens) for v in values)


@pytest.mark.parametrize(("data", "error", "facts"), BAD_TRAIN_DATA)
def test_a_bad_sample_is_rejected_and_leaves_the_builder_unchanged(
    data: dict[str, Any], error: type[Exception], facts: dict[str, Any]
) -> None:
    builder = RolloutBatchBuilder()
    if not _splittable(data):  # a rule on the group as a whole
        with pytest.raises(error) as caught:
            builder.extend(data)
        assert_facts(caught.value, facts)
        assert len(builder) == 0
        assert_batches_equal(builder.finish(), RolloutBatch.from_train_data({"tokens": []}))
        return
    errors, kept = _feed_bad(builder, data)
    assert errors, "the bad sample was accepted"
    assert isinstance(errors[0], error)
    assert_facts(errors[0], facts)  # one sample per call: the sample is the batch's index
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(kept))


def test_messages_name_the_position_in_the_batch() -> None:
    builder = RolloutBatchBuilder()
    builder.extend({"tokens": [[1, 2]] * 5})
    with pytest.raises(ColumnTypeError) as caught:
        builder.append({"tokens": [1, 1.5]})
    assert_facts(caught.value, {"key": "tokens", "sample": 5, "position": 1})
    with pytest.raises(ColumnTypeError) as caught:
        builder.extend({"tokens": [[1], [2], [0.5]]})
    assert_facts(caught.value, {"key": "tokens", "sample": 7, "position": 0})
    assert len(builder) == 5


def test_a_key_named_like_a_location_keeps_its_name() -> None:
    # the sample is a field, shifted by arithmetic: a key's name is never rewritten
    spec = ColumnSpec("sample 1", "per_sample_scalar", pa.int64())
    builder = RolloutBatchBuilder(specs=[spec])
    builder.extend({"tokens": [[1], [2]], "sample 1": [1, 2]})
    with pytest.raises(ColumnTypeError) as caught:
        builder.extend({"tokens": [[3], [4]], "sample 1": [3, 0.5]})
    assert_facts(caught.value, {"key": "sample 1", "sample": 3})
    assert str(caught.value).startswith("sample 3: `sample 1` is an integer column")


def test_keys_are_fixed_by_the_first_sample() -> None:
    builder = RolloutBatchBuilder()
    builder.append({"tokens": [1, 2], "rewards": 1.0})
    with pytest.raises(SchemaError) as caught:
        builder.append({"tokens": [1]})
    assert_facts(caught.value, {"key": "rewards", "sample": 1})
    with pytest.raises(SchemaError) as caught:
        builder.append({"tokens": [1], "rewards": 0.0, "truncated": True})
    assert_facts(caught.value, {"key": "truncated", "sample": 1})
    builder.finish()
    builder.append({"tokens": [1]})  # a new step: new keys
    assert builder.finish().column_names == ["tokens"]


def test_routed_experts_of_another_shape_fail_at_that_append() -> None:
    builder = RolloutBatchBuilder()
    builder.append({"tokens": [1, 2, 3], "rollout_routed_experts": np.zeros((2, 4, 2), np.int32)})
    with pytest.raises(RaggedLengthError) as caught:
        builder.append({"tokens": [1, 2], "rollout_routed_experts": np.zeros((1, 4, 3), np.int32)})
    assert_facts(caught.value, {"key": "rollout_routed_experts", "sample": 1})
    assert len(builder) == 1


def test_batch_globals_given_two_ways_or_twice() -> None:
    builder = RolloutBatchBuilder()
    builder.extend({"tokens": [[1]], "raw_reward": [0.5], "dynamic_global_batch_size": 4})
    with pytest.raises(SchemaError) as caught:
        builder.set_global("raw_reward", [0.5])
    assert_facts(caught.value, {"key": "raw_reward"})
    with pytest.raises(SchemaError) as caught:
        builder.extend({"tokens": [[2]], "raw_reward": [0.1], "dynamic_global_batch_size": 8})
    assert_facts(caught.value, {"key": "dynamic_global_batch_size", "sample": 1})
    with pytest.raises(SchemaError) as caught:
        builder.set_global("tokens", [[1]])
    assert_facts(caught.value, {"key": "tokens"})
    with pytest.raises(SchemaError) as caught:
        builder.set_global("entropies", 1)
    assert_facts(caught.value, {"key": "entropies"})
    with raises_facts(SchemaError, key="dynamic_global_batch_size", expected="one int"):
        builder.set_global("dynamic_global_batch_size", "4")
    assert len(builder) == 1
    builder.finish()
    builder.set_global("raw_reward", [0.5])
    with pytest.raises(SchemaError) as caught:
        builder.append({"tokens": [1], "raw_reward": 0.5})
    assert_facts(caught.value, {"key": "raw_reward", "sample": 0})


def test_finish_checks_a_whole_per_sample_global_and_stays_unchanged() -> None:
    builder = RolloutBatchBuilder()
    builder.extend({"tokens": [[1], [2, 3]]})
    builder.set_global("raw_reward", [1.0])
    with pytest.raises(SchemaError) as caught:
        builder.finish()
    assert_facts(caught.value, {"key": "raw_reward"})
    assert len(builder) == 2
    builder.set_global("raw_reward", [1.0, 0.0])
    expected = {"tokens": [[1], [2, 3]], "raw_reward": [1.0, 0.0]}
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(expected))


def test_arguments_of_the_wrong_type() -> None:
    builder = RolloutBatchBuilder()
    with pytest.raises(SchemaError) as caught:
        builder.append([1, 2])  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "sample"})
    with pytest.raises(SchemaError) as caught:
        builder.extend([[1, 2]])  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "train_data"})
    with pytest.raises(SchemaError) as caught:
        RolloutBatchBuilder(specs=["tokens"])  # type: ignore[list-item]
    assert_facts(caught.value, {"key": "specs"})


def test_declared_specs_and_options_apply() -> None:
    specs = [ColumnSpec("score", "per_sample_scalar", pa.float64())]
    builder = RolloutBatchBuilder(specs, allow_nonfinite=True)
    builder.append({"tokens": [1], "score": float("nan")})
    assert np.isnan(builder.finish().column("score").to_numpy()[0])
    strict = RolloutBatchBuilder(exact_floats=True)
    with pytest.raises(ValueRangeError) as caught:
        strict.append({"tokens": [1], "response_lengths": 1, "rollout_log_probs": [0.1]})
    assert_facts(caught.value, {"key": "rollout_log_probs", "sample": 0, "position": 0})


_STEP = RolloutConfig(samples=24, response_mean=64.0, response_cap=256, moe_shape=(2, 2), seed=5)


def test_capacity_is_kept_for_the_next_step() -> None:
    groups = list(iter_sample_groups(_STEP, group_size=4))
    builder = RolloutBatchBuilder()
    for group in groups:
        builder.extend(group)
    first = builder.finish()
    before = pa.total_allocated_bytes()
    builder.extend(groups[0])
    reserved = pa.total_allocated_bytes() - before
    assert reserved >= first.nbytes  # the first append takes the whole last step's capacity
    for group in groups[1:]:
        builder.extend(group)
    assert pa.total_allocated_bytes() - before <= reserved  # and the step never grows it
    assert_batches_equal(builder.finish(), first)


def test_memory_stays_within_twice_the_batch() -> None:
    config = dataclasses.replace(
        _STEP, samples=48, response_mean=1024.0, response_cap=4096, moe_shape=(4, 4), as_numpy=True
    )
    groups = list(iter_sample_groups(config, group_size=4))
    builder = RolloutBatchBuilder()
    baseline = pa.total_allocated_bytes()
    peak = 0
    for group in groups:
        builder.extend(group)
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    batch = builder.finish()
    peak = max(peak, pa.total_allocated_bytes() - baseline)
    assert batch.nbytes > 2**20  # more than a MiB
    assert peak <= 2 * batch.nbytes, (peak, batch.nbytes)
    assert_batches_equal(batch, RolloutBatch.from_train_data(make_train_data(config)))


def test_array_array_inputs() -> None:
    data = make_train_data(dataclasses.replace(_STEP, moe_shape=None, columns="numeric"))
    as_arrays = dict(data)
    as_arrays["tokens"] = [array.array("i", values) for values in data["tokens"]]
    as_arrays["loss_masks"] = [array.array("B", values) for values in data["loss_masks"]]
    as_arrays["rollout_log_probs"] = [array.array("f", v) for v in data["rollout_log_probs"]]
    as_arrays["rewards"] = array.array("d", data["rewards"])
    builder = RolloutBatchBuilder()
    builder.extend(as_arrays)
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))


class _DLPackOnly:
    """An array that only exports DLPack (no ``__array__``, no buffer protocol)."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = values

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._values.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._values.__dlpack_device__()  # type: ignore[no-any-return]


def test_dlpack_only_inputs() -> None:
    data = make_train_data(dataclasses.replace(_STEP, as_numpy=True, columns="numeric"))
    builder = RolloutBatchBuilder()
    for row in range(len(data["tokens"])):
        sample = _sample(data, row)
        sample["tokens"] = _DLPackOnly(sample["tokens"])
        sample["rollout_routed_experts"] = _DLPackOnly(sample["rollout_routed_experts"])
        builder.append(sample)
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))


def test_torch_cpu_tensors() -> None:
    torch = pytest.importorskip("torch")
    data = make_train_data(dataclasses.replace(_STEP, as_numpy=True, columns="numeric"))
    builder = RolloutBatchBuilder()
    for row in range(len(data["tokens"])):
        sample = _sample(data, row)
        for key in ("tokens", "loss_masks", "rollout_log_probs", "rollout_routed_experts"):
            sample[key] = torch.from_numpy(np.ascontiguousarray(sample[key]))
        builder.append(sample)
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))
    with pytest.raises(ColumnTypeError) as caught:
        builder.append({"tokens": torch.ones(3, requires_grad=True)})
    assert_facts(caught.value, {"key": "tokens", "sample": 0})


# The fast path for Python lists must accept and refuse exactly what the careful path does.

_PY_VALUES = st.one_of(
    st.integers(-(2**40), 2**40),
    st.integers(-1, 2),
    st.integers(2**52, 2**64),
    st.booleans(),
    st.floats(),
    st.none(),
    st.just("7"),
    st.builds(np.int64, st.integers(-5, 5)),
    st.builds(np.float32, st.floats(width=32)),
)
_FAST_COLUMNS = [
    ColumnSpec("x", "per_token", pa.int32()),
    ColumnSpec("x", "per_token", pa.int16()),
    ColumnSpec("x", "per_token", pa.uint8()),
    ColumnSpec("x", "per_token", pa.uint8(), flag=True),
    ColumnSpec("x", "per_token", pa.float32()),
    ColumnSpec("x", "per_token", pa.float64()),
    ColumnSpec("x", "per_sample_scalar", pa.int64()),
    ColumnSpec("x", "per_sample_scalar", pa.int32()),
    ColumnSpec("x", "per_sample_scalar", pa.float64()),
]


def _outcome(data: dict[str, Any], spec: ColumnSpec) -> RolloutBatch | tuple[type, str]:
    try:
        return RolloutBatch.from_train_data(data, specs=[spec])
    except (SchemaError, ColumnTypeError, ValueRangeError, RaggedLengthError) as error:
        return type(error), str(error)


@given(
    spec=st.sampled_from(_FAST_COLUMNS),
    values=st.lists(st.lists(_PY_VALUES, max_size=4), min_size=1, max_size=4),
    ones=st.booleans(),
)
def test_fast_path_agrees_with_the_careful_path(
    spec: ColumnSpec, values: list[list[Any]], ones: bool
) -> None:
    if ones:  # mostly 0/1 values, so that a bool hides among them
        values = [
            [1 if isinstance(v, int) and not isinstance(v, bool) else v for v in sample]
            for sample in values
        ]
    column: list[Any] = (
        [v[0] if v else 0 for v in values] if spec.kind == "per_sample_scalar" else values
    )
    data = {"tokens": [[1]] * len(values), "x": column}
    fast = _outcome(data, spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("arrow_split._codecs._numeric.flat_from_lists", lambda *a, **k: None)
        patch.setattr("arrow_split._codecs.per_sample_scalar.flat_from_lists", lambda *a, **k: None)
        careful = _outcome(data, spec)
    if isinstance(fast, RolloutBatch) and isinstance(careful, RolloutBatch):
        assert_batches_equal(fast, careful)
    else:
        assert fast == careful


def test_a_bool_among_many_ones_is_found() -> None:
    tokens = [[1] * 300 for _ in range(4)]
    tokens[3][299] = True
    with pytest.raises(ColumnTypeError) as caught:
        RolloutBatch.from_train_data({"tokens": tokens})
    assert_facts(caught.value, {"key": "tokens", "sample": 3, "position": 299})
    tokens[3][299] = 1
    assert RolloutBatch.from_train_data({"tokens": tokens}).num_samples == 4


@pytest.mark.parametrize(
    ("values", "stored"),
    [((5, 1000), "uint16"), ((1000, 5), "uint16"), ((5, 70_000), "int32"), ((300, -1), "int32")],
)
def test_narrow_ids_take_the_type_of_the_whole_batch(values: tuple[int, int], stored: str) -> None:
    # Each group alone would be stored narrower; every rank must see the whole batch's type.
    def experts(value: int) -> np.ndarray:
        return np.full((2, 2, 2), value, dtype=np.int32)

    builder = RolloutBatchBuilder()
    for value in values:
        builder.extend({"tokens": [[1, 2, 3]], "rollout_routed_experts": [experts(value)]})
    batch = builder.finish()
    expected = RolloutBatch.from_train_data(
        {"tokens": [[1, 2, 3]] * 2, "rollout_routed_experts": [experts(v) for v in values]}
    )
    assert batch.equals(expected)
    leaf = batch.record_batch.schema.field("rollout_routed_experts").type.value_type
    assert str(leaf.value_type.value_type) == stored
    builder.extend({"tokens": [[1, 2, 3]], "rollout_routed_experts": [experts(3)]})
    leaf = builder.finish().record_batch.schema.field("rollout_routed_experts").type.value_type
    assert str(leaf.value_type.value_type) == "uint8"  # the next step starts narrow again


def test_the_builders_flags_get_the_class_of_the_mistake_table() -> None:
    with raises_facts(OptionTypeError, key="allow_nonfinite", mistake="flag_type"):
        RolloutBatchBuilder(allow_nonfinite="yes")  # type: ignore[arg-type]
