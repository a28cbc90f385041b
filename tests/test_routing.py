"""A rank's slice of the routed experts equals slicing the full result, as a replay cuts it.

The reference is plain Python over the full per-sample arrays: one pad row for the last token,
then (``cp_size > 1``) the sequence padded to ``2 x cp_size`` chunks, chunks ``r`` and
``2 x cp_size - 1 - r`` kept, then the stage's layers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    KNOWN_COLUMNS,
    ColumnNotFoundError,
    OptionError,
    OptionTypeError,
    PlanError,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
    ValueRangeError,
    take_rows,
)
from arrow_split.routing import ParallelPlace, expert_id_dtype, take_expert_slice
from arrow_split.schema import ROUTED_EXPERTS
from tests.error_facts import raises_facts


def make_data(lengths: list[int], layers: int, top_k: int, high: int, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    return {
        "tokens": [rng.integers(0, 100, n).tolist() for n in lengths],
        ROUTED_EXPERTS: [
            rng.integers(0, high, (n - 1, layers, top_k)).astype(np.int32) for n in lengths
        ],
    }


def reference(experts: np.ndarray, place: ParallelPlace, layers: range) -> np.ndarray:
    """One sample's replay rows for ``place``: plain Python, row by row."""
    rows = [experts[j].tolist() for j in range(len(experts))]
    pad_row = [[-1] * experts.shape[2] for _ in range(experts.shape[1])]
    rows.append(pad_row)  # the last token has no routing
    if place.cp_size > 1:
        parts = 2 * place.cp_size
        chunk = (len(rows) + parts - 1) // parts
        rows += [pad_row] * (parts * chunk - len(rows))
        first, second = place.cp_rank, parts - 1 - place.cp_rank
        rows = (
            rows[first * chunk : (first + 1) * chunk] + rows[second * chunk : (second + 1) * chunk]
        )
    sliced = [[row[layer] for layer in layers] for row in rows]
    shape = (len(sliced), len(layers), experts.shape[2])
    return np.array(sliced, dtype=np.int64).reshape(shape)


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[int], int, int, ParallelPlace, list[int]]:
    lengths = draw(st.lists(st.integers(1, 23), min_size=1, max_size=6))
    pp_size = draw(st.integers(1, 4))
    layers = pp_size * draw(st.integers(1, 3))
    top_k = draw(st.integers(1, 3))
    cp_size = draw(st.integers(1, 4))
    place = ParallelPlace(
        pp_size=pp_size,
        pp_rank=draw(st.integers(0, pp_size - 1)),
        cp_size=cp_size,
        cp_rank=draw(st.integers(0, cp_size - 1)),
    )
    rows = draw(st.lists(st.integers(0, len(lengths) - 1), max_size=6))
    return lengths, layers, top_k, place, rows


@given(layouts(), st.sampled_from([200, 256, 300]))
@example(([1, 2, 3], 4, 2, ParallelPlace(4, 3, 3, 1), [0, 1, 2]), 256)  # all-pad chunks
@example(([5], 2, 1, ParallelPlace(), []), 256)  # no rows
def test_the_slice_equals_slicing_the_full_result(layout: Any, high: int) -> None:
    lengths, layers, top_k, place, rows = layout
    data = make_data(lengths, layers, top_k, high)
    batch = RolloutBatch.from_train_data(data)
    expert_slice = take_expert_slice(batch, place, rows)
    stage = place.layers(layers)
    assert len(stage) == layers // place.pp_size
    padded = expert_slice.padded()
    assert len(padded) == len(rows)
    for sample, row in enumerate(rows):
        expected = reference(data[ROUTED_EXPERTS][row], place, stage)
        np.testing.assert_array_equal(padded[sample], expected)
        held = expert_slice.values[expert_slice.offsets[sample] : expert_slice.offsets[sample + 1]]
        np.testing.assert_array_equal(held, expected[expected[:, 0, 0] >= 0])
    top = max((int(a.max()) for a in data[ROUTED_EXPERTS] if a.size), default=0)
    assert expert_slice.values.dtype == (np.uint8 if top < 256 else np.uint16)
    assert expert_slice.column.type == expert_slice.field.type
    assert expert_slice.column.to_pylist() == [
        expert_slice.values[a:b].tolist()
        for a, b in zip(expert_slice.offsets[:-1], expert_slice.offsets[1:], strict=True)
    ]


