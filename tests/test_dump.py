"""Rollout dumps: write, map back without a copy, Parquet, summaries, and every bad file.

The checked-in dump ``tests/data/rollout_v1.arrow`` is the batch of :func:`v1_batch`, written once
with arrow_split 0.1.0 (dump format 1) from the repository root by::

    PYTHONPATH=. python -c "from tests.test_dump import v1_batch; \\
        v1_batch(metadata='pickle').write('tests/data/rollout_v1.arrow')"

Never write it again: :func:`test_the_v1_dump_still_reads` checks that this version, and every
later one, reads it back equal to the batch rebuilt from the same seeded values.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrow_split
from arrow_split import (
    ColumnSpec,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanTypeError,
    RolloutBatch,
    SchemaTypeError,
    plan_fingerprint,
    split_train_data_by_dp_raw,
)
from arrow_split.batch import _dump
from arrow_split.batch._dump import DumpInfo
from arrow_split.errors import DumpError
from arrow_split.schema import ObjectCodec
from arrow_split.summary import inspect_path, summarize
from arrow_split.testing.strategies import train_data
from tests.error_facts import raises_facts
from tests.reference_split import normalize

V1_DUMP = Path(__file__).parent / "data" / "rollout_v1.arrow"


# The dump functions as users reach them: methods of the batch.
def write_batch(batch: RolloutBatch, path: Any, **options: Any) -> None:
    batch.write(path, **options)


def read_batch(path: Any, **options: Any) -> RolloutBatch:
    return RolloutBatch.read(path, **options)


def read_dump(path: Any, **options: Any) -> tuple[RolloutBatch, DumpInfo]:
    parts, info = _dump.read_dump(path, **options)
    return RolloutBatch(*parts), info


def write_parquet(batch: RolloutBatch, path: Any) -> None:
    batch.to_parquet(path)


def read_parquet(path: Any) -> RolloutBatch:
    return RolloutBatch(*_dump.read_parquet(path))


ADVANTAGES = ColumnSpec("advantages", "per_token", pa.float32(), length="response")


def v1_batch(metadata: ObjectCodec = "json") -> RolloutBatch:
    """Six samples with every column kind and a declared column, from a seeded generator.

    ``metadata`` is how the ``metadata`` column is stored (version 1 of the dump pickled it).
    """
    rng = np.random.default_rng(20260101)
    totals = [5, 9, 3, 12, 7, 8]
    responses = [int(rng.integers(1, total)) for total in totals]
    train_data = {
        "tokens": [rng.integers(0, 50_000, total).tolist() for total in totals],
        "response_lengths": responses,
        "loss_masks": [rng.integers(0, 2, size).tolist() for size in responses],
        "rollout_log_probs": [_float32s(rng, size) for size in responses],
        "teacher_log_probs": [_float32s(rng, size) for size in responses],
        "advantages": [_float32s(rng, size) for size in responses],
        "rollout_routed_experts": [
            rng.integers(0, 64, (total - 1, 2, 2)).astype(np.int32) for total in totals
        ],
        "rewards": rng.random(len(totals)).tolist(),
        "truncated": [bool(flag) for flag in rng.integers(0, 2, len(totals))],
        "sample_indices": list(range(100, 100 + len(totals))),
        "rollout_ids": [7] * len(totals),
        "prompt": [f"question {index}: é?" for index in range(len(totals))],
        "metadata": [{"turn": index, "tags": ["a", "b"]} for index in range(len(totals))],
        "weight_versions": [["w1"], ["w1", "w2"], [], ["w2"], ["w2"], ["w3"]],
        "raw_reward": rng.random(len(totals)).tolist(),
        "dynamic_global_batch_size": 6,
        "step_slots": [0, 1],
        "step_adapter_names": ["base", "lora-a"],
        "prompt_group_sizes": [2, 2, 2],
    }
    metadata_spec = ColumnSpec("metadata", "per_sample_object", codec=metadata)
    return RolloutBatch.from_train_data(train_data, specs=[ADVANTAGES, metadata_spec])


def _same_train_data(left: dict[str, Any], right: dict[str, Any]) -> bool:
    return left.keys() == right.keys() and all(
        normalize(left[key]) == normalize(right[key]) for key in left
    )


def _float32s(rng: np.random.Generator, size: int) -> list[float]:
    return (-rng.random(size)).astype(np.float32).tolist()


def _big_batch(samples: int = 256, tokens: int = 4096) -> RolloutBatch:
    rng = np.random.default_rng(7)
    response = tokens // 2
    return RolloutBatch.from_train_data(
        {
            "tokens": [rng.integers(0, 50_000, tokens, dtype=np.int32) for _ in range(samples)],
            "response_lengths": np.full(samples, response),
            "rollout_log_probs": [-rng.random(response, dtype=np.float32) for _ in range(samples)],
            "rewards": rng.random(samples),
        }
    )


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "batch.arrow"
    write_batch(v1_batch(), path)
    return path


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", [None, "zstd", "lz4"])
def test_a_dump_reads_back_equal(tmp_path: Path, compression: Any) -> None:
    batch = v1_batch()
    path = tmp_path / "batch.arrow"
    write_batch(batch, path, compression=compression)
    read, info = read_dump(path)
    assert read.equals(batch)
    assert _same_train_data(read.to_train_data(), batch.to_train_data())
    assert info.compression == compression
    assert info.dump_version == "2"
    assert info.file_bytes == path.stat().st_size
    assert os.listdir(tmp_path) == ["batch.arrow"]  # no temporary file left


def test_a_read_batch_splits_and_pickles_like_the_original(dump: Path) -> None:
    batch, read = v1_batch(), read_batch(dump)
    for balance_data in (True, False):
        expected = split_train_data_by_dp_raw(batch, 2, balance_data=balance_data)
        shards = split_train_data_by_dp_raw(read, 2, balance_data=balance_data)
        assert all(s.equals(e) for s, e in zip(shards, expected, strict=True))
    assert pickle.loads(pickle.dumps(read, protocol=5)).equals(batch)


def test_an_empty_batch_round_trips(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [], "rewards": []})
    write_batch(batch, tmp_path / "empty.arrow")
    assert read_batch(tmp_path / "empty.arrow").equals(batch)
    write_parquet(batch, tmp_path / "empty.parquet")
    assert read_parquet(tmp_path / "empty.parquet").equals(batch)


def test_a_read_batch_keeps_the_record_batchs_own_metadata(tmp_path: Path) -> None:
    batch = v1_batch()
    tagged = RolloutBatch(
        batch.record_batch.replace_schema_metadata({"run": "7"}), batch.specs, batch.batch_globals
    )
    write_batch(tagged, tmp_path / "tagged.arrow")
    read = read_batch(tmp_path / "tagged.arrow")
    assert read.record_batch.schema.metadata == {b"run": b"7"}


@settings(max_examples=25)
@given(train_data(max_samples=6, cap=6), st.sampled_from([None, "zstd"]))
def test_any_batch_round_trips(data: dict[str, Any], compression: Any) -> None:
    batch = RolloutBatch.from_train_data(data)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "batch.arrow"
        write_batch(batch, path, compression=compression)
        assert read_batch(path).equals(batch)


def test_a_write_replaces_an_existing_dump(dump: Path) -> None:
    other = RolloutBatch.from_train_data({"tokens": [[1, 2]]})
    write_batch(other, dump)
    assert read_batch(dump).equals(other)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(
    dump: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(sink: pa.NativeFile, *args: object, **kwargs: object) -> None:
        sink.write(b"ARROW1 and then the machine died")
        raise RuntimeError("crash while writing")

    monkeypatch.setattr(pa.ipc, "new_file", fail)
    with pytest.raises(RuntimeError, match="crash while writing"):
        write_batch(RolloutBatch.from_train_data({"tokens": [[1]]}), dump)
    monkeypatch.undo()
    assert read_batch(dump).equals(v1_batch())
    assert os.listdir(dump.parent) == [dump.name]


def test_a_write_into_a_missing_folder_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"cannot write `.*/nowhere/x\.arrow`: no folder"):
        write_batch(v1_batch(), tmp_path / "nowhere" / "x.arrow")


def test_a_new_dump_gets_the_usual_permissions(dump: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    assert dump.stat().st_mode & 0o777 == 0o666 & ~umask


# --- zero copy -----------------------------------------------------------------------------------


def _mapped_ranges(path: Path) -> list[tuple[int, int]]:
    ranges = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) >= 6 and fields[5] == str(path.resolve()):
                start, end = (int(bound, 16) for bound in fields[0].split("-"))
                ranges.append((start, end))
    return ranges


def _buffers(batch: RolloutBatch) -> Iterator[pa.Buffer]:
    for name in batch.column_names:
        yield from (buffer for buffer in batch.column(name).buffers() if buffer is not None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_an_uncompressed_read_maps_the_file_without_a_copy(tmp_path: Path) -> None:
    batch = _big_batch()
    path = tmp_path / "big.arrow"
    write_batch(batch, path)
    assert batch.nbytes > 4 * 2**20
    del batch
    gc.collect()
    before = pa.total_allocated_bytes()
    read = read_batch(path)
    assert pa.total_allocated_bytes() - before < 4096
    ranges = _mapped_ranges(path)
    assert ranges, "the file is not mapped"
    for buffer in _buffers(read):
        start, end = buffer.address, buffer.address + buffer.size
        assert any(low <= start and end <= high for low, high in ranges)
    assert not read.column("tokens").values.buffers()[1].is_mutable


def test_a_compressed_read_decompresses_into_fresh_memory(tmp_path: Path) -> None:
    batch = _big_batch(samples=64)
    path = tmp_path / "big.arrow"
    write_batch(batch, path, compression="zstd")
    before = pa.total_allocated_bytes()
    read = read_batch(path)
    assert pa.total_allocated_bytes() - before >= batch.nbytes // 2
    assert read.equals(batch)
    assert path.stat().st_size < batch.nbytes


# --- Parquet -------------------------------------------------------------------------------------


def test_parquet_keeps_names_types_specs_and_globals(tmp_path: Path) -> None:
    batch = v1_batch(metadata="pickle")
    path = tmp_path / "batch.parquet"
    write_parquet(batch, path)
    table = pq.read_table(path)
    assert table.column_names == batch.column_names
    assert table.schema.field("metadata").type == pa.large_binary()  # pickled: opaque bytes
    stored_once = batch.record_batch.schema.field("metadata").type
    assert stored_once == pa.dictionary(pa.int32(), pa.large_binary())
    expected = batch.record_batch.schema.set(
        batch.column_names.index("metadata"), pa.field("metadata", pa.large_binary())
    )
    assert table.schema.remove_metadata() == expected.remove_metadata()
    first = table.column("metadata")[0].as_py()
    assert pickle.loads(first) == {"turn": 0, "tags": ["a", "b"]}
    stored = pq.read_metadata(path).metadata
    specs = json.loads(stored[b"arrow_split.specs"])
    assert [spec["name"] for spec in specs] == list(batch.specs)
    assert json.loads(stored[b"arrow_split.batch_globals"])["step_slots"] == {"json": [0, 1]}
    assert read_parquet(path).equals(batch)


def test_metadata_of_plain_data_is_json_text_by_default(tmp_path: Path) -> None:
    batch = v1_batch()
    assert batch.specs["metadata"].codec == "json"
    path = tmp_path / "batch.parquet"
    write_parquet(batch, path)
    column = pq.read_table(path).column("metadata")
    assert column.type == pa.large_string()  # any tool reads it; no pickle
    assert json.loads(column[1].as_py()) == {"turn": 1, "tags": ["a", "b"]}
    assert read_parquet(path).equals(batch)
    assert read_parquet(path).to_train_data()["metadata"] == batch.to_train_data()["metadata"]
    assert os.listdir(tmp_path) == ["batch.parquet"]


def test_pandas_reads_the_parquet_file(tmp_path: Path) -> None:
    pandas = pytest.importorskip("pandas", reason="pandas is not installed (not a dependency)")
    batch = v1_batch()
    write_parquet(batch, tmp_path / "batch.parquet")
    frame = pandas.read_parquet(tmp_path / "batch.parquet")
    assert list(frame.columns) == batch.column_names
    assert frame["rewards"].tolist() == batch.to_train_data()["rewards"]


def test_a_parquet_file_of_another_kind_is_a_dump_error(tmp_path: Path) -> None:
    pq.write_table(pa.table({"tokens": [1, 2]}), tmp_path / "plain.parquet")
    path = str(tmp_path / "plain.parquet")
    with raises_facts(DumpError, path=path, key="arrow_split.dump.version"):
        read_parquet(tmp_path / "plain.parquet")
    (tmp_path / "text.parquet").write_text("not parquet")
    with raises_facts(DumpError, path=str(tmp_path / "text.parquet")) as caught:
        read_parquet(tmp_path / "text.parquet")
    assert isinstance(caught.value.__cause__, (pa.ArrowException, OSError))
    with pytest.raises(FileNotFoundError, match="no Parquet file at"):
        read_parquet(tmp_path / "missing.parquet")


# --- bad files -----------------------------------------------------------------------------------


def _rewrite(
    source: Path,
    target: Path,
    change: Callable[[dict[bytes, bytes]], None],
    *,
    copies: int = 1,
) -> Path:
    """Write ``source``'s record batch again, its schema metadata changed by ``change``."""
    record_batch = pa.ipc.open_file(pa.memory_map(str(source))).get_batch(0)
    metadata = dict(record_batch.schema.metadata)
    change(metadata)
    record_batch = record_batch.replace_schema_metadata(metadata)
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, record_batch.schema) as file:
        for _ in range(copies):
            file.write_batch(record_batch)
    return target


