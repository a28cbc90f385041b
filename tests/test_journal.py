"""The builder's journal: recovery after a crash, torn records, replays, the step's dump."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from arrow_split import (
    DuplicateSampleError,
    JournalError,
    RolloutBatch,
    RolloutBatchBuilder,
    SchemaError,
)
from arrow_split.testing import assert_batches_equal
from tests.error_facts import assert_facts, raises_facts


def _group(first: int, count: int = 2) -> dict[str, list[object]]:
    return {
        "tokens": [[first + i, 2, 3] for i in range(count)],
        "response_lengths": [1] * count,
        "rewards": [float(i) for i in range(count)],
        "sample_indices": list(range(first, first + count)),
        "metadata": ["a", {"b": first}][:count] + [None] * max(0, count - 2),
    }


def _expected(groups: int) -> RolloutBatch:
    builder = RolloutBatchBuilder(identity="sample_indices")
    for index in range(groups):
        builder.extend(_group(2 * index))
    builder.set_global("dynamic_global_batch_size", 2 * groups)
    return builder.finish()


def _built(folder: Path, groups: int) -> RolloutBatchBuilder:
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    for index in range(groups):
        builder.extend(_group(2 * index))
    builder.set_global("dynamic_global_batch_size", 2 * groups)
    return builder


def test_recover_rebuilds_the_builder(tmp_path: Path) -> None:
    builder = _built(tmp_path, 3)
    builder.close()
    recovered = RolloutBatchBuilder.recover(tmp_path)
    assert len(recovered) == len(builder) == 6
    expected = _expected(3)
    assert_batches_equal(recovered.finish(), expected)


def test_a_torn_last_record_is_dropped_whole(tmp_path: Path) -> None:
    builder = _built(tmp_path, 3)
    builder.close()
    path = tmp_path / "step-000000.journal"
    size = path.stat().st_size
    for cut in (1, 17, 100):
        with open(path, "r+b") as file:
            file.truncate(size - cut)
        recovered = RolloutBatchBuilder.recover(tmp_path)
        assert len(recovered) == 6  # only the set_global record is torn
        recovered.extend(_group(100))
        recovered.close()
        again = RolloutBatchBuilder.recover(tmp_path)
        assert len(again) == 8
        again.close()
        size = path.stat().st_size
    del builder


def test_replays_are_skipped_or_refused(tmp_path: Path) -> None:
    builder = _built(tmp_path, 2)
    assert builder.extend(_group(2)) == 0
    assert builder.extend(_group(3)) == 1  # sample 3 is a replay, 4 is new
    assert len(builder) == 5
    builder.close()
    strict = RolloutBatchBuilder.recover(tmp_path, on_duplicate="error")
    with pytest.raises(DuplicateSampleError) as caught:
        strict.extend(_group(2))
    assert_facts(caught.value, {"key": "sample_indices", "sample": 5})
    assert len(strict) == 5


def test_finish_writes_the_dump_and_starts_the_next_step(tmp_path: Path) -> None:
    builder = _built(tmp_path, 2)
    batch = builder.finish()
    builder.close()
    assert sorted(os.listdir(tmp_path)) == [
        "journal.lock",
        "step-000000.arrow",
        "step-000001.journal",
    ]
    batch.write(tmp_path / "expected.arrow")
    dumped = (tmp_path / "step-000000.arrow").read_bytes()
    assert dumped == (tmp_path / "expected.arrow").read_bytes()
    assert_batches_equal(RolloutBatch.read(tmp_path / "step-000000.arrow"), batch)
    assert len(RolloutBatchBuilder.recover(tmp_path)) == 0


def test_an_unfinished_step_is_not_overwritten(tmp_path: Path) -> None:
    _built(tmp_path, 1).close()
    with raises_facts(JournalError, path=str(tmp_path / "step-000000.journal"), errno=None):
        RolloutBatchBuilder(journal=tmp_path)
    with raises_facts(JournalError, path=str(tmp_path / "missing"), errno=errno.ENOENT):
        RolloutBatchBuilder.recover(tmp_path / "missing")


def test_a_reused_builder_keeps_no_narrow_storage_of_the_step_before() -> None:
    builder = RolloutBatchBuilder()
    wide = {"tokens": [[1, 2]], "response_lengths": [1], "rollout_routed_experts": [[[300]]]}
    narrow = {"tokens": [[1, 2]], "response_lengths": [1], "rollout_routed_experts": [[[3]]]}
    builder.extend(wide)
    builder.finish()
    builder.extend(narrow)
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(narrow))


@pytest.mark.parametrize("value", [memoryview(b"ab"), [memoryview(b"a")], ["0.5"], 3.0])
def test_a_per_sample_global_that_is_not_a_list_of_numbers_is_refused_before_the_journal(
    tmp_path: Path, value: object
) -> None:
    from arrow_split.errors import ColumnTypeError, SchemaError

    builder = _built(tmp_path, 2)
    before = sorted(os.listdir(tmp_path))
    with pytest.raises((SchemaError, ColumnTypeError)) as caught:
        builder.set_global("raw_reward", value)
    assert caught.value.key == "raw_reward"  # a list's bad item also names its sample
    assert sorted(os.listdir(tmp_path)) == before
    builder.set_global("raw_reward", [1.0] * 4)
    assert len(builder.finish()) == 4


_EMPTY: dict[str, list[object]] = {key: [] for key in _group(0)}


@pytest.mark.parametrize(
    "calls",
    [
        [_group(0), _EMPTY, _group(2)],
        [_EMPTY, _group(0), _EMPTY],
        [_EMPTY],
    ],
    ids=["between", "first-and-last", "only"],
)
def test_an_empty_call_is_recovered_as_it_was_made(
    tmp_path: Path, calls: list[dict[str, list[object]]]
) -> None:
    # an empty `extend` (a filter dropped a whole group) fixes the step's keys as any first call
    # does: its record holds no rows, and recovery replays it so (it was refused as damage)
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    in_memory = RolloutBatchBuilder(identity="sample_indices")
    for call in calls:
        assert builder.extend(call) == in_memory.extend(call)
    builder.close()
    recovered = RolloutBatchBuilder.recover(tmp_path)
    assert len(recovered) == len(in_memory)
    for one in (recovered, in_memory):
        with raises_facts(SchemaError, key="rewards", sample=len(one)):  # keys fixed by it
            one.append({"tokens": [9, 9], "response_lengths": 1})
    assert_batches_equal(recovered.finish(), in_memory.finish())
    recovered.close()