def test_the_column_says_which_layers_and_chunks_it_holds() -> None:
    batch = RolloutBatch.from_train_data(make_data([9, 5], 8, 2, 256))
    place = ParallelPlace(pp_size=4, pp_rank=1, cp_size=2, cp_rank=1)
    expert_slice = take_expert_slice(batch, place, [1, 0])
    assert expert_slice.field.metadata == {
        b"arrow_split.layers": b"2:4/8",
        b"arrow_split.cp": b"1/2",
    }
    assert expert_slice.layers == range(2, 4)
    # sample 9 tokens: chunks of 3, rank 1 holds tokens [3, 6) and [6, 9): routing rows 3..7
    assert expert_slice.ranges[1].tolist() == [[3, 6], [6, 8]]
    assert expert_slice.padded_lengths.tolist() == [4, 6]  # 5 tokens: chunks of 2
    assert not expert_slice.values.flags.writeable


def test_a_shard_and_uneven_stages() -> None:
    data = make_data([4, 7, 3], 6, 2, 100)
    batch = RolloutBatch.from_train_data(data)
    shard = take_rows(batch, np.array([2, 0]))
    place = ParallelPlace(pp_size=3, pp_rank=2, stage_layers=(1, 2, 3))
    expert_slice = take_expert_slice(shard, place)
    assert expert_slice.layers == range(3, 6)
    np.testing.assert_array_equal(expert_slice.values[:2], data[ROUTED_EXPERTS][2][:, 3:])


def test_bytes_are_one_over_pp_times_cp() -> None:
    lengths = [512] * 8
    batch = RolloutBatch.from_train_data(make_data(lengths, 16, 4, 256))
    full = take_rows(batch, np.arange(8)).column(ROUTED_EXPERTS).nbytes
    for pp_rank in range(4):
        for cp_rank in range(2):
            place = ParallelPlace(pp_size=4, pp_rank=pp_rank, cp_size=2, cp_rank=cp_rank)
            assert take_expert_slice(batch, place).nbytes <= full / 8 * 1.05


@pytest.mark.parametrize(
    ("num_experts", "dtype"),
    [(1, np.uint8), (256, np.uint8), (257, np.uint16), (65_536, np.uint16), (65_537, np.int32)],
)
def test_ids_as_narrow_as_the_expert_count(num_experts: int, dtype: type) -> None:
    assert expert_id_dtype(num_experts) == np.dtype(dtype)


def test_an_expert_count_past_int32_is_an_option_error() -> None:
    # an argument out of range (it was a ValueRangeError without a key)
    assert expert_id_dtype(2**31) == np.dtype(np.int32)
    with raises_facts(OptionError, key="num_experts", got=str(2**40)) as caught:
        expert_id_dtype(2**40)
    assert caught.value.mistake == "option_value"
    with raises_facts(OptionTypeError, key="num_experts"):
        expert_id_dtype(8.0)  # type: ignore[arg-type]


def test_ints_in_any_container_as_at_every_door() -> None:
    torch = pytest.importorskip("torch")
    # a 0-d numpy array or tensor is an int, as for `dp_rank` (they were OptionTypeErrors)
    place = ParallelPlace(pp_size=np.array(2), pp_rank=np.int64(1), cp_size=torch.tensor(2))
    assert (place.pp_size, place.pp_rank, place.cp_size) == (2, 1, 2)
    assert type(place.pp_size) is int
    assert type(place.cp_size) is int
    assert expert_id_dtype(np.array(8)) == np.dtype(np.uint8)
    with raises_facts(OptionTypeError, key="cp_size"):
        ParallelPlace(cp_size=np.array(2.0))


