"""A value of the wrong type is told the conversion its own library spells (issue 27)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import ColumnSpec, ColumnTypeError, RolloutBatch

FLOATS = ColumnSpec("scores", "per_token", pa.float32(), length="tokens")
FLOAT_LISTS = ColumnSpec("scores", "per_token_list", pa.float32(), length="tokens")
FLOAT_TENSOR = ColumnSpec("image", "per_sample_tensor", pa.float32())


def _data(**columns: Any) -> dict[str, Any]:
    return {"tokens": [[1, 2, 3], [4, 5]], "response_lengths": [2, 1], **columns}


def _message(data: dict[str, Any], specs: list[ColumnSpec] | None = None) -> str:
    with pytest.raises(ColumnTypeError) as raised:
        RolloutBatch.from_train_data(data, specs=specs or [])
    return str(raised.value)


def test_a_torch_tensor_of_the_wrong_dtype_is_told_to_use_to_with_the_columns_torch_dtype() -> None:
    torch = pytest.importorskip("torch")
    cases: list[tuple[dict[str, Any], list[ColumnSpec], str]] = [
        (
            _data(tokens=[torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0])]),
            [],
            "torch.int32",
        ),
        (_data(rewards=torch.tensor([True, False])), [], "torch.float64"),
        (
            _data(scores=[torch.ones(3, dtype=torch.bool), torch.ones(2, dtype=torch.bool)]),
            [FLOATS],
            "torch.float32",
        ),
        (
            _data(rollout_routed_experts=[torch.zeros((3, 2)), torch.zeros((2, 2))]),
            [],
            "torch.int32",
        ),
    ]
    for data, specs, dtype in cases:
        message = _message(data, specs)
        assert f"`.to({dtype})`" in message, message
        assert "astype" not in message, message


def test_a_numpy_array_of_the_wrong_dtype_is_told_the_astype_of_the_columns_dtype() -> None:
    message = _message(_data(tokens=[np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0])]))
    assert "`.astype(np.int32)`" in message, message
    message = _message(_data(rewards=np.array([True, False])))
    assert "`.astype(np.float64)`" in message, message


@pytest.mark.parametrize(
    ("column", "value", "specs"),
    [
        ("rewards", ["0.5", 1.0], []),
        ("scores", [[0.1, "0.5", 0.2], [0.3, 0.4]], [FLOATS]),
        ("scores", [[[0.1], ["0.5"], [0.2]], [[0.3], [0.4]]], [FLOAT_LISTS]),
        ("image", [[[0.1, "0.5"]], [[0.3, 0.4]]], [FLOAT_TENSOR]),
    ],
)
def test_a_string_in_a_float_column_is_told_float_never_int(
    column: str, value: object, specs: list[ColumnSpec]
) -> None:
    message = _message(_data(**{column: value}), specs)
    assert "`float(v)`" in message, message
    assert not re.search(r"int\(", message), message
