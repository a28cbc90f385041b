"""A batch and a shard in a notebook: schema, keys, rows, previews, polars/pandas, slice, concat."""

from __future__ import annotations

import copy
import importlib.util
import pickle
from argparse import Namespace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arrow_split
from arrow_split import (
    ColumnNotFoundError,
    OptionError,
    OptionTypeError,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
)
from arrow_split._codecs.batch_global import global_to_python
from arrow_split.batch import _frame, values_equal
from arrow_split.testing import assert_batches_equal
from arrow_split.testing.strategies import rollout_batches, train_data
from tests.error_facts import raises_facts

DATA: dict[str, Any] = {
    "tokens": [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12], [13, 14]],
    "response_lengths": [2, 1, 3, 1],
    "loss_masks": [[1, 1], [1], [1, 0, 1], [1]],
    "rewards": [1.0, 0.0, 0.5, 1.0],
    "metadata": [{"a": 1}, None, {"b": [2]}, {}],
    "multimodal_train_inputs": [None, {"pixels": b"\x00"}, None, {"pixels": b"\x01"}],
    "raw_reward": [1.0, 0.0, 0.5, 1.0],
    "dynamic_global_batch_size": 4,
}


@pytest.fixture
def batch() -> RolloutBatch:
    return RolloutBatch.from_train_data(DATA)


def _rows(train: dict[str, Any], batch: RolloutBatch) -> list[dict[str, Any]]:
    """The plain reference: row i of every per-sample key."""
    keys = batch.column_names
    return [{key: train[key][i] for key in keys} for i in range(len(batch))]


def test_schema_and_a_column_by_key(batch: RolloutBatch) -> None:
    assert batch.schema == batch.record_batch.schema
    assert batch["tokens"].equals(batch.column("tokens"))
    assert batch["dynamic_global_batch_size"] == 4
    assert "tokens" in batch
    assert "raw_reward" in batch
    assert "nope" not in batch
    assert [1] not in batch  # an unhashable value is no key either
    assert 0 not in batch


def test_a_missing_key_is_a_column_not_found_error(batch: RolloutBatch) -> None:
    with raises_facts(ColumnNotFoundError, key="token"):
        batch["token"]
    with raises_facts(SchemaTypeError, key="key", got="int 0"):
        batch[0]  # type: ignore[index]


def test_iteration_gives_the_rows_of_the_train_data(batch: RolloutBatch) -> None:
    assert list(batch) == _rows(DATA, batch)
    assert len(batch) == 4


@settings(max_examples=25, deadline=None)
@given(data=train_data(max_samples=8, cap=6, tensors=False))
def test_iteration_against_the_train_data(data: dict[str, Any]) -> None:
    batch = RolloutBatch.from_train_data(data)
    assert list(batch) == _rows(batch.to_train_data(), batch)


def test_the_repr_is_short_and_tabular(batch: RolloutBatch) -> None:
    text = repr(batch)
    lines = text.splitlines()
    assert lines[0] == f"RolloutBatch: 4 samples, 6 columns, 14 tokens, {batch.nbytes} B"
    assert lines[1].split() == [
        "#",
        "tokens",
        "response_lengths",
        "loss_masks",
        "rewards",
        "metadata",
        "multimodal_train_inputs",
    ]
    assert lines[2].split()[:2] == ["0", "[1,"]
    assert lines[-1] == "batch globals: raw_reward, dynamic_global_batch_size"
    assert max(len(line) for line in lines) < 160


def test_a_long_batch_shows_its_first_and_last_rows() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[i, i + 1] for i in range(100)]})
    rows = [line.split()[0] for line in repr(batch).splitlines()[2:]]
    assert rows == ["0", "1", "2", "…", "98", "99"]


def test_the_html_repr_escapes_values() -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1]], "prompt": ["<script>"]})
    html = batch._repr_html_()
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert html.startswith("<div><b>RolloutBatch</b>: 1 samples")


