"""Files never run code: pickled objects read from a dump decode as plain data only.

A batch built in this process trusts its own objects; a batch read from a file (a dump, a
Parquet file) decodes only plain data unless read with ``trust_objects=True``, and keeps that
choice through shards, takes, pads and pickles. Corrupt object bytes raise a typed error.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings

from arrow_split import (
    ColumnSpec,
    DumpError,
    OptionTypeError,
    RolloutBatch,
    UntrustedObjectError,
    shard_for_rank,
    take_rows,
)
from arrow_split._codecs.per_sample_object import NotPlainData, loads_plain
from arrow_split.batch import values_equal
from arrow_split.testing.strategies import rollout_batches
from tests.error_facts import assert_facts, raises_facts

_MARKER = "ARROW_SPLIT_TEST_PWNED"

# objects JSON cannot keep are pickled, as these tests mean: the warning is expected
pytestmark = pytest.mark.filterwarnings("ignore::arrow_split.ObjectFallbackWarning")


def _set_marker(value: str) -> None:
    os.environ[_MARKER] = value


class _Payload:
    """An object whose unpickling sets an environment variable (a side effect to look for)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_set_marker, ("1",))


class _Mine:
    """A user's own class: trusted in this process, refused from a file unless trusted."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Mine) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


def _train_data(metadata: list[object]) -> dict[str, object]:
    count = len(metadata)
    return {
        "tokens": [[1, 2, 3]] * count,
        "response_lengths": [2] * count,
        "metadata": metadata,
    }


PLAIN: list[object] = [
    None,
    {"a": 1, "b": [1.5, "x", None, True], "c": (1, b"raw"), 3: {1, 2}},
    {"ids": np.arange(4, dtype=np.int32), "mask": np.array([True, False])},
    np.float32(1.5),
    np.array([[1.0, 2.0], [3.0, 4.0]]).T,  # not contiguous
    np.array(["ab", "c"]),
    [complex(1, 2), frozenset({"x"}), bytearray(b"y"), np.int64(-3), np.bool_(True)],
]


@pytest.fixture(autouse=True)
def _no_marker() -> Any:
    os.environ.pop(_MARKER, None)
    yield
    os.environ.pop(_MARKER, None)


def _dumped(tmp_path: Path, metadata: list[object]) -> Path:
    path = tmp_path / "batch.arrow"
    RolloutBatch.from_train_data(_train_data(metadata)).write(path)
    return path


def test_a_crafted_dump_does_not_run_its_code(tmp_path: Path) -> None:
    path = _dumped(tmp_path, [{"ok": 1}, _Payload()])
    batch = RolloutBatch.read(path)
    assert not batch.trust_objects
    with pytest.raises(UntrustedObjectError) as caught:
        batch.to_train_data()
    assert_facts(caught.value, {"key": "metadata", "sample": 1})
    assert _MARKER not in os.environ
    for shard in (shard_for_rank(batch, 1, 2, balance_data=False), take_rows(batch, [1])):
        assert not shard.rows.trust_objects
        with pytest.raises(UntrustedObjectError):
            shard.to_train_data(layout="actor")
    assert _MARKER not in os.environ


def test_a_crafted_dump_runs_only_when_trusted(tmp_path: Path) -> None:
    path = _dumped(tmp_path, [{"ok": 1}, _Payload()])
    RolloutBatch.read(path, trust_objects=True).to_train_data()
    assert os.environ.get(_MARKER) == "1"  # the test can fail: the payload does work


def test_a_crafted_parquet_file_does_not_run_its_code(tmp_path: Path) -> None:
    path = tmp_path / "batch.parquet"
    RolloutBatch.from_train_data(_train_data([_Payload()])).to_parquet(path)
    with pytest.raises(UntrustedObjectError) as caught:
        RolloutBatch.read_parquet(path).to_train_data()
    assert_facts(caught.value, {"key": "metadata", "sample": 0})
    assert _MARKER not in os.environ


def test_plain_data_decodes_equal_untrusted(tmp_path: Path) -> None:
    batch = RolloutBatch.from_train_data(_train_data(PLAIN))
    path = tmp_path / "plain.arrow"
    batch.write(path)
    for trusted in (False, True):
        read = RolloutBatch.read(path, trust_objects=trusted)
        assert read.equals(batch)
        assert values_equal(read.to_train_data()["metadata"], PLAIN)


@pytest.mark.parametrize("value", PLAIN)
def test_plain_values_unpickle_without_code(value: object) -> None:
    for protocol in (2, 4, 5):
        assert values_equal([loads_plain(pickle.dumps(value, protocol=protocol))], [value])


def test_numpy_1_names_read_under_any_numpy() -> None:
    # a pickle naming numpy 1's modules (numpy.core...) reads under numpy 2 too, and conversely
    payload = pickle.dumps(np.arange(3), protocol=2)
    for old, new in ((b"numpy._core", b"numpy.core"), (b"numpy.core", b"numpy._core")):
        renamed = payload.replace(old, new)
        assert np.array_equal(loads_plain(renamed), np.arange(3))  # type: ignore[arg-type]


def test_a_class_is_refused_by_the_plain_unpickler() -> None:
    with pytest.raises(NotPlainData) as caught:
        loads_plain(pickle.dumps(_Mine(1)))
    assert caught.value.name.endswith("_Mine")


def test_own_objects_round_trip_in_process_and_across_pickles() -> None:
    batch = RolloutBatch.from_train_data(_train_data([_Mine(1), _Mine(2)]))
    assert batch.trust_objects
    shipped = pickle.loads(pickle.dumps(batch, protocol=5))
    shard = shard_for_rank(shipped, 0, 2, balance_data=False)
    assert shard.to_train_data(layout="actor")["metadata"] == [_Mine(1)]
    assert batch.to_train_data()["metadata"] == [_Mine(1), _Mine(2)]


def test_the_flag_travels_with_a_pickle(tmp_path: Path) -> None:
    read = RolloutBatch.read(_dumped(tmp_path, [_Mine(1)]))
    shipped = pickle.loads(pickle.dumps(read, protocol=5))
    assert not shipped.trust_objects
    assert not shipped.with_plan(None).trust_objects
    with raises_facts(UntrustedObjectError, key="metadata", sample=0):
        shipped.to_train_data()
    trusted = RolloutBatch.read(_dumped(tmp_path, [_Mine(1)]), trust_objects=True)
    assert pickle.loads(pickle.dumps(trusted)).to_train_data()["metadata"] == [_Mine(1)]


def _corrupt(tmp_path: Path, damage: bytes) -> RolloutBatch:
    pickled = ColumnSpec("metadata", "per_sample_object", codec="pickle")
    batch = RolloutBatch.from_train_data(_train_data([{"a": 1}]), specs=[pickled])
    column = batch.column("metadata")
    values = pa.array([damage], type=pa.large_binary())
    broken = pa.DictionaryArray.from_arrays(column.indices, values)
    record_batch = batch.record_batch.set_column(
        batch.record_batch.schema.get_field_index("metadata"), "metadata", broken
    )
    path = tmp_path / "corrupt.arrow"
    RolloutBatch(record_batch, batch.specs, batch.batch_globals).write(path)
    return RolloutBatch.read(path)


@pytest.mark.parametrize(
    "damage", [b"", b"\x80\x05garbage", pickle.dumps({"a": 1})[:-3], b"\xff" * 16]
)
@pytest.mark.parametrize("trusted", [False, True])
def test_corrupt_object_bytes_raise_a_dump_error(
    tmp_path: Path, damage: bytes, trusted: bool
) -> None:
    batch = _corrupt(tmp_path, damage)
    if trusted:
        batch = RolloutBatch(batch.record_batch, batch.specs, batch.batch_globals)
    with pytest.raises(DumpError) as caught:
        batch.to_train_data()
    assert_facts(caught.value, {"key": "metadata", "sample": 0})


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_trust_objects_must_be_a_bool(tmp_path: Path, value: object) -> None:
    path = _dumped(tmp_path, [{"a": 1}])
    with pytest.raises(OptionTypeError) as caught:
        RolloutBatch.read(path, trust_objects=value)  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "trust_objects"})
    with pytest.raises(OptionTypeError) as caught:
        RolloutBatch.read_parquet(path, trust_objects=value)  # type: ignore[arg-type]
    assert_facts(caught.value, {"key": "trust_objects"})


@settings(deadline=None)
@given(rollout_batches())
def test_parquet_reads_back_equal(batch: RolloutBatch) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "batch.parquet"
        batch.to_parquet(path)
        read = RolloutBatch.read_parquet(path)
        assert read.equals(batch)
        assert values_equal(read.to_train_data(), batch.to_train_data())


@pytest.mark.parametrize("trusted", [False, True])
def test_an_eager_node_object_keeps_the_flag(tmp_path: Path, trusted: bool) -> None:
    pytest.importorskip("ray")
    from arrow_split.ray._nodes import node_rows, rank_slice

    path = _dumped(tmp_path, [_Mine(1), _Mine(2), _Mine(3), _Mine(4)])
    batch = RolloutBatch.read(path, trust_objects=trusted)
    plan = batch.make_plan(2, balance_data=False)
    node_rows = pickle.loads(pickle.dumps(node_rows(batch, plan, [0, 1]), protocol=5))
    for rank in (0, 1):
        shard = rank_slice(node_rows, rank, 2, None, "test", "rows")
        assert shard.rows.trust_objects is trusted
    whole = pickle.loads(pickle.dumps(batch.with_plan(plan), protocol=5))
    assert rank_slice(whole, 0, 2, None, "test", "rows").rows.trust_objects is trusted


def test_an_offsets_buffer_longer_than_needed_decodes() -> None:
    data = {"tokens": [[1, 2], [3]], "response_lengths": [1, 1]}
    batch = RolloutBatch.from_train_data({**data, "multimodal_train_inputs": [{"x": 1}, {"x": 2}]})
    rows = batch.record_batch
    column = rows.column("multimodal_train_inputs")
    validity, offsets, values = column.dictionary.buffers()
    longer = pa.py_buffer(offsets.to_pybytes() + b"\0")  # Arrow allows a longer buffer (a flipped
    dictionary = pa.Array.from_buffers(  # bit in a dump's buffer length reads so, too)
        column.dictionary.type, len(column.dictionary), [validity, longer, values]
    )
    column = pa.DictionaryArray.from_arrays(column.indices, dictionary)
    index = rows.schema.get_field_index("multimodal_train_inputs")
    rows = rows.set_column(index, rows.schema.field(index), column)
    read = RolloutBatch(rows, batch.specs, batch.batch_globals).to_train_data()
    assert read["multimodal_train_inputs"] == [{"x": 1}, {"x": 2}]