def test_an_int32_column_narrowed_by_num_experts() -> None:
    exact = dataclasses.replace(KNOWN_COLUMNS[ROUTED_EXPERTS], storage="exact")
    data = make_data([5, 6], 4, 2, 256)
    batch = RolloutBatch.from_train_data(data, specs=[exact])
    assert take_expert_slice(batch, ParallelPlace()).values.dtype == np.int32
    narrowed = take_expert_slice(batch, ParallelPlace(), num_experts=256)
    assert narrowed.values.dtype == np.uint8
    np.testing.assert_array_equal(narrowed.values[:4], data[ROUTED_EXPERTS][0])
    with raises_facts(
        ValueRangeError, key="rollout_routed_experts", got="255", expected="below 200"
    ):
        take_expert_slice(batch, ParallelPlace(), num_experts=200)


@pytest.mark.parametrize(
    ("place", "error", "facts"),
    [
        (ParallelPlace(pp_size=5), PlanError, {"key": "pp_size"}),  # more stages than layers
        (ParallelPlace(pp_size=3), PlanError, {"key": "pp_size"}),  # 4 layers, 3 stages
        (ParallelPlace(pp_size=2, stage_layers=(1, 2)), PlanError, {"key": "stage_layers"}),
        (ParallelPlace(cp_size=2, cp_pad=False), PlanError, {"key": "cp_size", "sample": 1}),
    ],
)
def test_a_layout_that_does_not_fit(
    place: ParallelPlace, error: type, facts: dict[str, Any]
) -> None:
    batch = RolloutBatch.from_train_data(make_data([8, 5], 4, 2, 256))
    with raises_facts(error, **facts):
        take_expert_slice(batch, place)


@pytest.mark.parametrize(
    ("arguments", "error", "facts"),
    [
        ({"pp_size": 0}, OptionError, {"key": "pp_size", "expected": ">= 1 and <= 1048575"}),
        ({"cp_size": 2**62}, OptionError, {"key": "cp_size"}),  # 2 x cp_size past int64
        ({"stage_layers": np.array(4)}, OptionTypeError, {"key": "stage_layers"}),
        (
            {"pp_size": 2, "pp_rank": 2},
            OptionError,
            {"key": "pp_rank", "expected": ">= 0 and <= 1"},
        ),
        ({"cp_size": 2, "cp_rank": -1}, OptionError, {"key": "cp_rank", "got": "-1"}),
        ({"cp_size": 2.0}, OptionTypeError, {"key": "cp_size"}),
        ({"cp_size": True}, OptionTypeError, {"key": "cp_size"}),
        ({"pp_size": 2, "stage_layers": (3,)}, OptionError, {"key": "stage_layers"}),
        ({"stage_layers": "4"}, OptionTypeError, {"key": "stage_layers"}),
        ({"stage_layers": (0,)}, OptionError, {"key": "stage_layers", "expected": ">= 1"}),
        ({"cp_pad": "no"}, OptionTypeError, {"key": "cp_pad", "mistake": "flag_type"}),
    ],
)
def test_a_bad_place(arguments: dict[str, Any], error: type, facts: dict[str, Any]) -> None:
    with raises_facts(error, **facts) as caught:
        ParallelPlace(**arguments)
    assert type(caught.value) is error


