"""The numpy takes of numeric columns equal Arrow's own take, in fresh buffers of their own."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split._codecs._base import arrow_take, take_fixed, take_runs

_LEAVES = [pa.int32(), pa.uint8(), pa.uint16(), pa.float32(), pa.int64(), pa.float64()]


def _owns(result: pa.Array, parent: pa.Array) -> bool:
    """No buffer of ``result`` lies inside a buffer of ``parent`` (no slice view)."""
    mine = [b for b in _all_buffers(result) if b is not None and b.size]
    theirs = [b for b in _all_buffers(parent) if b is not None and b.size]
    return not any(t.address <= m.address < t.address + t.size for m in mine for t in theirs)


def _all_buffers(array: pa.Array) -> list[pa.Buffer | None]:
    return list(array.buffers())


@st.composite
def list_columns(draw: st.DrawFn) -> tuple[pa.Array, np.ndarray]:
    leaf = draw(st.sampled_from(_LEAVES))
    trailing = draw(st.lists(st.integers(1, 3), max_size=2))
    lengths = draw(st.lists(st.integers(0, 6), min_size=1, max_size=12))
    per_row = int(np.prod(trailing)) if trailing else 1
    total = sum(lengths)
    values = pa.array(np.arange(total * per_row) % 200, type=leaf)
    for size in reversed(trailing):
        values = pa.FixedSizeListArray.from_arrays(values, size)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]), type=pa.int64())
    column = pa.LargeListArray.from_arrays(offsets, values)
    start = draw(st.integers(0, len(lengths) - 1))
    column = column.slice(start, draw(st.integers(0, len(lengths) - start)))
    count = draw(st.integers(0, 2 * len(column) + 1))
    indices = draw(
        st.lists(st.integers(0, max(len(column) - 1, 0)), min_size=count, max_size=count)
    )
    rows = np.array(indices if len(column) else [], dtype=np.int64)
    return column, rows


@given(list_columns())
def test_take_runs_equals_arrows_take_in_fresh_buffers(case: tuple[pa.Array, np.ndarray]) -> None:
    column, rows = case
    taken = take_runs(column, rows)
    assert taken.type == column.type
    assert taken.equals(arrow_take(column, rows))
    assert taken.offset == 0
    assert _owns(taken, column)


@given(
    st.sampled_from(_LEAVES),
    st.lists(st.integers(0, 100), min_size=1, max_size=20),
    st.integers(0, 5),
)
@example(pa.int64(), [5], 0)
def test_take_fixed_equals_arrows_take(leaf: pa.DataType, values: list[int], start: int) -> None:
    column = pa.array(values, type=leaf).slice(min(start, len(values) - 1))
    rows = np.arange(len(column))[::-1].copy()
    taken = take_fixed(column, rows)
    assert taken.equals(arrow_take(column, rows))
    assert _owns(taken, column)


@pytest.mark.parametrize(
    "column",
    [
        pa.array([1, None, 3], type=pa.int32()),
        pa.array([True, False, True]),
        pa.array([[1], None, [2, 3]], type=pa.large_list(pa.int32())),
        pa.array([[1], [None], [2, 3]], type=pa.large_list(pa.int32())),
    ],
)
def test_nulls_and_booleans_equal_arrows_take(column: pa.Array) -> None:
    rows = np.array([2, 0], dtype=np.int64)
    take = take_runs if pa.types.is_large_list(column.type) else take_fixed
    assert take(column, rows).equals(arrow_take(column, rows))


@given(
    st.lists(st.booleans(), min_size=1, max_size=40),
    st.integers(0, 20),
    st.lists(st.integers(0, 1_000), max_size=30),
)
def test_booleans_take_bits_in_fresh_buffers(
    values: list[bool], start: int, picks: list[int]
) -> None:
    column = pa.array(values).slice(min(start, len(values) - 1))
    rows = np.array([pick % len(column) for pick in picks] if len(column) else [], dtype=np.int64)
    taken = take_fixed(column, rows)
    assert taken.equals(arrow_take(column, rows))
    assert _owns(taken, column)


@given(list_columns())
def test_columns_of_one_take_share_their_runs(case: tuple[pa.Array, np.ndarray]) -> None:
    column, rows = case
    offsets = column.offsets.to_numpy()  # a column of the same rows, its own offsets buffer
    other = pa.LargeListArray.from_arrays(
        pa.array(offsets.copy(), type=pa.int64()),
        pa.array(np.arange(offsets[-1]) % 7, type=pa.uint8()),
    )
    memo: dict[tuple[bytes, int, int], tuple[pa.Buffer, int, list[slice]]] = {}
    first, second = take_runs(column, rows, memo), take_runs(other, rows, memo)
    assert first.equals(arrow_take(column, rows))
    assert second.equals(arrow_take(other, rows))
    assert _owns(second, other)
    nested = pa.types.is_fixed_size_list(column.type.value_type)
    if not nested:  # the same runs (same rows, one value per row): one entry, shared
        assert len(memo) == 1
