"""Tensors of the reused block equal to_tensors' values; the device copy, where CUDA is."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from tests.error_facts import raises_facts

torch = pytest.importorskip("torch")

from arrow_split import (  # noqa: E402
    ColumnSpec,
    OptionError,
    OptionTypeError,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
    ValueRangeError,
    take_rows,
)
from arrow_split.routing import ParallelPlace, take_expert_slice  # noqa: E402
from arrow_split.schema import ROUTED_EXPERTS  # noqa: E402
from arrow_split.testing import WORKLOADS, make_train_data  # noqa: E402
from arrow_split.torch import TensorBlock, expert_tensors, to_tensors  # noqa: E402

pytestmark = pytest.mark.torch


def batch_with_experts() -> RolloutBatch:
    import dataclasses

    config = dataclasses.replace(WORKLOADS["tiny"], moe_shape=(4, 2))
    return RolloutBatch.from_train_data(make_train_data(config))


def assert_like_to_tensors(tensors: dict[str, Any], expected: dict[str, Any]) -> None:
    for name, values in tensors.items():
        if name not in expected:
            continue
        want = expected[name]
        if isinstance(values, list):
            assert len(values) == len(want)
            for mine, theirs in zip(values, want, strict=True):
                assert torch.equal(mine.to(theirs.dtype), theirs)
        else:
            assert torch.equal(values.to(want.dtype), want), name


def test_the_views_hold_what_to_tensors_gives_and_share_the_block() -> None:
    batch = batch_with_experts()
    rows = np.array([5, 1, 3])
    block = TensorBlock(pin=False)
    tensors = block.fill(batch, rows, layout="per_sample")
    expected = to_tensors(take_rows(batch, rows), layout="per_sample", id_dtype=None)
    assert set(expected) <= set(tensors)
    assert_like_to_tensors(tensors, expected)
    start, end = block.host.data_ptr(), block.host.data_ptr() + block.host.numel()
    for values in tensors.values():
        for tensor in values if isinstance(values, list) else [values]:
            assert tensor.numel() == 0 or start <= tensor.data_ptr() < end
    packed = block.fill(batch, rows)
    offsets = packed["tokens_offsets"]
    assert torch.equal(offsets, torch.tensor(take_rows(batch, rows).numeric_columns()[0].offsets))
    assert block.to_device()["tokens"].data_ptr() == packed["tokens"].data_ptr()  # no device


def test_the_host_block_is_not_reallocated_after_warm_up() -> None:
    batch = batch_with_experts()
    block = TensorBlock(pin=False)
    block.fill(batch, np.arange(8))
    pointer = block.host.data_ptr()
    for step in range(3):
        block.fill(batch, np.arange(step, 8, 2))
        assert block.host.data_ptr() == pointer
    assert block.block.allocations == 1


def test_errors() -> None:
    if not torch.cuda.is_available():
        with raises_facts(OptionError, key="device"):
            TensorBlock("cuda")
        with raises_facts(OptionError, key="pin", got="True"):
            TensorBlock(pin=True)  # page-locked memory needs CUDA: refused here, not at a fill
    with raises_facts(OptionError, key="to_device"):
        TensorBlock().to_device()
    with raises_facts(OptionError, key="layout"):
        TensorBlock().fill(batch_with_experts(), layout="padded")  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["per_sample", "packed"])
def test_expert_tensors_are_the_zigzag_layout(layout: str) -> None:
    batch = batch_with_experts()
    place = ParallelPlace(pp_size=2, pp_rank=1, cp_size=2, cp_rank=0)
    expert_slice = take_expert_slice(batch, place, [0, 2])
    tensors = expert_tensors(expert_slice, layout=layout)  # type: ignore[arg-type]
    padded = expert_slice.padded()
    name = expert_slice.field.name
    if layout == "packed":
        assert torch.equal(tensors[name], torch.from_numpy(np.concatenate(padded)))
        assert tensors["cu_seqlens"].tolist() == [
            0,
            len(padded[0]),
            len(padded[0]) + len(padded[1]),
        ]
    else:
        assert [t.tolist() for t in tensors[name]] == [p.tolist() for p in padded]
    assert tensors[name][0].dtype == torch.int32


def test_expert_tensors_refuse_an_id_dtype_too_narrow_for_the_ids() -> None:
    batch = batch_with_experts()
    expert_slice = take_expert_slice(batch, ParallelPlace(), [0], num_experts=65_536)
    assert expert_tensors(expert_slice, id_dtype=torch.int16)[expert_slice.field.name]
    wide = RolloutBatch.from_train_data(
        {"tokens": [[1, 2]], ROUTED_EXPERTS: [np.array([[[40_000]]], dtype=np.int32)]}
    )
    with raises_facts(ValueRangeError, key=ROUTED_EXPERTS, got="40000"):
        expert_tensors(take_expert_slice(wide, ParallelPlace()), id_dtype=torch.int16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a torch without a CUDA device")
def test_a_device_this_process_lacks_is_an_option_error() -> None:
    batch = batch_with_experts()
    expert_slice = take_expert_slice(batch, ParallelPlace(), [0])
    with raises_facts(OptionError, key="device", got="cuda"):
        expert_tensors(expert_slice, device="cuda")
    with raises_facts(OptionError, key="device", got="cuda:0"):
        to_tensors(take_rows(batch, [0]), device=torch.device("cuda:0"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_block_reaches_the_device_in_one_copy_and_waits_before_reuse() -> None:
    batch = batch_with_experts()
    block = TensorBlock("cuda")
    assert block.pinned
    assert block.host.is_pinned()
    for step in range(3):
        rows = np.arange(step, 8, 2)
        host = block.fill(batch, rows)
        expected = {k: v.clone() for k, v in host.items() if isinstance(v, torch.Tensor)}
        on_device = block.to_device()
        for name, tensor in expected.items():
            assert on_device[name].is_cuda
            assert torch.equal(on_device[name].cpu(), tensor)
    assert block.block.allocations == 1


def test_a_cpu_device_gets_a_copy_of_the_block() -> None:
    batch = batch_with_experts()
    block = TensorBlock("cpu", pin=False)
    host = block.fill(batch, np.arange(4))
    copied = block.to_device()
    assert torch.equal(copied["tokens"], host["tokens"])
    assert copied["tokens"].data_ptr() != host["tokens"].data_ptr()


def test_a_column_named_as_a_layout_key_is_a_schema_error() -> None:
    spec = ColumnSpec("tokens_offsets", "per_sample_scalar", pa.int64())
    data = {"tokens": [[1, 2, 3], [4, 5]], "response_lengths": [1, 1], "tokens_offsets": [7, 8]}
    batch = RolloutBatch.from_train_data(data, specs=[spec])
    block = TensorBlock(pin=False)
    with raises_facts(SchemaError, key="tokens_offsets"):
        block.fill(batch, [0, 1])
    per_sample = block.fill(batch, [0, 1], layout="per_sample")  # no offsets key: no clash
    assert per_sample["tokens_offsets"].tolist() == [7, 8]


def test_a_failed_fill_keeps_the_last_fills_layout() -> None:
    batch = batch_with_experts()
    block = TensorBlock(pin=False)
    block.fill(batch, [0, 1], layout="packed")
    with raises_facts(OptionError, key="rows"):
        block.fill(batch, [99], layout="per_sample")
    assert "tokens_offsets" in block.to_device()


def test_close_ends_the_fill_threads() -> None:
    block = TensorBlock(pin=False, threads=2, parallel_bytes=0)
    block.fill(batch_with_experts(), [0, 1])
    assert any(t.name.startswith("arrow_split-block") for t in threading.enumerate())
    block.close()
    assert not any(t.name.startswith("arrow_split-block") for t in threading.enumerate())


def test_expert_tensors_refuse_as_to_tensors_does() -> None:
    # the same mistake, the same class and key as `to_tensors`'s (they were keyless
    # OptionTypeErrors, and a pad_value past a column's dtype a ValueRangeError in to_tensors)
    batch = batch_with_experts()
    expert_slice = take_expert_slice(batch, ParallelPlace(), [0])
    cases: list[tuple[dict[str, Any], type[Exception], dict[str, Any]]] = [
        ({"id_dtype": torch.float32}, OptionError, {"mistake": "option_value"}),
        ({"id_dtype": "int32"}, OptionTypeError, {"mistake": "option_type"}),
        ({"pad_value": 2**40, "id_dtype": torch.int32}, OptionError, {"key": "pad_value"}),
    ]
    for kwargs, error, facts in cases:
        facts = {"key": next(iter(kwargs)), **facts}
        padded = {"layout": "padded", "token_dtype": torch.int32}
        for call, first, options in (
            (expert_tensors, expert_slice, kwargs),
            (to_tensors, batch, {**padded, **kwargs}),
        ):
            with raises_facts(error, **facts) as caught:
                call(first, **options)  # type: ignore[operator]
            assert type(caught.value) is error, kwargs
    with raises_facts(SchemaTypeError, key="expert_slice", mistake="data_type"):
        expert_tensors(batch)  # type: ignore[arg-type]
    with raises_facts(SchemaTypeError, key="shard", mistake="data_type"):
        to_tensors(None)  # type: ignore[arg-type]