def test_to_polars_keeps_rows_and_leaves_globals_apart(batch: RolloutBatch) -> None:
    pl = pytest.importorskip("polars")  # in the dev set-up; the lowest-versions run has none
    frame = batch.to_polars()
    assert frame.columns == batch.column_names
    assert frame["tokens"].to_list() == DATA["tokens"]
    assert frame["multimodal_train_inputs"].dtype == pl.Object
    assert frame["multimodal_train_inputs"].to_list() == DATA["multimodal_train_inputs"]
    assert "raw_reward" not in frame.columns


def test_to_pandas_puts_globals_in_attrs(batch: RolloutBatch) -> None:
    pytest.importorskip("pandas")
    frame = batch.to_pandas()
    assert list(frame.columns) == batch.column_names
    assert frame["rewards"].tolist() == DATA["rewards"]
    assert frame.attrs["batch_globals"]["dynamic_global_batch_size"] == 4


@pytest.mark.parametrize("module", ["pandas", "polars"])
def test_a_frame_without_its_library_says_what_to_install(
    batch: RolloutBatch, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    with pytest.raises(ImportError, match=rf"needs {module}.*`pip install {module}`"):
        getattr(batch, f"to_{module}")()


GLOBALS: dict[str, Any] = {
    "tokens": [[1, 2]],
    "raw_reward": [0.5],
    "step_adapter_batch_sizes": {0: 1},
    "step_adapter_names": ["a"],
    "prompt_group_sizes": [1],
    "dynamic_global_batch_size": 1,
}


def test_the_read_only_globals_give_the_classic_layout() -> None:
    batch = RolloutBatch.from_train_data(GLOBALS)
    plain = global_to_python(batch.batch_globals)  # tuples and mapping proxies there
    expected = {key: value for key, value in GLOBALS.items() if key != "tokens"}
    assert plain == expected
    assert [type(value) for value in plain.values()] == [list, dict, list, list, int]
    assert copy.deepcopy(plain) == expected  # what pandas does with `attrs`
    assert pickle.loads(pickle.dumps(plain)) == expected


def test_to_pandas_attrs_survive_a_copy() -> None:
    pytest.importorskip("pandas")
    frame = RolloutBatch.from_train_data(GLOBALS).to_pandas()
    expected = {key: value for key, value in GLOBALS.items() if key != "tokens"}
    assert frame.attrs["batch_globals"] == expected
    assert frame.head().attrs["batch_globals"] == expected  # pandas deep-copies attrs
    assert pickle.loads(pickle.dumps(frame)).attrs == frame.copy().attrs


class _Bad:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Bad)

    __hash__ = object.__hash__


def test_a_value_whose_repr_raises_shows_a_placeholder() -> None:
    data = {"tokens": [[1]], "multimodal_train_inputs": [{"x": _Bad()}]}
    batch = RolloutBatch.from_train_data({**data, "multimodal_train_inputs": [_Bad()]})
    assert "<_Bad: repr failed>" in repr(batch)
    assert "&lt;_Bad: repr failed&gt;" in batch._repr_html_()
    assert "{'x': <_Bad: repr" in repr(RolloutBatch.from_train_data(data))  # nested


def test_a_cell_cuts_long_text_and_bytes_before_their_repr() -> None:
    assert _frame._cell("a" * 10**6) == "'" + "a" * 20 + "…"
    assert _frame._cell({"pixels": b"\x00" * 10**6}).startswith("{'pixels': b'\\x00")
    assert len(_frame._cell({"pixels": b"\x00" * 10**6})) == 22
    assert _frame._cell({"a": 1}) == "{'a': 1}"


@settings(max_examples=20, deadline=None)
@given(
    batch=rollout_batches(max_samples=10, cap=6),
    offset=st.integers(-12, 12),
    length=st.none() | st.integers(0, 12),
)
def test_a_slice_is_pythons_slice_of_the_rows(
    batch: RolloutBatch, offset: int, length: int | None
) -> None:
    piece = batch.slice(offset, length)
    start = slice(offset, None).indices(len(batch))[0]
    stop = len(batch) if length is None else min(start + length, len(batch))
    reference = batch.to_train_data()
    assert values_equal(list(piece), _rows(reference, batch)[start:stop])
    assert dict(piece.batch_globals) == dict(batch.batch_globals)  # globals stay whole


