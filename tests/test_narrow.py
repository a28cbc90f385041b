"""Narrow storage of id columns: the type chosen by the values, kept by every shard and dump.

``rollout_routed_experts`` is declared ``storage="narrow"``: its ids are stored in the narrowest
of uint8, uint16 and int32 that holds the batch's values, the spec keeps the logical type
(int32), ``to_train_data`` gives int32 back and ``to_tensors`` widens to ``id_dtype``.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import (
    KNOWN_COLUMNS,
    ColumnSpec,
    DumpError,
    OptionError,
    RolloutBatch,
    SchemaError,
    ValueRangeError,
    shard_for_rank,
    split_train_data_by_dp_raw,
    take_rows,
)
from arrow_split._codecs._base import numpy_dtype
from arrow_split.testing import assert_batches_equal
from tests.error_facts import raises_facts

EXPERTS = "rollout_routed_experts"
LAYERS, TOP_K = 3, 2


def leaf_type(array: pa.Array) -> pa.DataType:
    """The value type inside a column's nested list types."""
    arrow_type = array.type
    while pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        arrow_type = arrow_type.value_type
    return arrow_type


def experts_data(
    high: int, *, low: int = 0, dtype: Any = np.int32, totals: tuple[int, ...] = (4, 1, 7, 3)
) -> dict[str, Any]:
    """Train data whose routed experts hold ids in ``[low, high]``, both bounds present."""
    rng = np.random.default_rng(high)
    experts = [rng.integers(low, high + 1, (n - 1, LAYERS, TOP_K)).astype(dtype) for n in totals]
    if experts[0].size and experts[-1].size:
        experts[0].flat[0], experts[-1].flat[-1] = low, high
    return {
        "tokens": [rng.integers(0, 1000, n).tolist() for n in totals],
        EXPERTS: experts,
    }


def narrow_spec(value_type: pa.DataType) -> ColumnSpec:
    return dataclasses.replace(KNOWN_COLUMNS[EXPERTS], value_type=value_type)


# --- the declaration --------------------------------------------------------------------------


def test_routed_experts_and_indexer_topk_are_declared_narrow_int32() -> None:
    for name in (EXPERTS, "rollout_indexer_topk"):
        spec = KNOWN_COLUMNS[name]
        assert (spec.storage, spec.value_type) == ("narrow", pa.int32())
        assert spec.storage_types == (pa.uint8(), pa.uint16(), pa.int32())
    assert KNOWN_COLUMNS["tokens"].storage == "exact"
    assert KNOWN_COLUMNS["tokens"].storage_types == (pa.int32(),)
    assert KNOWN_COLUMNS["prompt"].storage_types == ()
    assert narrow_spec(pa.int64()).storage_types == (
        pa.uint8(),
        pa.uint16(),
        pa.int32(),
        pa.int64(),
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ("per_token", pa.int32()),
        ("per_sample_scalar", pa.int64()),
        ("per_sample_tensor", pa.float32()),
        ("per_sample_tensor", pa.uint16()),
        ("per_sample_tensor", pa.int32(), None, True),  # a flag column
    ],
)
def test_narrow_storage_needs_a_wide_integer_tensor_column(arguments: tuple[Any, ...]) -> None:
    with raises_facts(SchemaError, key="ids"):
        ColumnSpec("ids", *arguments, storage="narrow")


def test_an_unknown_storage_is_refused() -> None:
    with raises_facts(SchemaError, key="storage"):
        ColumnSpec("ids", "per_sample_tensor", pa.int32(), storage="tiny")  # type: ignore[arg-type]


# --- the type chosen by the values -------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0, 0, pa.uint8()),
        (0, 127, pa.uint8()),  # Qwen3-MoE: 128 experts
        (0, 255, pa.uint8()),  # DeepSeek-V3: 256 experts
        (0, 256, pa.uint16()),
        (0, 65_535, pa.uint16()),
        (0, 65_536, pa.int32()),
        (-1, 5, pa.int32()),  # negative ids keep the logical type
        (-(2**31), 2**31 - 1, pa.int32()),
    ],
)
def test_narrowing_picks_the_narrowest_type_that_holds_the_values(
    low: int, high: int, expected: pa.DataType
) -> None:
    data = experts_data(high, low=low, dtype=np.int64)
    batch = RolloutBatch.from_train_data(data)
    assert leaf_type(batch.column(EXPERTS)) == expected
    assert batch.specs[EXPERTS].value_type == pa.int32()  # the spec keeps the logical type
    out = batch.to_train_data()[EXPERTS]
    for given_array, got in zip(data[EXPERTS], out, strict=True):  # type: ignore[call-overload]
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, given_array)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int32, np.int64, np.uint64])
def test_the_input_dtype_does_not_change_the_choice(dtype: Any) -> None:
    batch = RolloutBatch.from_train_data(experts_data(100, dtype=dtype))
    assert leaf_type(batch.column(EXPERTS)) == pa.uint8()


