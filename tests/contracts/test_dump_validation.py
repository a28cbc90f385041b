"""Dumps are input: a self-consistent file whose content breaks a rule is refused on read."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from arrow_split import DumpError, OptionTypeError, RolloutBatch, SchemaTypeError
from arrow_split.batch import _dump
from tests.error_facts import assert_facts, raises_facts


def _good() -> RolloutBatch:
    return RolloutBatch.from_train_data(
        {
            "tokens": [[1, 2, 3], [4, 5], [6, 7, 8, 9]],
            "response_lengths": [2, 1, 3],
            "loss_masks": [[1, 0], [1], [1, 1, 0]],
            "rollout_log_probs": [[-0.1, -0.2], [-0.3], [-0.4, -0.5, -0.6]],
            "rewards": [1.0, 0.0, 0.5],
            "truncated": [False, True, False],
            "raw_reward": [1.0, 0.0, 0.5],
            "dynamic_global_batch_size": 3,
        }
    )


def _with_column(batch: RolloutBatch, name: str, array: pa.Array) -> RolloutBatch:
    record_batch = batch.record_batch
    index = record_batch.schema.get_field_index(name)
    columns = list(record_batch.columns)
    columns[index] = array
    schema = record_batch.schema.set(index, record_batch.schema.field(index).with_nullable(True))
    return RolloutBatch(
        pa.RecordBatch.from_arrays(columns, schema=schema), batch.specs, batch.batch_globals
    )


def _with_global(batch: RolloutBatch, key: str, value: object) -> RolloutBatch:
    return RolloutBatch(batch.record_batch, batch.specs, {**batch.batch_globals, key: value})


def _list(values: list[Any], value_type: pa.DataType) -> pa.Array:
    return pa.array(values, type=pa.large_list(value_type))


BROKEN: dict[str, tuple[Callable[[RolloutBatch], RolloutBatch], dict[str, Any]]] = {
    "loss-mask-of-2": (
        lambda b: _with_column(b, "loss_masks", _list([[1, 2], [1], [1, 1, 0]], pa.uint8())),
        {"key": "loss_masks", "sample": 0, "position": 1},
    ),
    "per-token-one-short": (
        lambda b: _with_column(
            b, "rollout_log_probs", _list([[-0.1, -0.2], [-0.3], [-0.4]], pa.float32())
        ),
        {"key": "rollout_log_probs", "sample": 2},
    ),
    "response-longer-than-tokens": (
        lambda b: _with_column(b, "response_lengths", pa.array([2, 9, 3], type=pa.int64())),
        {"key": "response_lengths", "sample": 1},
    ),
    "nulls-in-truncated": (
        lambda b: _with_column(b, "truncated", pa.array([False, None, False])),
        {"key": "truncated", "sample": 1},
    ),
    "raw-reward-one-short": (
        lambda b: _with_global(b, "raw_reward", [1.0, 0.0]),
        {"key": "raw_reward"},
    ),
    "raw-reward-a-string": (
        lambda b: _with_global(b, "raw_reward", "1.0"),
        {"key": "raw_reward"},
    ),
    "negative-dynamic-global-batch-size": (
        lambda b: _with_global(b, "dynamic_global_batch_size", -3),
        {"key": "dynamic_global_batch_size", "got": "-3"},
    ),
}


def _write_unchecked(batch: RolloutBatch, path: Path) -> None:
    """Write as a broken producer would: past the writer's own refusal of a batch's part."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_dump, "_refuse_a_part", lambda *parts: None)
        batch.write(path)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_dumps_are_validated_on_read(case: str, tmp_path: Path) -> None:
    breaker, facts = BROKEN[case]  # the facts of the rule's own error, the cause
    try:
        broken = breaker(_good())
    except Exception as exc:  # the constructor itself may refuse it: then no file can hold it
        pytest.skip(f"the batch cannot even be built: {exc}")
    path = tmp_path / "broken.arrow"
    _write_unchecked(broken, path)
    with raises_facts(DumpError, key=facts["key"], path=str(path)) as caught:
        RolloutBatch.read(path)
    assert_facts(caught.value.__cause__, facts)
    # validate=False reads it as it is, for files one trusts
    assert RolloutBatch.read(path, validate=False).num_samples == 3


def test_a_valid_dump_reads_with_validation(tmp_path: Path) -> None:
    batch = _good()
    batch.write(tmp_path / "good.arrow")
    assert RolloutBatch.read(tmp_path / "good.arrow").equals(batch)


def test_validate_is_a_flag(tmp_path: Path) -> None:
    _good().write(tmp_path / "good.arrow")
    with raises_facts(OptionTypeError, key="validate", mistake="flag_type"):
        RolloutBatch.read(tmp_path / "good.arrow", validate="False")  # type: ignore[arg-type]


@pytest.mark.parametrize("path", [None, 123, b"bytes.arrow"])
def test_write_to_a_path_of_the_wrong_type_is_typed(path: object) -> None:
    with raises_facts(SchemaTypeError, key="path", mistake="path_type"):
        _good().write(path)  # type: ignore[arg-type]


def test_write_to_a_path_with_a_nul_is_typed(tmp_path: Path) -> None:
    with raises_facts(DumpError, key="path", mistake="path_value"):
        _good().write(f"{tmp_path}/a\0b.arrow")
    with raises_facts(DumpError, key="path", mistake="path_value"):
        RolloutBatch.read(f"{tmp_path}/a\0b.arrow")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_read_only_folder_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    _good().write(folder / "dump.arrow")
    before = (folder / "dump.arrow").read_bytes()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(PermissionError):  # OS errors pass through, as open()'s do
            RolloutBatch.from_train_data({"tokens": [[1]]}).write(folder / "dump.arrow")
    finally:
        folder.chmod(stat.S_IRWXU)
    assert (folder / "dump.arrow").read_bytes() == before
    assert sorted(os.listdir(folder)) == ["dump.arrow"]


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "dump.arrow"
    _good().write(path)
    before = path.read_bytes()

    def refuse(*args: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(PermissionError):
        RolloutBatch.from_train_data({"tokens": [[1]]}).write(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["dump.arrow"]


def test_inspect_prints_a_name_with_a_newline_on_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arrow_split.__main__ import main

    good = tmp_path / "good.arrow"
    RolloutBatch.from_train_data({"tokens": [[1]]}).write(good)
    table = pa.ipc.open_file(good).read_all()
    renamed = table.rename_columns(["tok\nens"]).replace_schema_metadata(table.schema.metadata)
    path = tmp_path / "renamed.arrow"
    with pa.ipc.new_file(path, renamed.schema) as writer:
        writer.write_table(renamed)
    assert main(["inspect", str(path)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "tok\\nens" in err
