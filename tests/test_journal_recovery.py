"""Recovery changes the folder only once it has replayed everything: a journal written anew takes
its place atomically, a step's dump is checked before its journal goes, salvage reports places of
the file kept aside."""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import arrow_split._journal as journal_module
from arrow_split import JournalError, RolloutBatch, RolloutBatchBuilder
from tests.error_facts import raises_facts
from tests.test_journal_damage import _group, _journal

DATA = Path(__file__).resolve().parent / "data"
_FRAME_V1 = struct.Struct("<4sQI")  # docs/journal.md: format 1's magic, length, CRC-32
_META_KEY = b"arrow_split.journal"


def _files(folder: Path) -> dict[str, bytes]:
    """Every file of the folder and its bytes (the lock file aside: recovery takes it)."""
    return {
        path.name: path.read_bytes()
        for path in sorted(folder.iterdir())
        if path.name != "journal.lock"
    }


# -- salvage when no group record is whole


@pytest.mark.parametrize("how", ["header-only", "after-finish", "last-bytes-flipped"])
def test_salvage_when_no_group_record_is_whole(tmp_path: Path, how: str) -> None:
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    if how != "header-only":
        builder.extend(_group(0))
    if how == "after-finish":  # the normal state after `finish()`: the next step's header only
        builder.finish()
    builder.close()
    path = tmp_path / f"step-{int(how == 'after-finish'):06d}.journal"
    data = bytearray(path.read_bytes())
    if how == "last-bytes-flipped":  # the one group record's payload check fails
        data[-2:] = bytes(byte ^ 0xFF for byte in data[-2:])
        path.write_bytes(bytes(data))
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    assert len(salvaged) == 0
    if how == "last-bytes-flipped":
        kept = Path(f"{path}.damaged")
        assert kept.read_bytes() == bytes(data)
        assert [damage.path for damage in salvaged.salvaged] == [str(kept)]
    else:
        assert salvaged.salvaged == ()
    salvaged.close()
    again = RolloutBatchBuilder.recover(tmp_path)  # the folder still holds the step's journal
    assert len(again) == 0
    again.close()


def test_salvage_names_the_file_kept_aside_and_a_last_records_whole_extent(
    tmp_path: Path,
) -> None:
    from arrow_split._journal_content import global_record
    from arrow_split.schema import KNOWN_COLUMNS

    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.append({"tokens": [1, 2]})
    spec = KNOWN_COLUMNS["dynamic_global_batch_size"]
    assert builder._journal is not None
    builder._journal.write("global", global_record(spec.name, spec, -3), [])  # breaks a rule
    builder.close()
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    (damage,) = salvaged.salvaged
    kept = tmp_path / "step-000000.journal.damaged"
    assert damage.path == str(kept)  # the file its offsets refer to
    assert damage.offset < damage.offset + damage.size == kept.stat().st_size
    salvaged.close()


# -- a journal written anew takes the old one's place only once it is whole


