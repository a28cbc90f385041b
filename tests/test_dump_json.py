"""The ``json`` object codec: plain-data objects stored as JSON text, readable by any tool."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from arrow_split import (
    ColumnSpec,
    DumpError,
    ObjectFallbackWarning,
    RolloutBatch,
    RolloutBatchBuilder,
)
from arrow_split.testing import assert_batches_equal
from tests.error_facts import raises_facts

JSON_METADATA = ColumnSpec("metadata", "per_sample_object", codec="json")
FITS: list[Any] = [
    {"a": 1, "b": [1.5, "x", None, True, -0.0], "c": {"d": []}},
    None,
    {"é": "ü", "big": 2**70},
    [],
    "text",
]


def _data(metadata: list[Any]) -> dict[str, Any]:
    count = len(metadata)
    return {"tokens": [[1, 2, 3]] * count, "response_lengths": [2] * count, "metadata": metadata}


def test_plain_data_is_stored_as_json_text(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(_data(FITS), specs=[JSON_METADATA])
    assert batch.specs["metadata"].codec == "json"
    assert batch.column("metadata").type == pa.large_string()
    assert batch.column("metadata").to_pylist()[0] == (
        '{"a":1,"b":[1.5,"x",null,true,-0.0],"c":{"d":[]}}'
    )
    assert batch.to_train_data()["metadata"] == FITS
    path = tmp_path / "batch.arrow"
    batch.write(path)
    read = RolloutBatch.read(path)
    assert read.equals(batch)
    assert read.to_train_data()["metadata"] == FITS
    field = pa.ipc.open_file(path).schema.field("metadata")
    assert field.metadata[b"arrow_split.codec"] == b"json"
    batch.to_parquet(tmp_path / "batch.parquet")
    assert RolloutBatch.read_parquet(tmp_path / "batch.parquet").equals(batch)


@pytest.mark.parametrize(
    "value",
    [
        (1, 2),
        math.nan,
        math.inf,
        -math.inf,
        np.int64(3),
        np.float32(0.1),
        np.bool_(True),
        np.uint64(2**64 - 1),
        {"a": (1, (2, np.float16(0.5)))},
        [(), {"b": math.nan}],
    ],
)
def test_numpy_scalars_tuples_and_nonfinite_floats_stay_json(value: Any, tmp_path: Path) -> None:
    # one Arrow type for every step: written as tagged JSON objects, read back exactly
    metadata = [{"a": 1}, value]
    batch = RolloutBatch.from_train_data(_data(metadata), specs=[JSON_METADATA])
    assert batch.specs["metadata"].codec == "json"
    batch.write(tmp_path / "b.arrow")
    for source in (batch, RolloutBatch.read(tmp_path / "b.arrow")):
        decoded = source.to_train_data()["metadata"][1]
        assert type(decoded) is type(value)
        assert repr(decoded) == repr(value)  # NaN too


@pytest.mark.parametrize(
    "misfit",
    [b"raw", {1: "int key"}, {"a": {2}}, {"__arrow_split__": "tuple", "items": []}],
)
def test_a_value_json_would_change_falls_back_to_pickle(misfit: Any) -> None:
    metadata = [{"a": 1}, misfit]
    with pytest.warns(ObjectFallbackWarning) as caught:
        batch = RolloutBatch.from_train_data(_data(metadata), specs=[JSON_METADATA])
    assert (caught[0].message.key, caught[0].message.sample) == ("metadata", 1)
    assert batch.specs["metadata"].codec == "pickle"
    decoded = batch.to_train_data()["metadata"]
    assert type(decoded[1]) is type(misfit)  # kept exactly, as a pickle keeps it


def test_the_builder_gives_the_batch_from_train_data_gives() -> None:
    for metadata in (FITS, [*FITS, (1, 2)]):
        builder = RolloutBatchBuilder(specs=[JSON_METADATA])
        data = _data(metadata)
        for row in range(len(metadata)):
            builder.append({key: values[row] for key, values in data.items()})
        expected = RolloutBatch.from_train_data(data, specs=[JSON_METADATA])
        assert_batches_equal(builder.finish(), expected)


def test_metadata_is_json_by_default_in_every_entry_path() -> None:
    assert RolloutBatch.from_train_data(_data(FITS)).specs["metadata"].codec == "json"
    for groups in ([FITS, FITS], [FITS, [{2}]], [[{2}], FITS]):
        builder = RolloutBatchBuilder()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ObjectFallbackWarning)
            for metadata in groups:
                builder.extend(_data(metadata))
            every = [value for metadata in groups for value in metadata]
            expected = RolloutBatch.from_train_data(_data(every))
        assert expected.specs["metadata"].codec == ("json" if every == FITS * 2 else "pickle")
        assert_batches_equal(builder.finish(), expected)


def test_corrupt_json_text_is_a_dump_error(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(_data([{"a": 1}]), specs=[JSON_METADATA])
    index = batch.record_batch.schema.get_field_index("metadata")
    broken = batch.record_batch.set_column(
        index, "metadata", pa.array(['{"a": '], type=pa.large_string())
    )
    path = tmp_path / "corrupt.arrow"
    RolloutBatch(broken, batch.specs, batch.batch_globals).write(path)
    with raises_facts(DumpError, key="metadata", sample=0):
        RolloutBatch.read(path).to_train_data()


def test_polars_and_duckdb_read_the_json(tmp_path: Path) -> None:
    pl = pytest.importorskip("polars")
    duckdb = pytest.importorskip("duckdb")
    batch = RolloutBatch.from_train_data(_data([{"a": 1}, {"a": 2}]), specs=[JSON_METADATA])
    path = tmp_path / "batch.parquet"
    batch.to_parquet(path)
    frame = pl.read_parquet(path)
    decoded = frame["metadata"].str.json_decode(pl.Struct({"a": pl.Int64}))
    assert decoded.struct.field("a").to_list() == [1, 2]
    rows = duckdb.sql(
        f"select json_extract(metadata::JSON, '$.a')::INT from read_parquet('{path}')"
    ).fetchall()
    assert rows == [(1,), (2,)]


def test_the_builder_names_the_sample_of_the_batch_when_it_falls_back() -> None:
    builder = RolloutBatchBuilder()
    builder.extend(_data([{"a": 1}, {"a": 2}]))
    with pytest.warns(ObjectFallbackWarning) as caught:
        builder.extend(_data([{"a": 3}, {"a": {4}}]))
    assert (caught[0].message.key, caught[0].message.sample) == ("metadata", 3)
    assert str(caught[0].message).startswith("sample 3: `metadata` holds a dict value")
