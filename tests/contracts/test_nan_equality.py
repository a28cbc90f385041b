"""NaN-aware equality: NaN equals NaN at the same place (a NaN-position compare)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from arrow_split import RolloutBatch, take_rows
from arrow_split.testing import assert_batches_equal, assert_shards_equal


def _batch(log_prob: float, reward: float = 1.0) -> RolloutBatch:
    return RolloutBatch.from_train_data(
        {
            "tokens": [[1, 2, 3], [4, 5]],
            "response_lengths": [2, 1],
            "loss_masks": [[1, 1], [0]],
            "rollout_log_probs": [[-0.5, log_prob], [math.nan]],
            "rewards": [reward, 0.5],
        },
        allow_nonfinite=True,
    )


def test_nan_equality_a_batch_with_nan_equals_itself_and_a_rebuild() -> None:
    batch = _batch(math.nan)
    assert batch.equals(batch)
    assert batch.equals(_batch(math.nan))
    assert_batches_equal(batch, _batch(math.nan))
    shard = take_rows(batch, np.array([1, 0]))
    assert shard.equals(take_rows(_batch(math.nan), np.array([1, 0])))
    assert_shards_equal(shard, take_rows(_batch(math.nan), np.array([1, 0])))


def test_nan_equality_nan_payload_and_sign_do_not_matter() -> None:
    negative_nan = float(np.float32(-np.nan))
    assert _batch(math.nan).equals(_batch(negative_nan))


def test_nan_equality_nan_at_another_place_differs() -> None:
    assert not _batch(math.nan).equals(_batch(-1.0))
    with pytest.raises(AssertionError, match=r"column `rollout_log_probs`, row 0: values differ"):
        assert_batches_equal(_batch(math.nan), _batch(-1.0))


def test_nan_equality_in_a_scalar_column() -> None:
    assert _batch(0.0, reward=math.nan).equals(_batch(0.0, reward=math.nan))
    assert not _batch(0.0, reward=math.nan).equals(_batch(0.0, reward=1.0))
