"""The pinned hand-off's staging: packing at aligned offsets, views and casts, the reuse guard."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from arrow_split.torch._layouts import (  # noqa: E402
    ALIGNMENT,
    Staging,
    pack_plan,
    to_device,
    unpack,
)

_DTYPES = [np.int32, np.uint8, np.uint16, np.float32, np.int64, np.float64, np.bool_]


def _arrays(draw: st.DrawFn) -> dict[str, np.ndarray]:
    count = draw(st.integers(0, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    found = {}
    for index in range(count):
        dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
        shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
        found[f"c{index}"] = (
            rng.integers(0, 2, shape) if dtype == np.bool_ else rng.integers(0, 200, shape)
        ).astype(dtype)
    return found


arrays_strategy = st.composite(_arrays)()


@given(arrays_strategy)
def test_packed_arrays_come_back_bit_for_bit(arrays: dict[str, np.ndarray]) -> None:
    staging = Staging()
    buffer, slots = staging.pack(arrays)
    assert all(slot.offset % ALIGNMENT == 0 for slot in slots)
    ends = [slot.offset + slot.nbytes for slot in slots]
    assert all(end <= nxt.offset for end, nxt in zip(ends, slots[1:], strict=False))
    out = unpack(buffer, slots)
    assert list(out) == list(arrays)
    for name, array in arrays.items():
        assert out[name].numpy().dtype == array.dtype
        np.testing.assert_array_equal(out[name].numpy(), array)


def test_pack_plan_aligns_each_column() -> None:
    slots, nbytes = pack_plan({"a": np.zeros(3, np.uint8), "b": np.zeros(2, np.int64)})
    assert [(slot.offset, slot.nbytes) for slot in slots] == [(0, 3), (ALIGNMENT, 16)]
    assert nbytes == 2 * ALIGNMENT


def test_casts_run_after_the_move_and_views_share_the_buffer() -> None:
    tokens = np.array([1, 2, 3], np.int32)
    masks = np.array([1, 0, 1], np.uint8)
    buffer, slots = Staging().pack({"tokens": tokens, "loss_masks": masks})
    out = unpack(buffer, slots, {"tokens": torch.int64})
    assert out["tokens"].dtype == torch.int64
    assert out["tokens"].tolist() == [1, 2, 3]
    assert out["loss_masks"].dtype == torch.uint8
    assert out["loss_masks"].data_ptr() == buffer.data_ptr() + slots[1].offset


def test_the_buffer_is_reused_and_grown_when_needed() -> None:
    staging = Staging()
    first, _ = staging.pack({"a": np.arange(10, dtype=np.int64)})
    second, _ = staging.pack({"a": np.arange(5, dtype=np.int64)})
    assert staging.grown == 1
    assert second.data_ptr() == first.data_ptr()
    staging.pack({"a": np.arange(1000, dtype=np.int64)})
    assert staging.grown == 2


class _Event:
    def __init__(self) -> None:
        self.waited = 0

    def synchronize(self) -> None:
        self.waited += 1


def test_pack_waits_for_the_copy_that_reads_the_buffer() -> None:
    staging = Staging()
    staging.pack({"a": np.arange(4, dtype=np.int32)})
    event = _Event()
    staging.guard(event)
    staging.pack({"a": np.arange(4, dtype=np.int32)})
    staging.pack({"a": np.arange(4, dtype=np.int32)})
    assert event.waited == 1  # once, before the first rewrite; then the guard is spent


def test_to_device_on_the_cpu_gives_fresh_tensors() -> None:
    staging = Staging()
    tokens = np.array([7, 8], np.int32)
    out = to_device(staging, {"tokens": tokens}, torch.device("cpu"), {"tokens": torch.int64})
    assert out["tokens"].tolist() == [7, 8]
    staging.pack({"tokens": np.array([0, 0], np.int32)})  # the next step rewrites the buffer
    assert out["tokens"].tolist() == [7, 8]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_device_on_cuda_equals_the_cpu_result() -> None:
    staging = Staging(pin=True)
    tokens = np.arange(1000, dtype=np.int32)
    masks = (np.arange(1000) % 2).astype(np.uint8)
    arrays = {"tokens": tokens, "loss_masks": masks}
    casts = {"tokens": torch.int64, "loss_masks": torch.int64}
    side = torch.cuda.Stream()
    out = to_device(staging, arrays, torch.device("cuda"), casts, stream=side)
    cpu = to_device(Staging(), arrays, torch.device("cpu"), casts)
    for name in arrays:
        assert out[name].device.type == "cuda"
        assert out[name].dtype == cpu[name].dtype
        assert torch.equal(out[name].cpu(), cpu[name])
    staging.pack({"tokens": np.zeros(1000, np.int32)})  # waits on the copy's event
    torch.cuda.synchronize()
    assert torch.equal(out["tokens"].cpu(), cpu["tokens"])
