"""Objects stored once: one dictionary entry per distinct pickle, through build, takes and dumps."""

from __future__ import annotations

import gc
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import ColumnSpec, RolloutBatch, RolloutBatchBuilder, take_rows
from arrow_split.testing import assert_batches_equal, make_multimodal_train_data

OVERHEAD = 64  # bytes of Arrow framing a dictionary may add beyond its values


@st.composite
def sharing_patterns(draw: st.DrawFn) -> list[Any]:
    """Per-sample objects drawn from a small pool: the same object, equal copies, or None."""
    pool: list[Any] = draw(
        st.lists(
            st.one_of(
                st.integers(),
                st.text(max_size=5),
                st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
            ),
            min_size=1,
            max_size=5,
        )
    )
    rows = draw(st.lists(st.integers(-1, 2 * len(pool) - 1), max_size=24))
    return [
        None
        if row < 0
        else pool[row]
        if row < len(pool)
        else pickle.loads(pickle.dumps(pool[row - len(pool)]))
        for row in rows
    ]


PICKLED = [ColumnSpec("metadata", "per_sample_object", codec="pickle")]
"""``metadata`` stored as pickles (plain data is JSON text by default)."""


def _train_data(objects: list[Any]) -> dict[str, Any]:
    return {
        "tokens": [[row, 1] for row in range(len(objects))],
        "response_lengths": [1] * len(objects),
        "metadata": objects,
    }


def _distinct_bytes(objects: list[Any]) -> int:
    return sum(len(p) for p in {pickle.dumps(o, protocol=5) for o in objects if o is not None})


@given(sharing_patterns(), st.data())
def test_each_distinct_value_is_stored_once(objects: list[Any], data: st.DataObject) -> None:
    batch = RolloutBatch.from_train_data(_train_data(objects), specs=PICKLED)
    column = batch.record_batch.column("metadata")
    assert pa.types.is_dictionary(column.type)
    values = column.dictionary
    assert len(values) == len({pickle.dumps(o, protocol=5) for o in objects if o is not None})
    assert values.nbytes <= _distinct_bytes(objects) + 8 * (len(values) + 1) + OVERHEAD
    assert batch.to_train_data()["metadata"] == objects
    rows = data.draw(st.lists(st.integers(0, max(len(objects) - 1, 0)), max_size=12))
    rows = rows if objects else []
    shard = take_rows(batch, np.asarray(rows, dtype=np.int64))
    picked = [objects[row] for row in rows]
    assert shard.rows.to_train_data()["metadata"] == picked
    expected = RolloutBatch.from_train_data(_train_data(picked), specs=PICKLED)
    taken = shard.rows.record_batch.column("metadata")
    assert taken.equals(expected.record_batch.column("metadata"))


def test_the_builder_dedupes_across_calls(tmp_path: Path) -> None:
    data = make_multimodal_train_data(prompts=3, samples_per_prompt=4, image_bytes=8192)
    builder = RolloutBatchBuilder(journal=tmp_path, identity="sample_indices")
    for row in range(12):
        builder.append({key: value[row] for key, value in data.items() if key != "raw_reward"})
    batch = builder.finish()
    assert len(batch.record_batch.column("multimodal_train_inputs").dictionary) == 3
    expected = RolloutBatch.from_train_data({k: v for k, v in data.items() if k != "raw_reward"})
    assert_batches_equal(batch, expected)
    read = RolloutBatch.read(tmp_path / "step-000000.arrow")
    assert_batches_equal(read, expected)


def test_a_shard_carries_only_the_images_of_its_rows() -> None:
    data = make_multimodal_train_data(prompts=4, samples_per_prompt=8, image_bytes=2**16)
    batch = RolloutBatch.from_train_data(data)
    column = batch.record_batch.column("multimodal_train_inputs")
    plain = column.cast(pa.large_binary())
    assert column.nbytes <= plain.nbytes / 8 * 1.01
    shard = take_rows(batch, np.arange(8, 24, dtype=np.int64))  # prompts 1 and 2
    taken = shard.rows.record_batch.column("multimodal_train_inputs")
    assert len(taken.dictionary) == 2
    assert taken.dictionary.equals(column.dictionary.slice(1, 2))
    decoded = shard.rows.to_train_data()["multimodal_train_inputs"]
    assert decoded[0] is not decoded[1]  # each row its own object
    image = data["multimodal_train_inputs"][8]["pixel_values"]
    np.testing.assert_array_equal(decoded[0]["pixel_values"], image)


def test_a_dump_round_trips_and_a_plain_column_reads_stored_once(tmp_path: Path) -> None:
    objects = [{"a": 1}, {"a": 1}, None, "x", {"a": 1}]
    batch = RolloutBatch.from_train_data(_train_data(objects), specs=PICKLED)
    batch.write(tmp_path / "batch.arrow")
    read = RolloutBatch.read(tmp_path / "batch.arrow")
    assert_batches_equal(read, batch)
    assert read.to_train_data()["metadata"] == objects
    column = batch.record_batch.column("metadata")
    plain = batch.record_batch.set_column(
        batch.column_names.index("metadata"), "metadata", column.cast(pa.large_binary())
    )
    RolloutBatch(plain, batch.specs, batch.batch_globals).write(tmp_path / "plain.arrow")
    assert_batches_equal(RolloutBatch.read(tmp_path / "plain.arrow"), batch)  # as version 1 wrote


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_a_dump_read_maps_the_values_stored_once_without_a_copy(tmp_path: Path) -> None:
    data = make_multimodal_train_data(prompts=2, samples_per_prompt=8, image_bytes=2**20)
    path = tmp_path / "multimodal.arrow"
    RolloutBatch.from_train_data(data).write(path)
    gc.collect()
    before = pa.total_allocated_bytes()
    column = RolloutBatch.read(path).record_batch.column("multimodal_train_inputs")
    assert pa.total_allocated_bytes() - before < 4096
    with open("/proc/self/maps") as maps:
        ranges = [
            tuple(int(bound, 16) for bound in line.split()[0].split("-"))
            for line in maps
            if line.split()[-1] == str(path.resolve())
        ]
    values = column.dictionary.buffers()[2]
    assert values.size > 2 * 10**6  # two images of about 1 MB, once each
    assert any(
        low <= values.address and values.address + values.size <= high for low, high in ranges
    )


@pytest.mark.parametrize("form", ["once", "large_binary", "binary"])
@given(objects=sharing_patterns(), data=st.data())
def test_any_row_range_decodes_to_its_objects(form: str, objects: list[Any], data: Any) -> None:
    # Decoding reads each row's bytes in place, from the column's data buffer and offsets: a row
    # range (an eager rank's slice) starts mid-buffer, null rows have no bytes, and a column an
    # older version stored (one pickle per row, `large_binary` or `binary`) reads the same way.
    batch = RolloutBatch.from_train_data(_train_data(objects), specs=PICKLED)
    record_batch = batch.record_batch
    if form != "once":
        index = batch.column_names.index("metadata")
        column = record_batch.column(index).cast(getattr(pa, form)())
        record_batch = record_batch.set_column(index, "metadata", column)
    start = data.draw(st.integers(0, len(objects)))
    stop = data.draw(st.integers(start, len(objects)))
    rows = RolloutBatch(record_batch.slice(start, stop - start), batch.specs, batch.batch_globals)
    assert rows.to_train_data()["metadata"] == objects[start:stop]
