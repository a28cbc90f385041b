"""One reused block per rank: the same values as the take, no reallocation, the reuse rule."""

from __future__ import annotations

import threading
import tracemalloc
from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrow_split.block as block_module
from arrow_split import (
    OptionError,
    OptionTypeError,
    Plan,
    RolloutBatch,
    SchemaTypeError,
    take_rows,
)
from arrow_split.block import RankBlock
from arrow_split.testing import RolloutConfig, make_train_data
from arrow_split.testing.strategies import rollout_batches
from tests.error_facts import raises_facts


def assert_same_as_take(block: Any, batch: RolloutBatch, rows: np.ndarray) -> None:
    filled = block.fill(batch, rows)
    shard = take_rows(batch, rows)
    assert filled.num_samples == len(rows)
    assert list(filled.columns) == [column.spec.name for column in shard.numeric_columns()]
    for column in shard.numeric_columns():
        mine = filled.columns[column.spec.name]
        np.testing.assert_array_equal(mine.values, column.values)
        assert mine.values.dtype == column.values.dtype
        for ours, theirs in (
            (mine.offsets, column.offsets),
            (mine.token_offsets, column.token_offsets),
        ):
            assert (ours is None) == (theirs is None)
            if ours is not None:
                np.testing.assert_array_equal(ours, theirs)
        for array in (mine.values, mine.offsets, mine.token_offsets):
            if array is not None and array.size:
                assert 0 <= filled.start_of(array) <= filled.nbytes - array.nbytes
                assert filled.start_of(array) % 64 == 0


@settings(max_examples=60, deadline=None)
@given(rollout_batches(), st.data(), st.sampled_from([1, 3]))
def test_the_block_holds_what_the_take_gives(batch: RolloutBatch, data: Any, threads: int) -> None:
    n = batch.num_samples
    rows = np.array(
        data.draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=8) if n else st.just([])),
        dtype=np.int64,
    )
    block = RankBlock(threads=threads, parallel_bytes=0)
    assert_same_as_take(block, batch, rows)
    assert_same_as_take(block, batch, rows[::-1].copy())  # the second fill reuses the block
    whole = block.fill(batch)
    np.testing.assert_array_equal(whole.columns["tokens"].values, batch.numeric_columns()[0].values)
    block.close()


@settings(max_examples=25, deadline=None)
@given(rollout_batches(), st.data(), st.booleans())
def test_each_fast_path_holds_what_the_take_gives(
    batch: RolloutBatch, data: Any, numpy_sums: bool
) -> None:
    """Consecutive rows (one run), the batch's own plan (trusted rows), a rank's rows summed
    by numpy (past ``_FEW``): each gives the take's values, and never writes into the batch."""
    n = batch.num_samples
    before = batch.record_batch.to_pylist()
    first = data.draw(st.integers(0, n))
    consecutive = np.arange(first, data.draw(st.integers(first, n)), dtype=np.int64)
    block = RankBlock()
    with mock.patch.object(block_module, "_FEW", 0 if numpy_sums else 4096):
        assert_same_as_take(block, batch, consecutive)
        if n:
            plan = batch.make_plan(1, balance_data=False)
            planned = batch.with_plan(plan)
            assert_same_as_take(block, planned, plan.partitions[0])
            shuffled = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)
            assert_same_as_take(block, batch, shuffled)
    assert batch.record_batch.to_pylist() == before