@settings(max_examples=20, deadline=None)
@given(batch=rollout_batches(max_samples=10, cap=6), cut=st.integers(0, 10))
def test_concat_of_slices_gives_the_batch_back(batch: RolloutBatch, cut: int) -> None:
    pieces = [batch.slice(0, cut), batch.slice(cut)]
    assert_batches_equal(RolloutBatch.concat(pieces), batch)


def test_concat_of_two_batches_concatenates_per_sample_globals(batch: RolloutBatch) -> None:
    both = RolloutBatch.concat([batch, batch])
    assert len(both) == 8
    assert both.to_train_data()["raw_reward"] == DATA["raw_reward"] * 2
    assert both.to_train_data()["tokens"] == DATA["tokens"] * 2


def test_concat_refuses_other_schemas_and_differing_globals(batch: RolloutBatch) -> None:
    other = RolloutBatch.from_train_data({"tokens": [[1, 2]]})
    with raises_facts(SchemaError, key="batches[1]"):
        RolloutBatch.concat([batch, other])
    changed = RolloutBatch.from_train_data({**DATA, "dynamic_global_batch_size": 8})
    with raises_facts(SchemaError, key="dynamic_global_batch_size"):
        RolloutBatch.concat([batch, changed])
    with raises_facts(SchemaError, key="batches"):
        RolloutBatch.concat([])
    with raises_facts(SchemaTypeError, key="batches[1]"):  # the real index
        RolloutBatch.concat([batch, DATA])  # type: ignore[list-item]
    with raises_facts(SchemaTypeError, key="batches[2]"):
        RolloutBatch.concat([batch, batch, None])  # type: ignore[list-item]


@pytest.mark.parametrize("single", ["batch", "shard"])
def test_concat_of_a_single_batch_asks_for_a_list(batch: RolloutBatch, single: str) -> None:
    value = (
        batch
        if single == "batch"
        else arrow_split.split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    )
    with raises_facts(SchemaTypeError, key="batches", got=type(value).__name__) as caught:
        RolloutBatch.concat(value)  # type: ignore[arg-type]
    assert caught.value.fix == "pass a list, e.g. `[batch]`"


def test_concat_names_the_key_stored_otherwise() -> None:
    strings = RolloutBatch.from_train_data({"tokens": [[1]], "prompt": ["a"]})
    pickles = RolloutBatch.from_train_data({"tokens": [[1]], "prompt": [None]})
    with raises_facts(
        SchemaError, key="prompt", expected="codec='string'", got="codec='pickle'"
    ) as caught:
        RolloutBatch.concat([strings, pickles])
    assert "batch 1" in caught.value.message
    fewer = RolloutBatch.from_train_data({"tokens": [[1]]})
    with raises_facts(SchemaError, key="batches[1]") as caught:
        RolloutBatch.concat([strings, fewer])
    assert "lacks prompt" in caught.value.message


def test_concat_leaves_batches_without_rows_out_of_the_columns_types() -> None:
    experts = np.zeros((1, 2, 3), np.int32)
    full = RolloutBatch.from_train_data(
        {"tokens": [[1, 2], [3, 4]], "rollout_routed_experts": [experts, experts + 1]}
    )
    empty = RolloutBatch.from_train_data({"tokens": [], "rollout_routed_experts": []})
    assert empty.schema != full.schema  # an empty column has no shape
    for pieces in ([empty, full], [full, empty], [empty, full, empty]):
        assert_batches_equal(RolloutBatch.concat(pieces), full)
    assert len(RolloutBatch.concat([empty, empty])) == 0


