"""arrow_split.torch: a list per token (``rollout_sampling_masks``) in every layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from arrow_split import RolloutBatch, take_rows
from arrow_split.testing import RolloutConfig, make_train_data

torch = pytest.importorskip("torch")

from arrow_split.torch import TensorLayout, to_tensors  # noqa: E402

pytestmark = pytest.mark.torch

_MASKS = "rollout_sampling_masks"


def _shard() -> tuple[RolloutBatch, list[list[list[int]]]]:
    config = RolloutConfig(samples=7, response_mean=6.0, response_cap=12, seed=9, sampling_top_k=5)
    batch = RolloutBatch.from_train_data(make_train_data(config))
    shard = take_rows(batch, np.array([5, 0, 3]))
    expected = shard.to_train_data(layout="rollout")[_MASKS]
    return shard, expected  # type: ignore[return-value]


def test_per_sample_gives_each_samples_values_and_offsets_from_0() -> None:
    shard, expected = _shard()
    tensors = to_tensors(shard)
    for values, offsets, token_lists in zip(
        tensors[_MASKS], tensors[f"{_MASKS}_offsets"], expected, strict=True
    ):
        assert values.dtype == torch.int32
        assert offsets.dtype == torch.int64
        assert offsets[0] == 0
        assert len(offsets) == len(token_lists) + 1
        got = [values[a:b].tolist() for a, b in itertools.pairwise(offsets)]
        assert got == token_lists


@pytest.mark.parametrize("layout", ["packed", "padded", "nested"])
def test_other_layouts_pack_values_token_offsets_and_cu_seqlens(layout: TensorLayout) -> None:
    shard, expected = _shard()
    tensors = to_tensors(shard, layout=layout)
    values, offsets = tensors[_MASKS], tensors[f"{_MASKS}_offsets"]
    cu_seqlens = tensors[f"{_MASKS}_cu_seqlens"]
    assert isinstance(values, torch.Tensor)
    assert isinstance(offsets, torch.Tensor)
    assert isinstance(cu_seqlens, torch.Tensor)
    assert cu_seqlens.dtype == torch.int32
    assert offsets.dtype == torch.int64
    assert cu_seqlens.tolist() == np.cumsum([0, *map(len, expected)]).tolist()
    assert offsets[0] == 0
    assert offsets[-1] == len(values)
    for sample, token_lists in enumerate(expected):
        tokens = range(int(cu_seqlens[sample]), int(cu_seqlens[sample + 1]))
        got = [values[offsets[t] : offsets[t + 1]].tolist() for t in tokens]
        assert got == token_lists