def _specs_changed(edit: Callable[[list[dict[str, Any]]], None]) -> Callable[[dict], None]:
    def change(metadata: dict[bytes, bytes]) -> None:
        specs = json.loads(metadata[b"arrow_split.specs"])
        edit(specs)
        metadata[b"arrow_split.specs"] = json.dumps(specs).encode()

    return change


def _spec(specs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(spec for spec in specs if spec["name"] == name)


def _set(key: bytes, value: bytes) -> Callable[[dict[bytes, bytes]], None]:
    return lambda metadata: metadata.__setitem__(key, value)


BAD_METADATA = [
    pytest.param(
        _set(b"arrow_split.dump.version", b"3"),
        {"key": "arrow_split.dump.version"},
        id="newer-version",
    ),
    pytest.param(
        lambda m: m.pop(b"arrow_split.dump.version"),
        {"key": "arrow_split.dump.version"},
        id="no-version",
    ),
    pytest.param(
        lambda m: m.pop(b"arrow_split.version"),
        {"key": "arrow_split.version"},
        id="no-library-version",
    ),
    pytest.param(
        _set(b"arrow_split.specs", b"[{"),
        {"key": "arrow_split.specs"},
        id="corrupt-specs-json",
    ),
    pytest.param(
        _set(b"arrow_split.batch_globals", b"\xff"),
        {"key": "arrow_split.batch_globals"},
        id="globals-not-text",
    ),
    pytest.param(
        _set(b"arrow_split.specs", b"{}"),
        {"key": "arrow_split.specs"},
        id="specs-not-a-list",
    ),
    pytest.param(
        _specs_changed(lambda specs: specs.pop(1)),
        {},
        id="spec-missing",
    ),
    pytest.param(
        _specs_changed(lambda specs: specs.append(dict(specs[0]))),
        {"key": "tokens"},
        id="spec-twice",
    ),
    pytest.param(
        _specs_changed(lambda specs: _spec(specs, "rewards").update(kind="per_token")),
        {"key": "rewards"},
        id="kind-vs-type",
    ),
    pytest.param(
        _specs_changed(lambda specs: _spec(specs, "tokens").update(color="red")),
        {"key": "tokens"},
        id="unknown-spec-field",
    ),
    pytest.param(
        _specs_changed(lambda specs: _spec(specs, "tokens").update(kind="weird")),
        {"key": "tokens"},
        id="invalid-spec-value",
    ),
    pytest.param(
        _specs_changed(lambda specs: _spec(specs, "tokens").update(flag="yes")),
        {"key": "tokens"},
        id="non-bool-flag",
    ),
    pytest.param(
        _specs_changed(
            lambda specs: _spec(specs, "tokens").update(value_type={"arrow_type": "%%"})
        ),
        {"key": "tokens"},
        id="bad-arrow-type",
    ),
    pytest.param(
        _set(b"arrow_split.batch_globals", b'{"raw_reward": [1, 2]}'),
        {"key": "raw_reward"},
        id="untagged-global",
    ),
    pytest.param(
        _set(b"arrow_split.batch_globals", b'{"raw_reward": {"ndarray": ["O", []]}}'),
        {"key": "raw_reward"},
        id="object-array-global",
    ),
    pytest.param(
        _set(b"arrow_split.batch_globals", b'{"step_slots": {"map": [[[0], 1]]}}'),
        {"key": "step_slots"},
        id="list-as-map-key",
    ),
    pytest.param(
        lambda m: m.__setitem__(
            b"arrow_split.batch_globals",
            json.dumps(
                {
                    k: v
                    for k, v in json.loads(m[b"arrow_split.batch_globals"]).items()
                    if k != "step_slots"
                }
            ).encode(),
        ),
        {},
        id="global-missing",
    ),
]


@pytest.mark.parametrize(("change", "facts"), BAD_METADATA)
def test_bad_metadata_is_a_dump_error_naming_the_file(
    dump: Path, tmp_path: Path, change: Callable[[dict[bytes, bytes]], None], facts: dict[str, Any]
) -> None:
    bad = _rewrite(dump, tmp_path / "bad.arrow", change)
    with raises_facts(DumpError, path=str(bad), **facts):
        read_batch(bad)


def test_a_declared_spec_without_its_kind_is_a_dump_error(tmp_path: Path) -> None:
    # A declared (not known) key has no known spec to fall back on: its kind must be stored.
    spec = ColumnSpec("entropies", "per_token", pa.float32(), length="response")
    data = {"tokens": [[1, 2, 3]], "response_lengths": [2], "entropies": [[0.5, 0.25]]}
    write_batch(RolloutBatch.from_train_data(data, specs=[spec]), tmp_path / "ok.arrow")
    change = _specs_changed(lambda specs: _spec(specs, "entropies").pop("kind"))
    bad = _rewrite(tmp_path / "ok.arrow", tmp_path / "bad.arrow", change)
    with raises_facts(DumpError, path=str(bad), key="entropies"):
        read_batch(bad)


def test_two_record_batches_are_a_dump_error(dump: Path, tmp_path: Path) -> None:
    bad = _rewrite(dump, tmp_path / "bad.arrow", lambda metadata: None, copies=2)
    with raises_facts(DumpError, path=str(bad), got="2"):
        read_batch(bad)


@pytest.mark.parametrize("keep", [0, 6, 100, 0.5, -1])
def test_a_truncated_dump_is_a_dump_error(dump: Path, keep: float) -> None:
    raw = dump.read_bytes()
    cut = int(len(raw) * keep) if isinstance(keep, float) else keep % len(raw)
    dump.write_bytes(raw[:cut])
    with raises_facts(DumpError, path=str(dump)) as caught:
        read_batch(dump)
    assert isinstance(caught.value.__cause__, (pa.ArrowException, OSError))  # Arrow's reason


def test_another_format_is_a_dump_error(tmp_path: Path) -> None:
    (tmp_path / "notes.arrow").write_text("these are not the bytes you are looking for")
    with raises_facts(DumpError, path=str(tmp_path / "notes.arrow")) as caught:
        read_batch(tmp_path / "notes.arrow")
    assert isinstance(caught.value.__cause__, pa.ArrowException)  # not read as a dump at all
    pq.write_table(pa.table({"tokens": [1]}), tmp_path / "table.parquet")
    # a Parquet file is named as one, with the reader it needs
    parquet = "a Parquet file (`RolloutBatch.to_parquet`)"
    with raises_facts(DumpError, path=str(tmp_path / "table.parquet"), got=parquet) as caught:
        read_batch(tmp_path / "table.parquet")
    assert "RolloutBatch.read_parquet" in str(caught.value.fix)


def test_an_arrow_file_without_our_metadata_is_a_dump_error(tmp_path: Path) -> None:
    record_batch = pa.record_batch({"tokens": pa.array([[1, 2]], pa.large_list(pa.int32()))})
    path = str(tmp_path / "plain.arrow")
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, record_batch.schema) as file:
        file.write_batch(record_batch)
    with raises_facts(DumpError, path=path, key="arrow_split.dump.version"):
        read_batch(tmp_path / "plain.arrow")


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no rollout dump at `.*missing\.arrow`"):
        read_batch(tmp_path / "missing.arrow")


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=3
    )
)
def test_a_corrupted_dump_is_a_dump_error_or_a_valid_batch(flips: list[tuple[float, int]]) -> None:
    raw = bytearray(_V1_BYTES)
    for where, byte in flips:
        raw[int(where * len(raw))] = byte
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "flipped.arrow"
        path.write_bytes(raw)
        try:
            read = read_batch(path)
        except DumpError:
            return
        read.record_batch.validate(full=True)  # no byte flip is checked (no checksum) but
        assert read.column_names == v1_batch().column_names  # the structure always is