def test_bad_arguments_of_the_take() -> None:
    batch = RolloutBatch.from_train_data(make_data([8, 5], 4, 2, 256))
    with raises_facts(ColumnNotFoundError, key="experts"):
        take_expert_slice(batch, ParallelPlace(), column="experts")
    with raises_facts(SchemaError, key="tokens"):
        take_expert_slice(batch, ParallelPlace(), column="tokens")
    with raises_facts(OptionError, key="rows", got="2"):
        take_expert_slice(batch, ParallelPlace(), [2])
    with raises_facts(OptionTypeError, key="place"):
        take_expert_slice(batch, (4, 0), [0])  # type: ignore[arg-type]
    with raises_facts(SchemaTypeError, key="source", mistake="data_type"):  # was OptionTypeError
        take_expert_slice({"tokens": []}, ParallelPlace())  # type: ignore[arg-type]
    with raises_facts(SchemaTypeError, key="source", mistake="data_type"):
        take_expert_slice(None, ParallelPlace())  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="column", mistake="option_type"):  # was a KeyError
        take_expert_slice(batch, ParallelPlace(), column=1)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="rows", mistake="option_type"):
        take_expert_slice(batch, ParallelPlace(), [0.0])
    with raises_facts(OptionError, key="rows", got="2", mistake="option_value"):
        take_expert_slice(batch, ParallelPlace(), np.array([2]))
    assert pa.types.is_large_list(take_expert_slice(batch, ParallelPlace()).column.type)


def test_an_id_above_the_narrow_type_is_caught_before_the_cast() -> None:
    exact = dataclasses.replace(KNOWN_COLUMNS[ROUTED_EXPERTS], storage="exact")
    data = make_data([5, 6], 4, 2, 256)
    data[ROUTED_EXPERTS][1][0, 0, 0] = 300  # 300 as uint8 would read 44
    batch = RolloutBatch.from_train_data(data, specs=[exact])
    with raises_facts(
        ValueRangeError, key="rollout_routed_experts", got="300", expected="below 256"
    ):
        take_expert_slice(batch, ParallelPlace(), num_experts=256)


def test_a_negative_id_is_not_wrapped_into_an_expert() -> None:
    exact = dataclasses.replace(KNOWN_COLUMNS[ROUTED_EXPERTS], storage="exact")
    data = make_data([5, 6], 4, 2, 256)
    data[ROUTED_EXPERTS][0][1, 2, 1] = -1  # as uint8 it would read expert 255
    batch = RolloutBatch.from_train_data(data, specs=[exact])
    with raises_facts(ValueRangeError, key=ROUTED_EXPERTS, got="-1", expected="below 256"):
        take_expert_slice(batch, ParallelPlace(), num_experts=256)


def test_stage_layers_from_an_array() -> None:
    place = ParallelPlace(pp_size=2, pp_rank=1, stage_layers=np.array([1, 3]))
    assert place.stage_layers == (1, 3)
    assert place.layers(4) == range(1, 4)


def test_the_padded_layout_holds_every_id_and_the_pad_value_or_says_why() -> None:
    data = make_data([5, 6], 4, 2, 100)
    data[ROUTED_EXPERTS][1][0, 0, 0] = 200
    expert_slice = take_expert_slice(RolloutBatch.from_train_data(data), ParallelPlace())
    assert expert_slice.padded(pad_value=0, dtype=np.uint8)[1][0, 0, 0] == 200
    with raises_facts(ValueRangeError, key=ROUTED_EXPERTS, got="200", expected="in [-128, 127]"):
        expert_slice.padded(dtype=np.int8)  # 200 as int8 would read -56
    with raises_facts(OptionError, key="pad_value", got="-1"):
        expert_slice.packed(dtype=np.uint8)  # the default pad -1 is not a uint8
    with raises_facts(OptionTypeError, key="pad_value"):
        expert_slice.packed(pad_value=1.5)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="dtype"):  # no dtype at all: a type mistake
        expert_slice.packed(dtype="nope")
    for dtype in (np.float32, object):  # a dtype of the wrong kind: a value mistake (as id_dtype)
        with raises_facts(OptionError, key="dtype", got=str(np.dtype(dtype))) as caught:
            expert_slice.packed(dtype=dtype)
        assert type(caught.value) is OptionError


def test_an_empty_batch_says_it_has_nothing_to_slice() -> None:
    empty = RolloutBatch.from_train_data({"tokens": [], ROUTED_EXPERTS: []})
    with raises_facts(SchemaError, key=ROUTED_EXPERTS, got="no samples"):
        take_expert_slice(empty, ParallelPlace())
