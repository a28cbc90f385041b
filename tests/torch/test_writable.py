"""``to_tensors(writable=True)``: tensors of their own; by default, zero-copy views (documented)."""

from __future__ import annotations

import numpy as np
import pytest

import arrow_split
from arrow_split import OptionTypeError, RolloutBatch
from tests.error_facts import raises_facts

torch = pytest.importorskip("torch")

from arrow_split.torch import TensorLayout, to_tensors  # noqa: E402

pytestmark = pytest.mark.torch

LAYOUTS: tuple[TensorLayout, ...] = ("per_sample", "packed", "padded", "nested")
DATA = {
    "tokens": [[1, 2, 3], [4, 5], [6, 7, 8, 9]],
    "response_lengths": [2, 1, 3],
    "loss_masks": [[1, 1], [1], [1, 0, 1]],
    "rollout_log_probs": [[-0.5, -0.25], [-1.0], [-0.1, -0.2, -0.3]],
    "rewards": [1.0, 0.0, 0.5],
    "rollout_routed_experts": [np.full((n - 1, 2, 2), 3, np.int32) for n in (3, 2, 4)],
}


def _every_tensor(tensors: dict[str, object]) -> list[object]:
    found: list[object] = []
    for value in tensors.values():
        found.extend(value if isinstance(value, list) else [value])
    return [t.values() if t.is_nested else t for t in found]  # type: ignore[attr-defined]


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_writable_tensors_never_change_the_shard(layout: TensorLayout, device: str | None) -> None:
    shard = arrow_split.split_train_data_by_dp_raw(
        RolloutBatch.from_train_data(DATA), 1, balance_data=False
    )[0]
    before = shard.to_train_data(layout="actor")
    tensors = to_tensors(
        shard, layout=layout, token_dtype=torch.int32, writable=True, device=device
    )
    for tensor in _every_tensor(tensors):
        tensor.fill_(True if tensor.dtype == torch.bool else 7)  # type: ignore[attr-defined]
    after = shard.to_train_data(layout="actor")
    assert repr(after) == repr(before)


def test_by_default_a_zero_copy_tensor_writes_through_as_documented() -> None:
    shard = arrow_split.split_train_data_by_dp_raw(
        RolloutBatch.from_train_data(DATA), 1, balance_data=False
    )[0]
    tensors = to_tensors(shard, layout="packed", token_dtype=torch.int32)
    tensors["tokens"][0] = 999
    assert shard.to_train_data(layout="actor")["tokens"][0][0] == 999


def test_writable_is_a_bool() -> None:
    with raises_facts(OptionTypeError, key="writable", mistake="flag_type"):
        to_tensors(RolloutBatch.from_train_data(DATA), writable="yes")  # type: ignore[arg-type]