def test_python_lists_narrow_too() -> None:
    data = experts_data(300)
    data[EXPERTS] = [array.tolist() for array in data[EXPERTS]]
    batch = RolloutBatch.from_train_data(data)
    assert leaf_type(batch.column(EXPERTS)) == pa.uint16()
    assert [a.tolist() for a in batch.to_train_data()[EXPERTS]] == data[EXPERTS]  # type: ignore[attr-defined]


def test_an_int64_logical_column_keeps_int64_only_beyond_int32() -> None:
    specs = [narrow_spec(pa.int64())]
    wide = RolloutBatch.from_train_data(experts_data(2**31, dtype=np.int64), specs=specs)
    assert leaf_type(wide.column(EXPERTS)) == pa.int64()
    medium = RolloutBatch.from_train_data(experts_data(2**31 - 1, dtype=np.int64), specs=specs)
    assert leaf_type(medium.column(EXPERTS)) == pa.int32()
    assert medium.to_train_data()[EXPERTS][0].dtype == np.int64  # type: ignore[index]


def test_empty_samples_and_batches_narrow_to_uint8() -> None:
    data = experts_data(9, totals=(1, 1))
    batch = RolloutBatch.from_train_data(data)
    assert leaf_type(batch.column(EXPERTS)) == pa.uint8()
    assert [a.shape for a in batch.to_train_data()[EXPERTS]] == [(0, LAYERS, TOP_K)] * 2  # type: ignore[attr-defined]
    empty = RolloutBatch.from_train_data({"tokens": [], EXPERTS: []})
    assert leaf_type(empty.column(EXPERTS)) == pa.uint8()


def test_declared_exact_keeps_int32() -> None:
    exact = dataclasses.replace(KNOWN_COLUMNS[EXPERTS], storage="exact")
    batch = RolloutBatch.from_train_data(experts_data(7), specs=[exact])
    assert leaf_type(batch.column(EXPERTS)) == pa.int32()
    narrow = RolloutBatch.from_train_data(experts_data(7))
    assert narrow.column(EXPERTS).nbytes < batch.column(EXPERTS).nbytes
    assert_equal_values(narrow, batch)


def assert_equal_values(left: RolloutBatch, right: RolloutBatch) -> None:
    for got, expected in zip(
        left.to_train_data()[EXPERTS],  # type: ignore[call-overload]
        right.to_train_data()[EXPERTS],  # type: ignore[call-overload]
        strict=True,
    ):
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("value", "dtype", "match"),
    [
        (2**31, np.int64, r"`rollout_routed_experts` value 2147483648 is out of range for int32"),
        (-(2**31) - 1, np.int64, r"`rollout_routed_experts` value -2147483649 is out of range"),
        (2**63, np.uint64, r"`rollout_routed_experts` value 9223372036854775808 is out of range"),
    ],
)
def test_values_out_of_the_logical_range_are_rejected(value: int, dtype: Any, match: str) -> None:
    data = experts_data(5, dtype=dtype)
    data[EXPERTS][2].flat[3] = value
    with raises_facts(ValueRangeError, key="rollout_routed_experts", sample=2, position=3):
        RolloutBatch.from_train_data(data)