def _v1_with_a_bad_group(data: bytes) -> bytes:
    """``tests/data/journal_v1``'s bytes with its second group naming a column it lacks."""
    payloads, at = [], 0
    while at < len(data):
        _, length, _ = _FRAME_V1.unpack_from(data, at)
        payloads.append(data[at + _FRAME_V1.size : at + _FRAME_V1.size + length])
        at += _FRAME_V1.size + length
    reader = pa.ipc.open_stream(pa.py_buffer(payloads[2]))
    record_batch = reader.read_next_batch()
    meta = json.loads(reader.schema.metadata[_META_KEY])
    assert meta["kind"] == "group"
    meta["sample_keys"].append("no_such_column")
    schema = record_batch.schema.with_metadata({_META_KEY: json.dumps(meta).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(record_batch.replace_schema_metadata(schema.metadata))
    payloads[2] = sink.getvalue().to_pybytes()
    return b"".join(_FRAME_V1.pack(b"ASJ1", len(p), zlib.crc32(p)) + p for p in payloads)


def test_a_format_1_journal_with_a_bad_record_is_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "step-000000.journal"
    path.write_bytes(_v1_with_a_bad_group((DATA / "journal_v1" / path.name).read_bytes()))
    before = _files(tmp_path)
    for _ in range(2):  # refused again: no partial journal was left to accept
        with raises_facts(JournalError, path=str(path)) as caught:
            RolloutBatchBuilder.recover(tmp_path)
        assert caught.value.offset is not None
        assert _files(tmp_path) == before


def _damaged_journal(folder: Path) -> dict[str, Any]:
    with _journal(folder).open("ab") as file:
        file.write(b"garbage " * 8)  # damage after the whole records
    return {"salvage": True}


def _format_1_journal(folder: Path) -> dict[str, Any]:
    shutil.copytree(DATA / "journal_v1", folder)
    return {}


@pytest.mark.parametrize("failing", ["write", "rename"])
@pytest.mark.parametrize(
    ("journal", "samples"), [(_damaged_journal, 6), (_format_1_journal, 3)], ids=["salvage", "v1"]
)
def test_a_failure_while_writing_a_journal_anew_leaves_the_folder_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, journal: Any, samples: int, failing: str
) -> None:
    folder = tmp_path / "journal"
    arguments = journal(folder)
    before = _files(folder)
    calls = []
    write_record, replace = journal_module.write_record, os.replace

    def full_disk(*args: Any) -> None:
        calls.append(args)
        if len(calls) == 3:  # the header and one record written, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_record(*args)

    def no_rename(*args: Any) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    if failing == "write":
        monkeypatch.setattr(journal_module, "write_record", full_disk)
    else:
        monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(JournalError) as caught:
        RolloutBatchBuilder.recover(folder, **arguments)
    monkeypatch.setattr(os, "replace", replace)
    assert caught.value.errno == (errno.ENOSPC if failing == "write" else errno.EIO)
    assert _files(folder) == before  # no new file, none kept aside, the journal's bytes
    monkeypatch.undo()
    recovered = RolloutBatchBuilder.recover(folder, **arguments)
    assert len(recovered) == samples
    recovered.close()
    assert len(RolloutBatchBuilder.recover(folder)) == samples  # written anew, whole


# -- a step is finished only when its dump is one


@pytest.mark.parametrize("dump", ["not a dump", "another batch"])
def test_a_dump_that_is_not_the_steps_keeps_its_journal(tmp_path: Path, dump: str) -> None:
    _journal(tmp_path)
    path = tmp_path / "step-000000.arrow"
    if dump == "not a dump":
        path.write_bytes(b"not a dump")
    else:
        RolloutBatch.from_train_data(_group(0, 1)).write(path)
    before = _files(tmp_path)
    with raises_facts(JournalError, path=str(path)):
        RolloutBatchBuilder.recover(tmp_path)
    with raises_facts(JournalError, path=str(path)):
        RolloutBatchBuilder(journal=tmp_path)
    assert _files(tmp_path) == before
    path.unlink()
    recovered = RolloutBatchBuilder.recover(tmp_path)
    assert len(recovered) == 6
    recovered.close()


def test_a_finished_steps_journal_left_beside_its_dump_is_removed(tmp_path: Path) -> None:
    path = _journal(tmp_path)
    journal = path.read_bytes()
    builder = RolloutBatchBuilder.recover(tmp_path)
    builder.finish()
    builder.close()
    path.write_bytes(journal)  # as a crash between the dump and the journal's removal leaves it
    recovered = RolloutBatchBuilder.recover(tmp_path)
    assert len(recovered) == 0
    assert not path.exists()
    assert len(RolloutBatch.read(tmp_path / "step-000000.arrow")) == 6
    recovered.close()


# -- a crafted record whose column the library never makes


def test_a_tensor_column_with_an_axis_of_size_0_is_damage(tmp_path: Path) -> None:
    from arrow_split._journal_scan import scan_file, write_record
    from arrow_split._record import encode_record

    builder = RolloutBatchBuilder(journal=tmp_path)
    builder.extend(
        {
            "tokens": [[1, 2, 3]],
            "response_lengths": [1],
            "rollout_routed_experts": [np.zeros((2, 2, 3), np.int32)],
        }
    )
    builder.close()
    path = tmp_path / "step-000000.journal"
    scan = scan_file(str(path))
    record = scan.records[1]
    arrays = list(record.arrays)
    column = record.meta["names"].index("rollout_routed_experts")
    empty = pa.Array.from_buffers(  # list_size 0: a shape the encoder refuses
        pa.list_(pa.int32(), 0), 4, [None], children=[pa.array([], pa.int32())]
    )
    rows = pa.FixedSizeListArray.from_arrays(pa.array([[]] * 4, empty.type), 2)
    arrays[column] = pa.LargeListArray.from_arrays(pa.array([0, 2], pa.int64()), rows)
    with path.open("r+b") as file:  # well framed, its checks right
        file.truncate(record.offset)
        file.seek(record.offset)
        file.flush()
        write_record(file.fileno(), scan.journal_id, 1, encode_record("group", record.meta, arrays))
    with raises_facts(JournalError, path=str(path), offset=record.offset):
        RolloutBatchBuilder.recover(tmp_path)
    salvaged = RolloutBatchBuilder.recover(tmp_path, salvage=True)
    assert len(salvaged) == 0
    assert [damage.offset for damage in salvaged.salvaged] == [record.offset]
    salvaged.close()