def test_concat_refuses_whole_batches_mixed_with_slices_of_per_sample_globals() -> None:
    whole = RolloutBatch.from_train_data({"tokens": [[1, 2], [3, 4]], "raw_reward": [1.0, 2.0]})
    with raises_facts(SchemaError, key="raw_reward") as caught:
        RolloutBatch.concat([whole, whole.slice(0, 1)])
    assert caught.value.fix == "concatenate whole batches, or slices of one batch"
    with raises_facts(SchemaError, key="raw_reward"):
        RolloutBatch.concat([whole.slice(1), whole])
    three = [whole.slice(0, 1), whole.slice(1, 1), whole.slice(2)]  # slices: the value once
    assert_batches_equal(RolloutBatch.concat(three), whole)
    assert RolloutBatch.concat([whole, whole])["raw_reward"].tolist() == [1.0, 2.0] * 2


def test_concat_of_narrow_ids_in_other_widths() -> None:
    experts = arrow_split.KNOWN_COLUMNS["rollout_routed_experts"]
    small = {"tokens": [[1, 2]], "rollout_routed_experts": [np.full((1, 1, 1), 3, np.int32)]}
    large = {"tokens": [[1, 2]], "rollout_routed_experts": [np.full((1, 1, 1), 70000, np.int32)]}
    left, right = RolloutBatch.from_train_data(small), RolloutBatch.from_train_data(large)
    assert left.schema != right.schema
    both = RolloutBatch.concat([left, right])
    values = both.to_train_data()["rollout_routed_experts"]
    assert [int(v.ravel()[0]) for v in values] == [3, 70000]
    assert both.specs["rollout_routed_experts"] == experts
    middle = {"tokens": [[1, 2]], "rollout_routed_experts": [np.full((1, 1, 1), 300, np.int32)]}
    narrow = RolloutBatch.concat([left, RolloutBatch.from_train_data(middle)])
    stored = narrow.record_batch.column("rollout_routed_experts").type  # sample, token, layer
    assert stored.value_type.value_type.value_type == pa.uint16()  # not the spec's int32


def test_concat_of_other_expert_shapes_is_a_schema_error() -> None:
    one = {"tokens": [[1, 2]], "rollout_routed_experts": [np.full((1, 1, 1), 3, np.int32)]}
    two = {"tokens": [[1, 2]], "rollout_routed_experts": [np.full((1, 1, 2), 3, np.int32)]}
    batches = [RolloutBatch.from_train_data(one), RolloutBatch.from_train_data(two)]
    with raises_facts(SchemaError, key="rollout_routed_experts", got="(1, 1), (1, 2)"):
        RolloutBatch.concat(batches)


def test_slice_arguments_are_checked(batch: RolloutBatch) -> None:
    with raises_facts(OptionTypeError, key="offset"):
        batch.slice("1")  # type: ignore[arg-type]
    with raises_facts(OptionError, key="length", got="-1", expected=">= 0"):
        batch.slice(0, -1)


@pytest.mark.parametrize("bad", [1.0, True, np.float64(1.0), np.array(1.5), None])
def test_slice_parses_its_ints_as_every_option(batch: RolloutBatch, bad: object) -> None:
    if bad is not None:
        with raises_facts(OptionTypeError, key="offset", mistake="option_type"):
            batch.slice(bad)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="length", mistake="option_type"):
        batch.slice(0, bad if bad is not None else "1")  # type: ignore[arg-type]


def test_slice_takes_ints_in_any_container_and_clamps_as_python(batch: RolloutBatch) -> None:
    first = batch.slice(1, 2)
    for offset, length in ((np.array(1), np.array(2)), (np.int8(1), np.uint64(2)), (1, 2)):
        assert batch.slice(offset, length).equals(first)  # type: ignore[arg-type]
    assert batch.slice(-1).to_train_data()["tokens"] == DATA["tokens"][-1:]
    assert batch.slice(-(2**70)).equals(batch)
    assert len(batch.slice(2**70)) == 0
    assert batch.slice(2, 2**70).to_train_data()["tokens"] == DATA["tokens"][2:]