def test_a_wide_input_is_never_copied_wide() -> None:
    """int64 ids of 8 MB narrow to 1 MB: the encode's numpy peak stays far below the input."""
    rng = np.random.default_rng(3)
    experts = [rng.integers(0, 128, (4095, 8, 4), dtype=np.int64) for _ in range(8)]
    data = {"tokens": [np.zeros(4096, np.int32)] * 8, EXPERTS: experts}
    input_bytes = sum(array.nbytes for array in experts)
    tracemalloc.start()
    try:
        batch = RolloutBatch.from_train_data(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert leaf_type(batch.column(EXPERTS)) == pa.uint8()
    assert peak < input_bytes // 4, (peak, input_bytes)


# --- every shard of a step has the batch's type ------------------------------------------------


@pytest.mark.parametrize("balance_data", [False, True])
def test_every_rank_sees_the_same_arrow_type(balance_data: bool) -> None:
    """One sample holds id 300: every shard is uint16, even those whose ids would fit uint8."""
    data = experts_data(200, totals=(5, 9, 3, 12, 7, 8, 2, 6))
    data[EXPERTS][3].flat[0] = 300
    batch = RolloutBatch.from_train_data(data)
    expected = batch.column(EXPERTS).type
    assert leaf_type(batch.column(EXPERTS)) == pa.uint16()
    shards = split_train_data_by_dp_raw(batch, 4, balance_data=balance_data)
    assert any(int(np.max(s.rows.to_train_data()[EXPERTS][0])) < 256 for s in shards)  # type: ignore[index]
    for rank, shard in enumerate(shards):
        assert shard.column(EXPERTS).type == expected
        alone = shard_for_rank(batch, rank, 4, balance_data=balance_data)
        assert alone.column(EXPERTS).type == expected
        assert alone.equals(shard)


@given(
    bounds=st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**31), 2**31 - 1)),
    totals=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    dtype=st.sampled_from([np.int32, np.int64]),
    seed=st.integers(0, 2**16),
)
@example(bounds=(0, 255), totals=[1, 2], dtype=np.int64, seed=0)
@example(bounds=(0, 256), totals=[3], dtype=np.int32, seed=0)
def test_stored_type_is_the_narrowest_and_values_round_trip(
    bounds: tuple[int, int], totals: list[int], dtype: Any, seed: int
) -> None:
    low, high = sorted(bounds)
    rng = np.random.default_rng(seed)
    experts = [rng.integers(low, high, (n - 1, LAYERS, TOP_K), endpoint=True) for n in totals]
    experts = [array.astype(dtype) for array in experts]
    batch = RolloutBatch.from_train_data({"tokens": [[0] * n for n in totals], EXPERTS: experts})
    values = np.concatenate([a.reshape(-1) for a in experts])
    lo, hi = (int(values.min()), int(values.max())) if values.size else (0, 0)
    fits = [t for t in (pa.uint8(), pa.uint16(), pa.int32()) if _holds(t, lo, hi)]
    assert leaf_type(batch.column(EXPERTS)) == fits[0]
    shard = take_rows(batch, np.arange(len(totals))[::-1].copy())
    assert shard.column(EXPERTS).type == batch.column(EXPERTS).type
    for got, expected in zip(shard.rows.to_train_data()[EXPERTS], experts[::-1], strict=True):  # type: ignore[call-overload]
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)


def _holds(arrow_type: pa.DataType, low: int, high: int) -> bool:
    info = np.iinfo(numpy_dtype(arrow_type))
    return bool(info.min <= low and high <= info.max)


# --- dumps -------------------------------------------------------------------------------------


@pytest.mark.parametrize("high", [100, 1000, 100_000])
def test_a_dump_round_trips_a_narrow_column(tmp_path: Path, high: int) -> None:
    batch = RolloutBatch.from_train_data(experts_data(high))
    path = tmp_path / "step.arrow"
    batch.write(path)
    read = RolloutBatch.read(path)
    assert read.column(EXPERTS).type == batch.column(EXPERTS).type
    assert read.specs[EXPERTS] == KNOWN_COLUMNS[EXPERTS]
    assert_batches_equal(read, batch)
    assert_equal_values(read, batch)


def test_a_dump_of_an_int32_column_reads_under_the_narrow_spec(tmp_path: Path) -> None:
    """What a dump written before narrow storage holds: int32 ids, read as they are."""
    exact = dataclasses.replace(KNOWN_COLUMNS[EXPERTS], storage="exact")
    batch = RolloutBatch.from_train_data(experts_data(9), specs=[exact])
    record_batch = batch.record_batch
    specs = {**batch.specs, EXPERTS: KNOWN_COLUMNS[EXPERTS]}
    path = tmp_path / "old.arrow"
    RolloutBatch(record_batch, specs).write(path)
    read = RolloutBatch.read(path)
    assert leaf_type(read.column(EXPERTS)) == pa.int32()
    assert_equal_values(read, batch)


