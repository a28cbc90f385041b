"""``arrow_split.ray.warm_up``: a fresh process's first-time work done early, once, without Ray."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from arrow_split import (
    ArrowSplitWarning,
    OptionError,
    OptionTypeError,
    RolloutBatch,
    shard_for_rank,
)
from tests.error_facts import raises_facts

ray = pytest.importorskip("ray")

from arrow_split.ray import (  # noqa: E402
    _handoff,
    clear_caches,
    process_rollout_data,
    warm_up,
)
from arrow_split.ray._nodes import node_rows  # noqa: E402

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
    rows = node_rows(batch, plan, [0, 1])
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

    monkeypatch.setattr(_handoff.RolloutBatch, "from_train_data", refuse)
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


_FAULTS_OF_FRESH_BLOCKS = (
    "import platform, resource, sys\n"
    "import numpy as np, pyarrow as pa\n"
    "from arrow_split.ray import warm_up\n"
    "warm_up(reserve_bytes=int(sys.argv[1]))\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(2):\n"
    "    blocks = [np.ones(2**20, dtype=np.uint8) for _ in range(8)]\n"
    "    buffers = [pa.allocate_buffer(2**20) for _ in range(8)]\n"
    "    for buffer in buffers:\n"
    "        np.frombuffer(buffer, dtype=np.uint8)[:] = 1\n"
    "    del blocks, buffers\n"
    "faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before\n"
    "print(faults, pa.default_memory_pool().backend_name)\n"
)


def _faults_of_fresh_blocks(reserve_bytes: int) -> tuple[int, str]:
    """Page faults of allocating, touching and freeing 16 MiB twice (half of it Arrow buffers)
    in a fresh process, and the backend of Arrow's default memory pool there."""
    done = subprocess.run(
        [sys.executable, "-c", _FAULTS_OF_FRESH_BLOCKS, str(reserve_bytes)],
        check=True,
        capture_output=True,
        text=True,
    )
    faults, backend = done.stdout.split()[-2:]
    return int(faults), backend


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the reserve tunes glibc's malloc")
def test_a_reserve_serves_the_first_steps_from_pages_already_touched() -> None:
    # 1 MiB blocks are above glibc's first mmap threshold: without a reserve each is mapped
    # afresh and every page of it faults (8 MiB of them twice: 4,096 pages); with one they reuse
    # the heap, and so do Arrow's buffers, from the system allocator.
    faults, backend = _faults_of_fresh_blocks(0)
    assert faults >= 1_000
    assert backend != "system"
    faults, backend = _faults_of_fresh_blocks(64 * 2**20)
    assert faults <= 100
    assert backend == "system"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (True, OptionTypeError),
        (1.0, OptionTypeError),
        ("64", OptionTypeError),
        (None, OptionTypeError),
        (-1, OptionError),
        (2**30 + 1, OptionError),
    ],
)
def test_a_reserve_that_is_not_a_byte_count_in_range_is_a_typed_error(
    value: object, error: type[Exception]
) -> None:
    with raises_facts(error, key="reserve_bytes") as caught:
        warm_up(reserve_bytes=value)  # type: ignore[arg-type]
    assert type(caught.value) is error


def test_a_reserve_without_glibc_warns_and_reserves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_handoff.platform, "libc_ver", lambda: ("", ""))
    monkeypatch.setattr(_handoff, "_reserved", 0)
    with pytest.warns(ArrowSplitWarning, match="reserved nothing"):
        assert _handoff.reserve_heap(2**20) is False
    assert _handoff._reserved == 0


def test_warm_up_in_a_ray_process_counts_the_nodes_a_delayed_rank_then_reuses(
    ray_cluster: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first ``ray.nodes()`` in a process connects to the cluster: warm_up pays it."""
    calls: list[None] = []
    real_nodes = ray.nodes
    monkeypatch.setattr(ray, "nodes", lambda: calls.append(None) or real_nodes())
    clear_caches()
    warm_up()
    warm_up()
    assert len(calls) == 1
    batch = RolloutBatch.from_train_data(_TRAIN_DATA)
    ref = ray.put(batch.with_plan(batch.make_plan(2, balance_data=True)))
    shard = process_rollout_data(ref, 1, 2, balance_data=True)
    assert len(calls) == 1
    expected = shard_for_rank(batch, 1, 2, balance_data=True)
    assert shard.to_train_data(layout="actor") == expected.to_train_data(layout="actor")
