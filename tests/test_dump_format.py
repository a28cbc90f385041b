"""A dump as a data format: every field says its kind, length rule and meaning; other tools read it.

polars and duckdb are not dependencies of the package: the development set-up installs them, and
their tests skip where they are not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arrow_split import DumpError, RolloutBatch
from arrow_split.batch._dump import read_dump
from tests.error_facts import assert_facts, raises_facts

DATA = {
    "tokens": [[1, 2, 3], [4, 5, 6, 7], [8]],
    "response_lengths": [2, 1, 0],
    "loss_masks": [[1, 0], [1], []],
    "rewards": [0.5, 1.0, 0.0],
    "prompt": ["p", "q", "r"],
    "metadata": [{"a": 1, "tags": ["x"]}, {"a": 2, "tags": []}, None],
}


@pytest.fixture
def batch() -> RolloutBatch:
    return RolloutBatch.from_train_data(DATA)


def _files(batch: RolloutBatch, tmp_path: Path) -> tuple[Path, Path]:
    dump, parquet = tmp_path / "batch.arrow", tmp_path / "batch.parquet"
    batch.write(dump)
    batch.to_parquet(parquet)
    return dump, parquet


def test_every_field_carries_its_metadata(batch: RolloutBatch, tmp_path: Path) -> None:
    dump, parquet = _files(batch, tmp_path)
    for schema in (pa.ipc.open_file(dump).schema, pq.read_schema(parquet)):
        for field in schema:
            metadata = field.metadata
            assert metadata[b"arrow_split.kind"] == batch.specs[field.name].kind.encode()
            assert metadata[b"arrow_split.description"]
        masks = schema.field("loss_masks").metadata
        assert masks[b"arrow_split.length_rule"] == b"response"
        assert masks[b"arrow_split.length_of"] == b"response_lengths"
        assert b"only the last `response_lengths[i]` tokens" in masks[b"arrow_split.description"]
        assert schema.field("metadata").metadata[b"arrow_split.codec"] == b"json"
        assert b"arrow_split.length_of" not in schema.field("rewards").metadata


def test_the_batch_read_has_no_field_metadata(batch: RolloutBatch, tmp_path: Path) -> None:
    dump, parquet = _files(batch, tmp_path)
    for read in (RolloutBatch.read(dump), RolloutBatch.read_parquet(parquet)):
        assert read.equals(batch)
        assert all(field.metadata is None for field in read.record_batch.schema)


def test_polars_reads_and_aligns_the_response(batch: RolloutBatch, tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    _, parquet = _files(batch, tmp_path)
    frame = pl.read_parquet(parquet)
    response = frame.select(
        pl.col("tokens").list.tail(pl.col("response_lengths")).alias("response"), "loss_masks"
    )
    assert response["response"].to_list() == [[2, 3], [7], []]
    assert [len(m) for m in response["loss_masks"].to_list()] == [2, 1, 0]
    assert frame["prompt"].to_list() == ["p", "q", "r"]
    assert frame["rewards"].to_list() == [0.5, 1.0, 0.0]
    metadata = frame["metadata"].str.json_decode()  # plain data: JSON text, not pickles
    assert metadata.struct.field("a").to_list() == [1, 2, None]
    assert metadata.struct.field("tags").to_list() == [["x"], [], None]


def test_duckdb_reads_and_aligns_the_response(batch: RolloutBatch, tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    _, parquet = _files(batch, tmp_path)
    rows = duckdb.sql(
        "select tokens[len(tokens) - response_lengths + 1:] as response, loss_masks, prompt "
        f"from read_parquet('{parquet}')"
    ).fetchall()
    assert rows == [([2, 3], [1, 0], "p"), ([7], [1], "q"), ([], [], "r")]
    fields = duckdb.sql(
        "select metadata->>'$.a', json_array_length(metadata->'$.tags') "
        f"from read_parquet('{parquet}')"
    ).fetchall()
    assert fields == [("1", 1), ("2", 0), (None, None)]


def test_specs_are_readable_json(batch: RolloutBatch, tmp_path: Path) -> None:
    dump, _ = _files(batch, tmp_path)
    metadata = pa.ipc.open_file(dump).schema.metadata
    assert metadata[b"arrow_split.dump.version"] == b"2"
    specs = {spec["name"]: spec for spec in json.loads(metadata[b"arrow_split.specs"])}
    assert specs["tokens"]["value_type"] == {"arrow": "int32"}
    assert specs["loss_masks"]["value_type"] == {"arrow": "uint8"}
    assert b"arrow_type" not in metadata[b"arrow_split.specs"]  # no base64 for these types


def test_a_format_1_dump_still_reads() -> None:
    path = Path(__file__).parent / "data" / "rollout_v1.arrow"
    read, info = read_dump(path)
    assert info.dump_version == "1"
    assert len(read) > 0


def test_an_unknown_readable_type_is_a_dump_error(batch: RolloutBatch, tmp_path: Path) -> None:
    dump, _ = _files(batch, tmp_path)
    table = pa.ipc.open_file(dump).read_all()
    metadata = dict(table.schema.metadata)
    metadata[b"arrow_split.specs"] = metadata[b"arrow_split.specs"].replace(
        b'{"arrow": "int32"}', b'{"arrow": "int99"}'
    )
    crafted = tmp_path / "crafted.arrow"
    with pa.ipc.new_file(crafted, table.schema.with_metadata(metadata)) as writer:
        writer.write_table(table.replace_schema_metadata(metadata))
    with raises_facts(DumpError, key="tokens"):
        RolloutBatch.read(crafted)


def test_a_folder_is_no_dump_nor_parquet_file(batch: RolloutBatch, tmp_path: Path) -> None:
    _files(batch, tmp_path)  # a folder of readable files is still no file
    for read in (RolloutBatch.read, RolloutBatch.read_parquet):
        with raises_facts(DumpError, path=str(tmp_path), got="a folder"):
            read(tmp_path)


# a byte of a value; of a column's name in the footer (after its Thrift field header and length):
# a pyarrow that names columns from the file's stored Arrow schema (16) never reads that name
@pytest.mark.parametrize(
    ("marker", "at", "unread"), [(b"hello world", 0, False), (b"\x18\x07rewards", 2, True)]
)
def test_a_bad_utf8_byte_in_a_parquet_file_is_a_dump_error(
    tmp_path: Path, marker: bytes, at: int, unread: bool
) -> None:
    batch = RolloutBatch.from_train_data({**DATA, "prompt": ["hello world", "q", "r"]})
    _, parquet = _files(batch, tmp_path)
    raw = bytearray(parquet.read_bytes())
    raw[raw.index(marker) + at] = 0xFF
    parquet.write_bytes(raw)
    try:
        read = RolloutBatch.read_parquet(parquet)
    except DumpError as error:  # as `read` checks a dump's bytes
        assert_facts(error, {"path": str(parquet)})
    else:
        assert unread, "a damaged value was read without an error"
        assert read.equals(batch)  # the damaged byte was never read: the batch is whole


def test_a_column_stored_twice_is_a_dump_error(batch: RolloutBatch, tmp_path: Path) -> None:
    dump, _ = _files(batch, tmp_path)
    table = pa.ipc.open_file(dump).read_all()
    table = table.append_column(table.schema.field("rewards"), table.column("rewards"))
    with pa.ipc.new_file(dump, table.schema) as writer:
        writer.write_table(table)
    with raises_facts(DumpError, path=str(dump), key="rewards"):
        RolloutBatch.read(dump)