_V1_BYTES = V1_DUMP.read_bytes() if V1_DUMP.exists() else b""


# --- what cannot be written ----------------------------------------------------------------------


def test_a_shard_has_no_dump() -> None:
    shard = split_train_data_by_dp_raw(v1_batch(), 2, balance_data=False)[0]
    # A dump holds a whole batch (its per-sample globals cover every sample); a shard is a part.
    assert not hasattr(shard, "write")
    assert not hasattr(shard, "to_parquet")


def test_an_unknown_compression_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OptionError) as caught:  # an argument's value, as at every door
        write_batch(v1_batch(), tmp_path / "x.arrow", compression="gzip")  # type: ignore[arg-type]
    assert (caught.value.key, caught.value.mistake) == ("compression", "option_value")
    with pytest.raises(OptionTypeError) as caught:
        write_batch(v1_batch(), tmp_path / "x.arrow", compression=3)  # type: ignore[arg-type]
    assert (caught.value.key, caught.value.mistake) == ("compression", "option_type")
    assert os.listdir(tmp_path) == []


# --- back compatibility --------------------------------------------------------------------------


def test_the_v1_dump_still_reads() -> None:
    assert V1_DUMP.stat().st_size < 50 * 1024
    read, info = read_dump(V1_DUMP)
    # Written before narrow storage: its routed experts are int32, today's batch stores uint8.
    expected = v1_batch(metadata="pickle")
    record_batch = expected.record_batch
    index = record_batch.schema.get_field_index("rollout_routed_experts")
    experts = record_batch.column(index)
    wide = experts.cast(_int32_leaf(experts.type))
    record_batch = record_batch.set_column(index, "rollout_routed_experts", wide)
    assert read.equals(RolloutBatch(record_batch, expected.specs, expected.batch_globals))
    assert (info.dump_version, info.library_version) == ("1", "0.1.0")


