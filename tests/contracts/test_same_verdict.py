"""The same value is accepted or refused whatever its container, and stored the same."""

from __future__ import annotations

import array
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import ArrowSplitError, ColumnSpec, ColumnTypeError, RolloutBatch, ValueRangeError
from tests.error_facts import raises_facts

torch = pytest.importorskip("torch")

BOOL_COLUMN = ColumnSpec("done", "per_sample_scalar", pa.bool_())


def _containers(values: list[Any], dtype: np.dtype) -> list[object]:
    base = np.array(values, dtype=dtype)
    found: list[object] = [values, base, np.repeat(base, 2)[::2]]
    if dtype.kind in "iuf" and dtype.itemsize > 1:
        found.append(base.astype(dtype.newbyteorder(">")))
    if dtype.kind in "iuf" and dtype.char in "bBhHiIlLqQfd":
        found += [array.array(dtype.char, values), memoryview(array.array(dtype.char, values))]
    if dtype not in (np.uint16, np.uint32):
        found.append(torch.from_numpy(base.copy()))
    return found


def _verdict(column: str, container: object) -> object:
    specs = [BOOL_COLUMN] if column == "done" else []
    try:
        batch = RolloutBatch.from_train_data(
            {"tokens": [[1]] * _len(container), column: container}, specs=specs
        )
    except ArrowSplitError as exc:
        return type(exc)
    return batch.to_train_data()[column]


def _len(container: object) -> int:
    return len(container)  # type: ignore[arg-type]


@given(
    column=st.sampled_from(["rewards", "done"]),
    kind=st.sampled_from(["bool", "int", "float"]),
    values=st.lists(st.integers(0, 2), min_size=1, max_size=5),
    dtype_name=st.sampled_from(["int8", "uint8", "int64", "uint64", "float32", "float64"]),
)
def test_same_value_same_verdict_whatever_the_container(
    column: str, kind: str, values: list[int], dtype_name: str
) -> None:
    python = [bool(v) for v in values] if kind == "bool" else values
    if kind == "float":
        python = [float(v) for v in values]
    dtype = np.dtype(bool if kind == "bool" else dtype_name)
    if kind == "float" and dtype.kind != "f":
        dtype = np.dtype(np.float64)
    if kind == "int" and dtype.kind == "f":
        dtype = np.dtype(np.int64)
    verdicts = {repr(_verdict(column, c)) for c in _containers(python, dtype)}
    assert len(verdicts) == 1, verdicts


def test_bool_column_takes_bools_and_refuses_ints() -> None:
    # one rule for a bool: a bool or numpy.bool_; 0 and 1 are ints (declare `flag=True` for 0/1)
    assert _verdict("done", [True, False]) == [True, False]
    assert _verdict("done", np.array([True, False])) == [True, False]
    assert _verdict("done", [np.bool_(True), torch.tensor(False)]) == [True, False]
    for ints in ([1, 0], np.array([1, 0]), torch.tensor([1, 0]), [True, 0], [2, 0]):
        assert _verdict("done", ints) is ColumnTypeError, ints
    flag = ColumnSpec("done", "per_sample_scalar", pa.bool_(), flag=True)
    batch = RolloutBatch.from_train_data({"tokens": [[1], [2]], "done": [1, 0]}, specs=[flag])
    assert batch.to_train_data()["done"] == [True, False]
    with raises_facts(ValueRangeError, key="done", sample=0):
        RolloutBatch.from_train_data({"tokens": [[1], [2]], "done": [2, 0]}, specs=[flag])


def test_bool_in_any_container_is_refused_in_a_number_column() -> None:
    data = {"tokens": [[1]], "response_lengths": [1], "loss_masks": [[1]]}
    for value in (True, np.bool_(True), np.array(True), torch.tensor(True)):
        with raises_facts(ColumnTypeError, key="rollout_log_probs", sample=0, position=0):
            RolloutBatch.from_train_data({**data, "rollout_log_probs": [[value]]})
        with raises_facts(ColumnTypeError, key="rewards", sample=0):
            RolloutBatch.from_train_data({**data, "rewards": [value]})


def test_bool_in_a_float_list_is_refused_like_a_bool_array() -> None:
    data = {"tokens": [[1]], "response_lengths": [1], "loss_masks": [[1]]}
    for log_probs in ([[True]], [np.array([True])]):
        with pytest.raises(ColumnTypeError) as caught:
            RolloutBatch.from_train_data({**data, "rollout_log_probs": log_probs})
        # a list names the token's position; an array is refused whole, by its dtype
        assert (caught.value.key, caught.value.sample) == ("rollout_log_probs", 0)


@pytest.mark.parametrize("reward", [1 + 0j, np.complex128(1), torch.tensor([1.0]), np.array([1.0])])
def test_complex_and_one_element_arrays_are_not_scalars(reward: object) -> None:
    with raises_facts(ColumnTypeError, key="rewards", sample=0):
        RolloutBatch.from_train_data({"tokens": [[1]], "rewards": [reward]})


@pytest.mark.parametrize("reward", [1.0, np.float32(1.0), np.array(1.0), torch.tensor(1.0)])
def test_real_numbers_and_zero_d_arrays_are_scalars(reward: object) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1]], "rewards": [reward]})
    assert batch.to_train_data()["rewards"] == [1.0]