def test_a_shard_reads_like_its_rows(batch: RolloutBatch) -> None:
    shard = arrow_split.split_train_data_by_dp_raw(batch, 2, balance_data=True)[0]
    assert shard.schema == batch.schema
    assert shard["tokens"].to_pylist() == [DATA["tokens"][i] for i in shard.partition]
    assert list(shard) == list(shard.rows)
    lines = repr(shard).splitlines()
    assert lines[0].startswith("Shard dp_rank=0 (2 of 4 samples): 2 samples")
    assert [line.split()[0] for line in lines[2:4]] == [str(i) for i in shard.partition]
    assert "Shard dp_rank=0" in shard._repr_html_()


def test_a_shard_to_polars_is_its_rows_to_polars(batch: RolloutBatch) -> None:
    pytest.importorskip("polars")
    shard = arrow_split.split_train_data_by_dp_raw(batch, 2, balance_data=False)[0]
    objects = ["multimodal_train_inputs"]  # polars Objects never compare equal
    assert shard.to_polars().drop(objects).equals(shard.rows.to_polars().drop(objects))


def test_a_shard_slice_keeps_partition_plan_and_rank(batch: RolloutBatch) -> None:
    shard = arrow_split.split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    piece = shard.slice(1, 2)
    assert piece.partition.tolist() == shard.partition[1:3].tolist()
    assert not piece.partition.flags.writeable
    assert (piece.plan_key, piece.dp_rank) == (shard.plan_key, shard.dp_rank)
    assert values_equal(list(piece), list(shard)[1:3])


def test_a_shard_indexed_as_miles_dict_points_at_the_right_call(batch: RolloutBatch) -> None:
    shard = arrow_split.split_train_data_by_dp_raw(batch, 2, balance_data=True)[0]
    with raises_facts(ColumnNotFoundError, key="partition"):
        shard["partition"]


def test_a_miles_style_call_on_the_core_points_at_compat_miles() -> None:
    args = Namespace(balance_data=True)
    with raises_facts(SchemaTypeError, key="data_or_batch"):  # names compat.miles' function
        arrow_split.split_train_data_by_dp_raw(args, DATA, dp_size=2)  # type: ignore[call-arg]
    with raises_facts(SchemaTypeError, key="data_or_batch"):
        arrow_split.split_train_data_by_dp_raw(args, DATA, balance_data=True)  # type: ignore[arg-type]


def test_a_wrong_call_of_another_shape_keeps_its_own_error() -> None:
    with raises_facts(
        arrow_split.PlanTypeError, key="dp_size", expected="a positive int", mistake="plan_type"
    ):
        arrow_split.split_train_data_by_dp_raw(DATA, "2", balance_data=True)  # type: ignore[arg-type]


def test_frame_module_has_no_circle_to_the_batch() -> None:
    assert "arrow_split.batch" not in {
        name for name in vars(_frame) if name.startswith("arrow_split")
    }


def test_schedule_reprs_are_short() -> None:
    config = arrow_split.ScheduleConfig(global_batch_size=8, micro_batch_size=2)
    schedule = arrow_split.plan_schedule(np.arange(1, 65), np.arange(64) // 2, 4, config)
    assert len(repr(schedule)) < 200
    assert repr(schedule).startswith("Schedule(strided, dp_size=4, 64 samples, 4 steps")
    assert repr(schedule.ranks[0]).startswith("RankSchedule(dp_rank=0, 16 rows, 8 micro-batches")


def test_pa_types_stay_arrow(batch: RolloutBatch) -> None:
    assert isinstance(batch["tokens"], pa.Array)


class _Custom:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Custom)

    __hash__ = object.__hash__


def test_the_repr_of_a_file_with_untrusted_objects_never_raises(tmp_path: Any) -> None:
    batch = RolloutBatch.from_train_data({"tokens": [[1]], "multimodal_train_inputs": [_Custom()]})
    batch.write(tmp_path / "b.arrow")
    read = RolloutBatch.read(tmp_path / "b.arrow")  # trust_objects=False
    assert "<UntrustedObjectError>" in repr(read)
    assert "&lt;UntrustedObjectError&gt;" in read._repr_html_()
    with pytest.raises(arrow_split.UntrustedObjectError):
        list(read)
