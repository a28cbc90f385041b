"""The one place that pins the wording of messages, and the table of mistake kinds.

Other tests assert an error's class and fields. Here a fixed set of errors is rendered and
compared with ``tests/data/error_messages.json``; after a deliberate change of wording, rewrite
the file with ``ARROW_SPLIT_UPDATE_MESSAGES=1 pytest tests/test_error_messages.py`` and review
its diff.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import arrow_split
from arrow_split import (
    ArrowSplitError,
    ColumnSpec,
    ColumnTypeError,
    RolloutBatch,
    RolloutBatchBuilder,
    Shard,
    shard_for_rank,
    split_train_data_by_dp_raw,
)
from arrow_split import errors as errors_module
from arrow_split.block import RankBlock
from arrow_split.compat import miles
from arrow_split.errors import MISTAKES, mistake
from arrow_split.plan import plan_partitions
from arrow_split.routing import ParallelPlace, expert_id_dtype, take_expert_slice
from arrow_split.schema import ROUTED_EXPERTS
from tests.test_errors import BAD_TRAIN_DATA

GOLDEN = Path(__file__).parent / "data" / "error_messages.json"
DOCS = Path(__file__).parents[1] / "docs" / "errors.md"


def _raised(call: Callable[[], object]) -> ArrowSplitError:
    with pytest.raises(ArrowSplitError) as caught:
        call()
    return caught.value


def _batch() -> RolloutBatch:
    return RolloutBatch.from_train_data({"tokens": [[1, 2], [3], [4, 5, 6], [7]]})


def _builder_error() -> object:
    builder = RolloutBatchBuilder(specs=[ColumnSpec("sample 1", "per_sample_scalar", pa.int64())])
    builder.extend({"tokens": [[1], [2]], "sample 1": [1, 2]})
    return builder.extend({"tokens": [[3], [4]], "sample 1": [3, 0.5]})


def _duplicate_within_a_call() -> object:
    builder = RolloutBatchBuilder(identity="sample_indices", on_duplicate="error")
    builder.extend({"tokens": [[1], [2]], "sample_indices": [0, 1]})
    return builder.extend({"tokens": [[3], [4], [5]], "sample_indices": [7, 8, 7]})


def _rendered(tmp_path: Path) -> dict[str, str]:
    """Every message of the fixed set, by a stable name."""
    messages = {}
    for param in BAD_TRAIN_DATA:
        data = param.values[0]
        messages[f"train_data/{param.id}"] = str(
            _raised(lambda data=data: RolloutBatch.from_train_data(data))
        )
    batch = _batch()
    calls: dict[str, Callable[[], object]] = {
        "builder/shifted-sample": _builder_error,
        "builder/duplicate-within-a-call": _duplicate_within_a_call,
        "door/balance_data-str": lambda: split_train_data_by_dp_raw(batch, 2, balance_data="no"),
        "door/dp_size-str": lambda: split_train_data_by_dp_raw(batch, "2", balance_data=False),
        "door/dp_size-huge": lambda: split_train_data_by_dp_raw(batch, 2**20, balance_data=False),
        "door/dp_rank-out-of-range": lambda: shard_for_rank(batch, 2, 2, balance_data=False),
        "door/resplit-int": lambda: shard_for_rank(batch, 0, 2, balance_data=False, resplit=1),
        "door/write-path-int": lambda: batch.write(3),  # type: ignore[arg-type]
        "door/write-path-nul": lambda: batch.write("a\0b"),
        "door/write-compression": lambda: batch.write(
            str(tmp_path / "x"),
            compression="gzip",  # type: ignore[arg-type]
        ),
        "door/journal-path-int": lambda: RolloutBatchBuilder(journal=3),  # type: ignore[arg-type]
        "door/balanced-not-divisible": lambda: plan_partitions([1, 2, 3], 2, balance_data=True),
    }
    for name, call in calls.items():
        messages[name] = str(_raised(call))
    located = mistake("value_range", "`x` holds nan", key="x", sample=2, position=1, item=0)
    messages["render/location"] = str(located)
    messages["render/file"] = str(
        mistake("journal", "bad record", path="/j/step-000001.journal", offset=64)
    )
    messages["render/expected-got"] = str(
        mistake("option_type", key="sync", expected="a str", got="int 3", fix="pass 'step'")
    )
    return messages


def test_rendered_messages_match_the_golden_file(tmp_path: Path) -> None:
    messages = _rendered(tmp_path)
    messages = {
        name: text.replace(str(tmp_path), "<tmp>") for name, text in sorted(messages.items())
    }
    if os.environ.get("ARROW_SPLIT_UPDATE_MESSAGES"):
        GOLDEN.write_text(json.dumps(messages, indent=1, ensure_ascii=False) + "\n")
    assert json.loads(GOLDEN.read_text()) == messages


def test_a_key_named_like_a_location_is_not_relocated() -> None:
    error = _raised(_builder_error)
    assert isinstance(error, ColumnTypeError)
    assert (error.key, error.sample) == ("sample 1", 3)
    assert "`sample 1`" in str(error)
    assert "`sample 3`" not in str(error)


def test_shifted_is_arithmetic_on_the_sample() -> None:
    error = mistake("ragged_length", "`loss_masks` has 2 values", key="loss_masks", sample=1)
    moved = error.shifted(5)
    assert type(moved) is type(error)
    assert moved is not error
    assert (moved.sample, moved.key, moved.message) == (6, "loss_masks", error.message)
    assert error.sample == 1  # the original is left as it was
    assert mistake("option_type", key="x").shifted(5).sample is None


def test_an_error_keeps_its_fields_through_pickle() -> None:
    error = arrow_split.JournalError("bad", 5, key="k", path="/a", offset=3)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.errno, copy.facts, str(copy)) == (5, error.facts, str(error))


def test_a_message_alone_is_an_error_without_fields() -> None:
    error = arrow_split.TransportError("the object store lost shard 3")
    assert str(error) == "the object store lost shard 3"
    assert error.facts == {}
    assert repr(error) == "TransportError('the object store lost shard 3')"
    assert str(arrow_split.OptionError("bad")) == "bad"


def test_every_class_is_in_the_table_and_the_table_is_documented() -> None:
    classes = {cls for cls, _ in MISTAKES.values()}
    public = {
        getattr(errors_module, name)
        for name in errors_module.__all__
        if isinstance(getattr(errors_module, name), type)
        and issubclass(getattr(errors_module, name), ArrowSplitError)
    }
    assert public - classes == {ArrowSplitError}
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \| (.+) \|$", DOCS.read_text(), flags=re.MULTILINE)
    assert rows == [(name, cls.__name__, what) for name, (cls, what) in MISTAKES.items()]


def _door_calls(tmp_path: Path) -> list[tuple[str, Callable[[], object]]]:
    batch = _batch()
    plan = batch.make_plan(2, balance_data=False)
    config = {"dp_size": "2", "micro_batch_size": 1}
    args = type("Args", (), {"balance_data": False, "global_batch_size": 4})()
    return [
        ("flag_type", lambda: shard_for_rank(batch, 0, 2, balance_data=False, resplit=1)),
        ("flag_type", lambda: shard_for_rank(batch, 0, 2, balance_data=False, pad_to_dp=1)),
        ("flag_type", lambda: split_train_data_by_dp_raw(batch, 2, balance_data=1)),
        ("flag_type", lambda: RolloutBatch.read(str(tmp_path / "x"), validate=1)),
        ("plan_type", lambda: arrow_split.take(batch, plan, "0")),
        (
            "plan_type",
            lambda: Shard(
                batch, partition=np.arange(4), batch_total_lengths=batch.total_lengths, dp_rank="0"
            ),
        ),
        ("plan_value", lambda: arrow_split.take(batch, plan, 2)),
        ("plan_type", lambda: shard_for_rank(batch, 0, "2", balance_data=False)),
        ("plan_type", lambda: miles.can_schedule_on_rollout_side(args, {"tokens": [[1]]}, config)),
        ("path_type", lambda: batch.write(3)),
        ("path_type", lambda: RolloutBatch.read(3)),
        ("path_type", lambda: RolloutBatchBuilder(journal=3)),
        ("path_value", lambda: batch.write(str(tmp_path / "a\0b"))),
        ("path_value", lambda: RolloutBatchBuilder(journal="a\0b")),
        ("option_value", lambda: batch.write(str(tmp_path / "y"), compression="gzip")),
        ("option_type", lambda: batch.write(str(tmp_path / "y"), compression=3)),
        *_rows_doors(),
    ]


def _rows_doors() -> list[tuple[str, Callable[[], object]]]:
    """Every door that takes rows of a batch: the same mistakes, the same classes."""
    batch = RolloutBatch.from_train_data(
        {"tokens": [[1, 2, 3], [4, 5, 6]], ROUTED_EXPERTS: [np.zeros((2, 4, 2), int)] * 2}
    )
    place = ParallelPlace()
    doors: list[Callable[[object, object], object]] = [
        arrow_split.take_rows,  # type: ignore[list-item]
        RankBlock().fill,  # type: ignore[list-item]
        lambda source, rows: take_expert_slice(source, place, rows),  # type: ignore[arg-type]
    ]
    calls: list[tuple[str, Callable[[], object]]] = []
    for door in doors:
        calls += [
            ("option_type", lambda door=door: door(batch, ["x"])),
            ("option_type", lambda door=door: door(batch, [0.0])),
            ("option_type", lambda door=door: door(batch, [True])),
            ("option_type", lambda door=door: door(batch, np.zeros((1, 1), np.int64))),
            ("option_value", lambda door=door: door(batch, [5])),
            ("option_value", lambda door=door: door(batch, np.array([-1]))),
            ("option_value", lambda door=door: door(batch, np.array([2**63], np.uint64))),
            ("data_type", lambda door=door: door(None, [0])),
        ]
    shard = arrow_split.take_rows(batch, [1, 0])
    return [
        *calls,
        ("option_value", lambda: RankBlock().fill(shard, [2])),  # a shard's own rows
        ("option_value", lambda: arrow_split.take_rows(shard, [2])),
        ("data_type", lambda: arrow_split.pad_to_dp(None, 2)),  # type: ignore[arg-type]
        ("option_type", lambda: take_expert_slice(batch, place, column=1)),  # type: ignore[arg-type]
        ("option_value", lambda: expert_id_dtype(2**40)),
        ("option_value", lambda: RankBlock(threads=0)),
    ]


def test_the_same_mistake_gets_the_same_class_at_every_door(tmp_path: Path) -> None:
    for name, call in _door_calls(tmp_path):
        error = _raised(call)
        expected, _ = MISTAKES[name]
        assert type(error) is expected, (name, repr(error))
        assert error.mistake == name, (name, repr(error))