def make_batch(lengths: list[int]) -> RolloutBatch:
    rng = np.random.default_rng(len(lengths))
    return RolloutBatch.from_train_data(
        {
            "tokens": [rng.integers(0, 1000, n).astype(np.int32) for n in lengths],
            "rollout_log_probs": [rng.random(n // 2).astype(np.float32) for n in lengths],
            "response_lengths": [n // 2 for n in lengths],
        }
    )


def test_no_reallocation_after_warm_up() -> None:
    batch = make_batch([4000] * 64)
    block = RankBlock()
    steps = [np.arange(i, 64, 4) for i in range(4)]
    block.fill(batch, steps[0])
    address, capacity = block.address, block.capacity
    tracemalloc.start()
    try:
        for rows in steps[1:]:
            start = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            filled = block.fill(batch, rows)
            new_bytes = tracemalloc.get_traced_memory()[1] - start
            assert new_bytes < filled.nbytes / 20  # bookkeeping only, never the rank's bytes
    finally:
        tracemalloc.stop()
    assert (block.address, block.capacity, block.allocations) == (address, capacity, 1)


def test_the_block_grows_for_a_larger_step_only() -> None:
    small, large = make_batch([100] * 8), make_batch([100_000] * 8)  # past the 1 MiB grain
    block = RankBlock()
    block.fill(small, np.arange(8))
    assert block.allocations == 1
    filled = block.fill(large, np.arange(8))
    assert block.allocations == 2
    assert block.capacity >= filled.nbytes
    block.fill(small, np.arange(8))
    block.fill(large, np.arange(4))
    assert block.allocations == 2


class FakeEvent:
    """A device copy still reading the block: records when it was waited for."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def synchronize(self) -> None:
        self.log.append("waited")


def test_a_fill_waits_for_the_recorded_reader_before_writing() -> None:
    log: list[str] = []

    def allocate(nbytes: int) -> np.ndarray:
        log.append("allocated")
        return np.empty(nbytes, dtype=np.uint8)

    batch = make_batch([50] * 4)
    block = RankBlock(allocate=allocate)
    first = block.fill(batch, np.arange(4))
    tokens = first.columns["tokens"].values
    block.record(FakeEvent(log))
    original = tokens.copy()
    log.append("reading")
    np.testing.assert_array_equal(tokens, original)  # untouched until the next fill
    block.fill(batch, np.array([3, 2, 1, 0]))
    assert log == ["allocated", "reading", "waited"]
    block.fill(batch, np.arange(4))
    assert log == ["allocated", "reading", "waited"]  # waited once per record


def test_bad_arguments() -> None:
    with raises_facts(OptionTypeError, key="allocate"):
        RankBlock(allocate=3)  # type: ignore[arg-type]
    with raises_facts(OptionError, key="threads", mistake="option_value"):
        RankBlock(threads=0)
    for allocate in (
        lambda n: np.empty(n, dtype=np.float32),
        bytearray,  # not a numpy array
        lambda n: np.frombuffer(bytes(n), np.uint8),  # read-only
        lambda n: np.empty(2 * n, dtype=np.uint8)[::2],  # not contiguous
    ):
        block = RankBlock(allocate=allocate)
        with raises_facts(OptionError, key="allocate"):
            block.fill(make_batch([3]), [0])
        assert (block.capacity, block.allocations) == (0, 0)  # the bad buffer is not adopted
    with raises_facts(SchemaTypeError, key="source", mistake="data_type"):  # was OptionTypeError
        RankBlock().fill({"tokens": [[1]]}, [0])  # type: ignore[arg-type]
    with raises_facts(SchemaTypeError, key="source", mistake="data_type"):
        RankBlock().fill(None)  # type: ignore[arg-type]
    with raises_facts(OptionError, key="rows", got="5"):
        RankBlock().fill(make_batch([3]), [5])
    with raises_facts(OptionTypeError, key="event"):
        RankBlock().record(object())  # type: ignore[arg-type]


@pytest.mark.parametrize("rows", [[5, 0, 3], [2, 3, 4], [], [6, 6, 1, 2]])
def test_a_list_per_token_holds_what_the_take_gives(rows: list[int]) -> None:
    config = RolloutConfig(samples=7, response_mean=6.0, response_cap=12, seed=9, sampling_top_k=5)
    batch = RolloutBatch.from_train_data(make_train_data(config))
    for few in (4096, 0):  # a rank's offsets summed by Python, then by numpy
        with mock.patch.object(block_module, "_FEW", few):
            assert_same_as_take(RankBlock(), batch, np.array(rows, dtype=np.int64))


def test_rows_of_a_hand_made_plan_are_checked_as_any_rows() -> None:
    batch = make_batch([3, 4, 5])
    plan = Plan("strided", 1, 3, "hand-made", (np.array([-1, 1]),))
    with raises_facts(OptionError, key="rows", got="-1"):
        RankBlock().fill(batch.with_plan(plan), plan.partitions[0])


def test_close_while_another_thread_fills() -> None:
    batch = make_batch([50] * 64)
    block = RankBlock(threads=4, parallel_bytes=0)
    failures: list[BaseException] = []

    def fill() -> None:
        try:
            for _ in range(200):
                block.fill(batch, np.arange(64)[::-1])
        except BaseException as exc:  # any error is the failure
            failures.append(exc)

    filler = threading.Thread(target=fill)
    filler.start()
    while filler.is_alive():
        block.close()
    filler.join()
    block.close()
    assert failures == []