def test_a_dump_whose_column_type_its_spec_cannot_store_is_refused(tmp_path: Path) -> None:
    """A uint16 column under an exact int32 spec is not a dump this library wrote."""
    batch = RolloutBatch.from_train_data(experts_data(1000))
    exact = dataclasses.replace(KNOWN_COLUMNS[EXPERTS], storage="exact")
    path = tmp_path / "bad.arrow"
    RolloutBatch(batch.record_batch, {**batch.specs, EXPERTS: exact}).write(path)
    with raises_facts(DumpError, path=str(path), key=EXPERTS):
        RolloutBatch.read(path)


# --- to_tensors widens -------------------------------------------------------------------------


@pytest.mark.torch
class TestToTensors:
    torch = pytest.importorskip("torch")

    @staticmethod
    def shard(high: int = 100) -> Any:
        batch = RolloutBatch.from_train_data(experts_data(high))
        return split_train_data_by_dp_raw(batch, 2, balance_data=False)[1]

    @pytest.mark.parametrize("layout", ["per_sample", "packed", "padded", "nested"])
    @pytest.mark.parametrize("high", [100, 1000])
    def test_int32_by_default_in_every_layout(self, layout: str, high: int) -> None:
        from arrow_split.torch import to_tensors

        shard = self.shard(high)
        expected = shard.rows.to_train_data()[EXPERTS]
        tensors = to_tensors(shard, layout=layout)  # type: ignore[arg-type]
        experts = tensors[EXPERTS]
        if layout == "per_sample":
            assert all(t.dtype == self.torch.int32 for t in experts)  # type: ignore[union-attr]
            got = [t.numpy() for t in experts]  # type: ignore[union-attr]
        else:
            assert experts.dtype == self.torch.int32  # type: ignore[union-attr]
            got = self.split(shard, experts, layout)
        for array, want in zip(got, expected, strict=True):  # type: ignore[call-overload]
            np.testing.assert_array_equal(array, want)

    @staticmethod
    def split(shard: Any, experts: Any, layout: str) -> list[np.ndarray]:
        rows = [len(a) for a in shard.rows.to_train_data()[EXPERTS]]
        if layout == "packed":
            return [t.numpy() for t in experts.split(rows)]
        if layout == "nested":
            return [t.numpy() for t in experts.unbind()]
        return [experts[i, :n].numpy() for i, n in enumerate(rows)]

    def test_int64_on_request_and_the_stored_type_with_none(self) -> None:
        from arrow_split.torch import to_tensors

        shard = self.shard(1000)
        wide = to_tensors(shard, layout="packed", id_dtype=self.torch.int64)[EXPERTS]
        assert wide.dtype == self.torch.int64  # type: ignore[union-attr]
        stored = to_tensors(shard, layout="packed", id_dtype=None)[EXPERTS]
        assert stored.dtype == self.torch.uint16  # type: ignore[union-attr]
        assert self.torch.equal(stored.to(self.torch.int64), wide)  # type: ignore[union-attr,arg-type]
        buffer = shard.column(EXPERTS).values.values.values.buffers()[1]
        assert stored.data_ptr() == buffer.address  # type: ignore[union-attr]  # zero-copy

    def test_with_a_device_the_narrow_ids_move_then_widen(self) -> None:
        from arrow_split.torch import to_tensors

        shard = self.shard(1000)
        for layout in ("per_sample", "packed"):
            experts = to_tensors(shard, layout=layout, device="meta")[EXPERTS]  # type: ignore[arg-type]
            for tensor in experts if isinstance(experts, list) else [experts]:
                assert (tensor.dtype, tensor.device.type) == (self.torch.int32, "meta")

    def test_a_column_stored_wider_than_id_dtype_is_refused(self) -> None:
        from arrow_split.torch import to_tensors

        data = experts_data(2**31, dtype=np.int64)
        batch = RolloutBatch.from_train_data(data, specs=[narrow_spec(pa.int64())])
        with raises_facts(ValueRangeError, key=EXPERTS):
            to_tensors(batch)
        assert to_tensors(batch, id_dtype=self.torch.int64)[EXPERTS][-1].max() == 2**31  # type: ignore[union-attr]

    def test_an_unknown_id_dtype_is_refused(self) -> None:
        from arrow_split.torch import to_tensors

        with raises_facts(OptionError, key="id_dtype"):
            to_tensors(self.shard(), id_dtype=self.torch.uint8)
