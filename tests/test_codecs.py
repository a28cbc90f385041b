"""Each codec owns its Arrow type: the type of a spec, and the walk back from a type to its spec."""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import ColumnSpec, RolloutBatch
from arrow_split._codecs import codec_for
from arrow_split._codecs._base import numpy_dtype, numpy_view, ragged_values
from arrow_split._codecs._kind import TypeFields
from arrow_split.testing.strategies import train_data

MOE = ColumnSpec("experts", "per_sample_tensor", pa.int32(), storage="narrow")
EXACT = ColumnSpec("scores", "per_sample_tensor", pa.int32())


@given(train_data(max_samples=6, cap=6))
def test_every_column_has_the_type_its_codec_gives_and_reads_back(data: dict[str, Any]) -> None:
    batch = RolloutBatch.from_train_data(data)
    for name in batch.column_names:
        spec, arrow_type = batch.specs[name], batch.column(name).type
        codec = codec_for(spec)
        fields = codec.type_fields(arrow_type)
        assert fields is not None, name
        assert codec.arrow_type(spec, fields) == arrow_type, name
        assert codec.holds(spec, arrow_type), name


@pytest.mark.parametrize(
    ("spec", "arrow_type", "held"),
    [
        (MOE, pa.large_list(pa.list_(pa.list_(pa.uint8(), 2), 3)), True),
        (MOE, pa.large_list(pa.list_(pa.int32(), 2)), True),
        (MOE, pa.large_list(pa.list_(pa.int64(), 2)), False),
        (EXACT, pa.large_list(pa.list_(pa.uint8(), 2)), False),
        (EXACT, pa.large_list(pa.int32()), True),
        (EXACT, pa.list_(pa.int32()), False),
        (ColumnSpec("t", "per_token", pa.int32()), pa.large_list(pa.int32()), True),
        (ColumnSpec("t", "per_token", pa.int32()), pa.large_list(pa.list_(pa.int32(), 2)), False),
        (ColumnSpec("t", "per_token", pa.int32()), pa.int32(), False),
        (ColumnSpec("s", "per_sample_scalar", pa.float64()), pa.float64(), True),
        (ColumnSpec("s", "per_sample_scalar", pa.float64()), pa.float32(), False),
        (ColumnSpec("o", "per_sample_object"), pa.large_binary(), True),
        (ColumnSpec("o", "per_sample_object"), pa.large_string(), False),
        (ColumnSpec("o", "per_sample_object", codec="string"), pa.large_string(), True),
        (
            ColumnSpec("o", "per_sample_object", codec="string_list"),
            pa.large_list(pa.large_string()),
            True,
        ),
    ],
)
def test_a_codec_holds_exactly_the_types_it_makes(
    spec: ColumnSpec, arrow_type: pa.DataType, held: bool
) -> None:
    assert codec_for(spec).holds(spec, arrow_type) is held


def test_the_type_of_a_spec_without_values_has_no_shape_and_the_logical_storage() -> None:
    assert codec_for(MOE).arrow_type(MOE) == pa.large_list(pa.int32())
    narrow = TypeFields(storage=pa.uint16(), trailing=(4, 2))
    expected = pa.large_list(pa.list_(pa.list_(pa.uint16(), 2), 4))
    assert codec_for(MOE).arrow_type(MOE, narrow) == expected


def test_an_encoded_tensor_column_has_the_type_of_its_values() -> None:
    experts = [np.zeros((3, 4, 2), dtype=np.int32), np.ones((1, 4, 2), dtype=np.int32)]
    batch = RolloutBatch.from_train_data(
        {"tokens": [[1, 2, 3, 4], [1, 2]], "experts": experts}, specs=[MOE]
    )
    arrow_type = batch.column("experts").type
    assert arrow_type == codec_for(MOE).arrow_type(MOE, TypeFields(pa.uint8(), (4, 2)))


@given(
    st.lists(st.booleans(), max_size=80),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=0, max_value=80),
)
def test_a_boolean_view_is_the_values_at_any_bit_offset(
    values: list[bool], start: int, length: int
) -> None:
    """Booleans are unpacked by numpy (not Arrow's pool): same values as ``to_numpy``."""
    array = pa.array(values, type=pa.bool_()).slice(start, length)
    view = numpy_view(array)
    assert view.dtype == np.bool_
    assert view.tolist() == array.to_pylist()


def test_unpacking_booleans_allocates_nothing_from_arrows_pools() -> None:
    array = pa.array([True, False, True] * 1000).slice(5)
    pools = [pa.default_memory_pool(), pa.system_memory_pool()]
    for name in ("mimalloc_memory_pool", "jemalloc_memory_pool"):
        with contextlib.suppress(NotImplementedError):  # a pyarrow built without it
            pools.append(getattr(pa, name)())
    before = [pool.bytes_allocated() for pool in pools]
    view = numpy_view(array)
    assert [pool.bytes_allocated() for pool in pools] == before
    assert view.tolist() == array.to_pylist()


NUMBER_TYPES = [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float16(), pa.float32()]


@given(
    st.lists(st.lists(st.integers(0, 100), max_size=5), max_size=12),
    st.sampled_from(NUMBER_TYPES),
    st.integers(0, 14),
    st.integers(0, 14),
    st.integers(0, 3),
)
def test_views_read_from_buffers_are_arrows_values_read_only(
    rows: list[list[int]], value_type: pa.DataType, start: int, length: int, skip: int
) -> None:
    """The buffer reads of number columns (any slice, a sliced child) equal Arrow's own."""
    numbers = np.array([0] * skip + [v for row in rows for v in row], dtype=numpy_dtype(value_type))
    child = pa.array(numbers, type=value_type).slice(skip)  # (older pyarrow: float16 from numpy)
    offsets = np.concatenate([[0], np.cumsum([len(row) for row in rows])]).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), child).slice(start, length)
    values, got_offsets = ragged_values(lists)
    expected = lists.to_pylist()
    assert [values[a:b].tolist() for a, b in itertools.pairwise(got_offsets)] == expected
    assert got_offsets[0] == 0
    scalars = child.slice(start, length)
    view = numpy_view(scalars)
    assert view.tolist() == scalars.to_pylist()
    assert not values.flags.writeable  # never written through
    assert not view.flags.writeable


def test_lists_of_int32_offsets_are_read_by_arrow() -> None:
    lists = pa.array([[1, 2], [], [3]], type=pa.list_(pa.int64())).slice(1)
    values, offsets = ragged_values(lists)
    assert (values.tolist(), offsets.tolist()) == ([3], [0, 0, 1])


def test_a_column_with_nulls_is_refused_as_before() -> None:
    with pytest.raises(pa.ArrowInvalid):
        numpy_view(pa.array([1, None, 3], type=pa.int32()))
