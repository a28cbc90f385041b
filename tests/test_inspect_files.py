"""`arrow-split inspect` of dumps, Parquet files and journals; miles' dashboard columns file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arrow_split
from arrow_split import DumpError, RolloutBatch, RolloutBatchBuilder, write_dashboard_columns
from arrow_split.__main__ import main
from arrow_split._dashboard import DASHBOARD_SCHEMA
from tests.error_facts import raises_facts

DATA: dict[str, Any] = {
    "tokens": [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]],
    "response_lengths": [2, 1, 3, 1],
    "loss_masks": [[1, 1], [1], [1, 0, 1], [1]],
    "rollout_log_probs": [[-0.5, -0.25], [-1.0], [-0.1, -0.2, -0.3], [-2.0]],
    "rewards": [1.0, 0.0, 0.5, 1.0],
    "sample_indices": [10, 11, 12, 13],
}


def _group(start: int, count: int) -> dict[str, Any]:
    return {key: values[start : start + count] for key, values in DATA.items()}


def test_inspect_a_journal_before_recover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    builder.extend(_group(0, 2))
    builder.extend(_group(2, 2))
    builder.set_global("dynamic_global_batch_size", 4)
    assert main(["inspect", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "step 0: unfinished, journal" in out
    assert "2 groups, 4 samples" in out
    assert "columns: tokens, response_lengths, loss_masks, rollout_log_probs, rewards" in out
    assert "batch-global values set: dynamic_global_batch_size" in out
    assert "damage: none" in out
    assert f'RolloutBatchBuilder.recover("{tmp_path}")' in out
    builder.close()
    assert len(RolloutBatchBuilder.recover(tmp_path)) == 4  # inspect changed nothing


def test_inspect_a_journal_file_shows_its_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    builder.extend(_group(0, 2))
    builder.close()
    journal = next(tmp_path.glob("step-*.journal"))
    with journal.open("ab") as file:
        file.write(b"ASJ2" + bytes(20))  # bytes that are no whole record
    assert main(["inspect", str(journal)]) == 0
    out = capsys.readouterr().out
    assert "1 groups, 2 samples" in out
    assert "damage (1; recover() refuses, salvage=True skips it):" in out
    assert "bytes that are no frame" in out


def test_inspect_a_parquet_file_and_the_reader_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    batch = RolloutBatch.from_train_data(DATA)
    batch.to_parquet(tmp_path / "b.parquet")
    assert main(["inspect", str(tmp_path / "b.parquet"), "--dp-size", "2"]) == 0
    assert "Parquet (RolloutBatch.to_parquet)" in capsys.readouterr().out
    parquet = "a Parquet file (`RolloutBatch.to_parquet`)"
    with raises_facts(DumpError, path=str(tmp_path / "b.parquet"), got=parquet) as caught:
        RolloutBatch.read(tmp_path / "b.parquet")
    assert "RolloutBatch.read_parquet" in str(caught.value.fix)


def test_reading_a_journal_as_a_dump_points_at_recover(tmp_path: Path) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(_group(0, 2))
    builder.close()
    journal = next(tmp_path.glob("step-*.journal"))
    with raises_facts(DumpError, path=str(journal), got="a builder's journal") as caught:
        RolloutBatch.read(journal)
    assert "RolloutBatchBuilder.recover" in str(caught.value.fix)


def test_the_dashboard_columns_file_is_miles_format(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(
        {**DATA, "tokens": [t * 3 for t in DATA["tokens"]]}
        | {"response_lengths": DATA["response_lengths"]}
    )
    batch = RolloutBatch.concat([batch] * 3)  # 12 rows: two row groups of 8 and 4
    path = write_dashboard_columns(batch, tmp_path, 7)
    assert path == str(tmp_path / "dashboard_columns" / "rollout_7.parquet")
    file = pq.ParquetFile(path)
    assert file.schema_arrow == DASHBOARD_SCHEMA
    assert [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)] == [8, 4]
    table = file.read()
    assert table["sample_index"].to_pylist() == DATA["sample_indices"] * 3
    assert table["total_length"].to_pylist() == batch.total_lengths.tolist()
    assert table["loss_mask"].to_pylist()[:4] == DATA["loss_masks"]
    assert table["rollout_log_probs"].to_pylist()[:2] == [[-0.5, -0.25], [-1.0]]


def test_the_dashboard_file_of_a_batch_without_optional_keys(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    table = pq.read_table(write_dashboard_columns(batch, tmp_path, 0))
    assert table["sample_index"].to_pylist() == [0, 1]
    assert table["loss_mask"].null_count == 2
    assert table["response_length"].null_count == 2


def test_the_dashboard_refuses_values_past_int32(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1]], "sample_indices": [2**40]})
    with raises_facts(DumpError, key="sample_index", expected="int32"):
        write_dashboard_columns(batch, tmp_path, 0)
    with raises_facts(arrow_split.OptionError, key="rollout_id", mistake="option_value"):
        write_dashboard_columns(batch, tmp_path, -1)


def test_inspect_writes_the_dashboard_file_from_a_dump(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RolloutBatch.from_train_data(DATA).write(tmp_path / "d.arrow")
    argv = ["inspect", str(tmp_path / "d.arrow"), "--dashboard-columns", str(tmp_path / "out")]
    assert main([*argv, "--rollout-id", "2", "--dp-size", "2"]) == 0
    assert "wrote " in capsys.readouterr().out
    table = pq.read_table(tmp_path / "out" / "dashboard_columns" / "rollout_2.parquet")
    assert table.num_rows == 4
    assert pa.types.is_int8(table.schema.field("loss_mask").type.value_type)
    assert np.array_equal(table["response_length"].to_numpy(), DATA["response_lengths"])


def test_inspect_options_that_do_not_go_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", str(tmp_path / "d.arrow"), "--rollout-id", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: arrow-split")
    assert "--rollout-id names the dashboard file: pass --dashboard-columns DIR too" in err


def test_the_dashboard_lets_os_errors_through_and_names_its_arguments(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(DATA)
    (tmp_path / "a_file").write_text("")
    # an OS error passes through, as `write`'s does (docs/errors.md); it was a DumpError
    with pytest.raises(NotADirectoryError) as caught:
        write_dashboard_columns(batch, tmp_path / "a_file", 0)
    assert not isinstance(caught.value, arrow_split.ArrowSplitError)
    with raises_facts(arrow_split.SchemaTypeError, key="batch"):  # it had no key
        write_dashboard_columns(None, tmp_path, 0)  # type: ignore[arg-type]
    with raises_facts(arrow_split.PathError, key="folder", got="'a\\x00b'"):  # it had no `got`
        write_dashboard_columns(batch, "a\0b", 0)


def test_a_lock_file_that_names_no_holder_is_reported_so(tmp_path: Path) -> None:
    RolloutBatchBuilder(journal=tmp_path).close()
    (tmp_path / "journal.lock").write_text('{"pid": 1e999, "host": "h", "since": 0}')
    assert "lock: a lock file that names no holder" in arrow_split.describe_journal(tmp_path)


@pytest.mark.parametrize("name", ["step-000000.journal", "step-000000.journal.damaged"])
def test_inspect_a_journal_file_whose_first_byte_is_damaged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(_group(0, 2))
    builder.close()
    journal = tmp_path / "step-000000.journal"
    data = bytearray(journal.read_bytes())
    data[0] ^= 0xFF
    (tmp_path / name).write_bytes(bytes(data))
    assert main(["inspect", str(tmp_path / name)]) == 2
    assert "arrow-split inspect: JournalError: " in capsys.readouterr().err


def test_inspect_names_a_dump_that_recover_refuses(tmp_path: Path) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(_group(0, 2))
    builder.close()
    (tmp_path / "step-000000.arrow").write_bytes(b"not a dump")
    report = arrow_split.describe_journal(tmp_path)
    assert "step 0: a journal beside a dump that recover() refuses" in report
    assert "recover() refuses the folder" in report


def test_inspect_a_folder_without_a_journal_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RolloutBatch.from_train_data(DATA).to_parquet(tmp_path / "step_1.parquet")
    for folder in (tmp_path, tmp_path / "empty"):  # Parquet files only; nothing
        folder.mkdir(exist_ok=True)
        with raises_facts(arrow_split.JournalError, path=str(folder)):
            arrow_split.describe_journal(folder)
        assert main(["inspect", str(folder)]) == 2  # as for any path it cannot read
        assert "holds no journal" in capsys.readouterr().err