def _int32_leaf(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_large_list(arrow_type):
        return pa.large_list(_int32_leaf(arrow_type.value_type))
    if pa.types.is_fixed_size_list(arrow_type):
        return pa.list_(_int32_leaf(arrow_type.value_type), arrow_type.list_size)
    return pa.int32()


def test_an_older_spec_without_a_newer_field_takes_the_known_value_or_the_default(
    dump: Path, tmp_path: Path
) -> None:
    def drop(specs: list[dict[str, Any]]) -> None:
        del _spec(specs, "loss_masks")["flag"]  # known key: its known spec says True
        del _spec(specs, "advantages")["finite"]  # declared key: the dataclass default, True

    read = read_batch(_rewrite(dump, tmp_path / "old.arrow", _specs_changed(drop)))
    assert read.equals(v1_batch())
    assert read.specs["loss_masks"].flag is True


# --- summaries -----------------------------------------------------------------------------------


def _section(text: str, title: str) -> list[str]:
    block = next(block for block in text.split("\n\n") if block.startswith(title))
    return block.splitlines()[1:]


def test_summarize_counts_samples_tokens_rewards_and_globals() -> None:
    batch = v1_batch()
    text = summarize(batch, dp_sizes=(2,))
    lengths = batch.total_lengths
    rewards = np.asarray(batch.to_train_data()["rewards"])
    assert "rollout batch: 6 samples, 14 columns, 5 batch-global keys" in text
    assert f"tokens: {lengths.sum():,} in all; per sample mean {lengths.mean():,.1f}, " in text
    assert f"min {lengths.min()}, max {lengths.max()}" in text
    assert f"rewards: mean {rewards.mean():.4g}, std {rewards.std():.4g} (population)" in text
    columns = [line.split()[0] for line in _section(text, "bytes per column")]
    assert columns == ["column", *batch.column_names, "total"]
    assert "large_list<uint8[2,2]>" in text  # routed experts: [tokens - 1, layers, top_k]
    keys = [line.split()[0] for line in _section(text, "batch-global keys")]
    assert keys == list(batch.batch_globals)


def test_the_histogram_counts_every_response_length() -> None:
    batch = _big_batch(samples=50, tokens=64)
    varied = RolloutBatch(
        batch.record_batch.set_column(
            1, "response_lengths", pa.array(np.arange(50, dtype=np.int64))
        ),
        batch.specs,
        batch.batch_globals,
    )
    rows = _section(summarize(varied), "response lengths (10 bins)")
    assert len(rows) == 10
    assert [int(row.split()[-1]) for row in rows] == [5] * 10
    assert rows[0].split("  ")[1].startswith("[0, 5)")


def test_padding_rows_stay_out_of_the_histogram_as_of_the_token_statistics() -> None:
    data = {"tokens": [[1, 2, 3], [4, 5], [6] * 16], "response_lengths": [2, 1, 15]}
    padded = arrow_split.pad_to_dp(RolloutBatch.from_train_data(data), 8)
    text = summarize(padded, dp_sizes=())
    assert "(5 padding rows left out)" in text
    rows = _section(text, "response lengths")
    assert sum(int(row.split()[-1]) for row in rows) == 3
    assert rows[0].split("  ")[1].startswith("[1, ")  # a padding row's 0 is no sample's


def test_summarize_shows_every_fingerprint_or_why_there_is_none() -> None:
    batch = v1_batch()
    text = summarize(batch, dp_sizes=(2, 4), balance_data=False)
    lengths = batch.total_lengths
    for size in (2, 4):
        assert plan_fingerprint(lengths, size, balance_data=False) in text
    assert plan_fingerprint(lengths, 2, balance_data=True) in text
    with pytest.raises(PlanError) as refused:
        plan_fingerprint(lengths, 4, balance_data=True)
    rows = _section(text, "plan fingerprints")
    assert rows[1].split()[:2] == ["2", "strided*"]
    assert rows[4].split()[:3] == ["4", "balanced", "cannot"]
    assert rows[4].endswith(f"cannot plan: {refused.value}")


def test_summarize_an_empty_batch() -> None:
    text = summarize(RolloutBatch.from_train_data({"tokens": []}), dp_sizes=(1,))
    assert "0 samples" in text
    assert "per sample none (empty batch)" in text
    assert "total lengths (no `response_lengths` column): no samples" in text
    assert "batch-global keys: none" in text


@pytest.mark.parametrize(
    ("dp_sizes", "error", "got"),
    [((8, True), PlanTypeError, "True of type bool"), ((0,), PlanError, "0")],
)
def test_summarize_refuses_a_bad_dp_size(dp_sizes: Any, error: type, got: str) -> None:
    with raises_facts(error, key="dp_sizes", got=got) as caught:
        summarize(v1_batch(), dp_sizes=dp_sizes)
    assert type(caught.value) is error


def test_summarize_checks_its_arguments_at_the_door() -> None:
    # each was an untyped error or accepted: None's AttributeError, 8's "not iterable", "no"
    # read as true; a 0-d dp_size refused though `dp_size` takes one everywhere else
    with raises_facts(SchemaTypeError, key="batch"):
        summarize(None)  # type: ignore[arg-type]
    with raises_facts(PlanTypeError, key="dp_sizes", got="int 8", mistake="plan_type"):
        summarize(v1_batch(), dp_sizes=8)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="balance_data", mistake="flag_type"):
        summarize(v1_batch(), dp_sizes=[2], balance_data="no")  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="balance_data", mistake="flag_type"):
        inspect_path("never-read.arrow", [2], balance_data="no")  # type: ignore[arg-type]
    assert summarize(v1_batch(), dp_sizes=[np.array(2)]) == summarize(v1_batch(), dp_sizes=[2])


