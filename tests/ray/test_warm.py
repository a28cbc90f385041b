"""``arrow_split.ray.warm_up``: a fresh process's first-time work done early, once, without Ray."""

from __future__ import annotations

import subprocess
import sys

import pytest

from arrow_split import RolloutBatch, shard_for_rank

ray = pytest.importorskip("ray")

from arrow_split.ray import _warm, process_rollout_data, warm_up  # noqa: E402
from arrow_split.ray._eager import _node_rows  # noqa: E402

pytestmark = pytest.mark.ray

_TRAIN_DATA = {
    "tokens": [[1, 2, 3, 4], [5, 6], [7, 8, 9], [10]],
    "response_lengths": [2, 1, 2, 1],
    "loss_masks": [[1, 1], [0], [1, 0], [1]],
    "rewards": [0.5, 1.0, 0.0, 0.25],
}


def test_warm_up_then_both_hand_offs_give_the_core_split() -> None:
    warm_up()
    warm_up()
    batch = RolloutBatch.from_train_data(_TRAIN_DATA)
    plan = batch.make_plan(2, balance_data=True)
    rows = _node_rows(batch, plan, [0, 1])
    for rank in (0, 1):
        expected = shard_for_rank(batch, rank, 2, balance_data=True)
        eager = process_rollout_data([rows, rows], rank, 2, balance_data=True)
        delayed = process_rollout_data(batch.with_plan(plan), rank, 2, balance_data=True)
        assert eager.to_train_data(layout="actor") == expected.to_train_data(layout="actor")
        assert delayed.to_train_data(layout="actor") == expected.to_train_data(layout="actor")


def test_a_second_warm_up_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    warm_up()

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("warm_up ran again")

    monkeypatch.setattr(_warm.RolloutBatch, "from_train_data", refuse)
    warm_up()


def test_warm_up_in_a_fresh_process_needs_no_ray_connection_and_leaves_torch_out() -> None:
    code = (
        "import sys, ray\n"
        "from arrow_split.ray import warm_up\n"
        "warm_up(); warm_up()\n"
        "print(ray.is_initialized(), 'torch' in sys.modules, 'pyarrow.compute' in sys.modules)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert output.split() == ["False", "False", "True"]
