"""One host buffer for a rank's numeric bytes, reused from step to step: the pinned hand-off.

A rank moves its shard to the device as one transfer: every column's stored bytes (tokens still
int32, masks still uint8, narrow ids still narrow) are packed at aligned offsets into one host
buffer (:func:`pack_plan` says where, :meth:`Staging.pack` copies), the buffer crosses in one
copy, and the device tensors are views of the transferred buffer, cast on the device
(:func:`unpack`). On CUDA the host buffer is pinned and the copy runs on a side stream; without
CUDA the same code runs with a plain CPU buffer, which is what the tests exercise.

The reuse guard: a buffer that a copy still reads must not be rewritten. :class:`Staging` keeps
the event recorded after the last copy (any object with ``synchronize()``; a CUDA event) and
waits on it before packing again; a buffer grows (a new one) when a step needs more bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

try:
    import torch
except ImportError:
    msg = "arrow_split.torch needs PyTorch; install it with `pip install arrow-split[torch]`"
    raise ImportError(msg) from None

__all__ = ["ALIGNMENT", "Slot", "Staging", "pack_plan", "to_device", "unpack"]

ALIGNMENT = 64
"""Every column starts at a multiple of this many bytes (a cache line; any dtype's alignment)."""


class _Event(Protocol):
    def synchronize(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Slot:
    """Where one array lies in the staging buffer: byte ``offset``, ``dtype``, ``shape``."""

    name: str
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def _aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


def pack_plan(arrays: Mapping[str, np.ndarray]) -> tuple[list[Slot], int]:
    """The slots of ``arrays`` in order, each at an aligned offset, and the bytes they need."""
    slots = []
    offset = 0
    for name, array in arrays.items():
        offset = _aligned(offset)
        slots.append(Slot(name, offset, array.dtype, tuple(array.shape)))
        offset += array.nbytes
    return slots, _aligned(offset)


def _view(buffer: torch.Tensor, slot: Slot) -> torch.Tensor:
    """``slot``'s bytes of a 1-D uint8 tensor, as a tensor of its dtype and shape."""
    raw = buffer[slot.offset : slot.offset + slot.nbytes]
    return raw.view(_TORCH_DTYPES[slot.dtype]).reshape(slot.shape)


_TORCH_DTYPES = {
    np.dtype(name): getattr(torch, name)
    for name in ("bool", "uint8", "uint16", "int8", "int16", "int32", "int64")
} | {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}


def unpack(
    buffer: torch.Tensor, slots: Sequence[Slot], casts: Mapping[str, torch.dtype] | None = None
) -> dict[str, torch.Tensor]:
    """The arrays of a packed (and transferred) buffer, cast where ``casts`` says.

    A slot without a cast is a view of ``buffer``; a cast is a fresh tensor on ``buffer``'s
    device (on a GPU: after the transfer, so only the stored bytes crossed).
    """
    casts = casts or {}
    found = {}
    for slot in slots:
        tensor = _view(buffer, slot)
        dtype = casts.get(slot.name)
        found[slot.name] = tensor if dtype is None or dtype == tensor.dtype else tensor.to(dtype)
    return found


class Staging:
    """A host buffer reused from step to step (pinned on CUDA), with its reuse guard.

    Parameters
    ----------
    pin
        Pin the buffer's memory (page-locked: a host-to-device copy at the link's full speed and
        asynchronous). Needs CUDA; ``False`` keeps a plain CPU buffer.
    """

    def __init__(self, *, pin: bool = False) -> None:
        self._pin = bool(pin)
        self._buffer: torch.Tensor | None = None
        self._pending: _Event | None = None
        self.grown = 0
        """How many times a buffer was allocated (a step needing more bytes grows it)."""

    def guard(self, event: _Event) -> None:
        """Record ``event`` (recorded after a copy that reads the buffer): waited on by ``pack``."""
        self._pending = event

    def pack(self, arrays: Mapping[str, np.ndarray]) -> tuple[torch.Tensor, list[Slot]]:
        """Copy ``arrays`` into the buffer at aligned offsets; return it (cut to size) and slots.

        Waits first for the copy that last read the buffer (see :meth:`guard`).
        """
        slots, nbytes = pack_plan(arrays)
        if self._pending is not None:
            self._pending.synchronize()
            self._pending = None
        buffer = self._room(nbytes)
        host = buffer.numpy()
        for slot, array in zip(slots, arrays.values(), strict=True):
            target = host[slot.offset : slot.offset + slot.nbytes]
            target.view(slot.dtype).reshape(slot.shape)[...] = array
        return buffer[:nbytes], slots

    def _room(self, nbytes: int) -> torch.Tensor:
        if self._buffer is None or self._buffer.numel() < nbytes:
            size = max(nbytes, ALIGNMENT)
            self._buffer = torch.empty(size, dtype=torch.uint8, pin_memory=self._pin)
            self.grown += 1
        return self._buffer


def to_device(
    staging: Staging,
    arrays: Mapping[str, np.ndarray],
    device: torch.device,
    casts: Mapping[str, torch.dtype] | None = None,
    *,
    stream: Any = None,
) -> dict[str, torch.Tensor]:
    """Pack ``arrays``, move them in one copy, unpack (and cast) them on ``device``.

    On CUDA the copy runs on ``stream`` (a side stream; the current one if ``None``) and an event
    recorded after it guards the buffer; the caller's stream waits on it before the casts. On any
    other device the copy is synchronous.
    """
    buffer, slots = staging.pack(arrays)
    if device.type != "cuda":
        return unpack(buffer.to(device, copy=True), slots, casts)
    current = torch.cuda.current_stream(device)
    side = stream if stream is not None else current
    with torch.cuda.stream(side):
        moved = buffer.to(device, non_blocking=True)
        event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        event.record(side)
    staging.guard(event)
    current.wait_event(event)
    moved.record_stream(current)
    return unpack(moved, slots, casts)