def test_inspect_path_states_the_file_then_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "batch.arrow"
    write_batch(v1_batch(), path, compression="zstd")
    text = inspect_path(path, [2])
    header = text.splitlines()[:2]
    assert header[0] == f"file: {path}"
    assert header[1].endswith(
        f"dump format 2, written by arrow_split {arrow_split.__version__}, compression: zstd"
    )
    assert text.endswith(summarize(v1_batch(), dp_sizes=[2]))
    with pytest.raises(FileNotFoundError, match="no rollout dump at"):
        inspect_path(tmp_path / "missing.arrow")


def test_a_map_batch_global_round_trips(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(
        {
            "tokens": [[1, 2], [3]],
            "adapter_slots": [0, 1],
            "step_adapter_batch_sizes": {0: 1, 1: 1},
        }
    )
    path = tmp_path / "lora.arrow"
    batch.write(path)
    read = RolloutBatch.read(path)
    assert read.equals(batch)
    assert read.batch_globals["step_adapter_batch_sizes"] == {0: 1, 1: 1}


def test_a_part_of_a_batch_with_raw_reward_is_refused_before_any_file(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3], [4]], "raw_reward": [1, 2, 3]})
    shard = arrow_split.split_train_data_by_dp_raw(batch, 3, balance_data=False)[1]
    for part in (batch.slice(0, 1), shard.rows):  # each keeps the batch's whole raw_reward
        with raises_facts(DumpError, key="raw_reward", fix="write the whole batch"):
            part.write(tmp_path / "part.arrow")
        with raises_facts(DumpError, key="raw_reward", fix="write the whole batch"):
            part.to_parquet(tmp_path / "part.parquet")
    assert os.listdir(tmp_path) == []
    padded = arrow_split.pad_to_dp(batch, 2)  # raw_reward: every row but the padding one
    padded.write(tmp_path / "padded.arrow")
    assert RolloutBatch.read(tmp_path / "padded.arrow").equals(padded)
    batch.slice(0).write(tmp_path / "whole.arrow")
    assert RolloutBatch.read(tmp_path / "whole.arrow").equals(batch)
