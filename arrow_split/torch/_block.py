"""Torch views of a rank's reused block, and the block on a device in one asynchronous copy.

:class:`TensorBlock` wraps :class:`arrow_split.block.RankBlock` with page-locked (pinned) host
memory when CUDA is available: each :meth:`TensorBlock.fill` writes the rank's columns into the
one host block and returns tensors that are views of it; :meth:`TensorBlock.to_device` moves the
bytes in use with one ``non_blocking`` copy on a dedicated stream into one reused device buffer
and returns the same layout as views of it. The copy's event is recorded on the host block, so
the next fill waits for the copy before it writes; the copy stream waits for the work already
queued on the current stream (the previous step's, still reading the device buffer). Tensors keep
the stored dtypes (a cast is one kernel on the device).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

import numpy as np
import torch

from arrow_split import OptionError, RolloutBatch, Shard
from arrow_split._args import as_choice, as_flag
from arrow_split.block import FilledBlock, RankBlock
from arrow_split.torch._layouts import Tensors, merge_extras, parse_device

__all__ = ["BlockLayout", "TensorBlock"]

BlockLayout = Literal["packed", "per_sample"]
"""``"packed"``: one flat tensor per column, ``<name>_offsets`` beside each ragged one;
``"per_sample"``: a list of views per ragged column (a list per token stays packed)."""


@functools.lru_cache(maxsize=32)
def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def _view(base: torch.Tensor, start: int, array: np.ndarray) -> torch.Tensor:
    flat = base[start : start + array.nbytes]
    return flat.view(_torch_dtype(array.dtype)).view(array.shape)


def _arrange(filled: FilledBlock, base: torch.Tensor | None, layout: str) -> dict[str, Tensors]:
    """The layout's tensors: views of ``base`` (a copy of the block), or of the host block."""
    tensors: dict[str, Tensors] = {}
    extras: dict[str, Tensors] = {}

    def view(array: np.ndarray) -> torch.Tensor:
        if base is None:  # the host block: its numpy views share its memory
            return torch.from_numpy(array)
        return _view(base, filled.start_of(array) if array.size else 0, array)

    for name, column in filled.columns.items():
        values = view(column.values)
        if column.offsets is None:
            tensors[name] = values
        elif column.token_offsets is not None:  # a list per token: always packed
            tensors[name] = values
            extras[f"{name}_offsets"] = view(column.token_offsets)
            extras[f"{name}_sample_offsets"] = view(column.offsets)
        elif layout == "per_sample":
            tensors[name] = list(torch.split(values, np.diff(column.offsets).tolist()))
        else:
            tensors[name] = values
            extras[f"{name}_offsets"] = view(column.offsets)
    return merge_extras(tensors, extras, layout)


class TensorBlock:
    """A rank's reused host block (pinned with CUDA), and its device copy.

    Parameters
    ----------
    device
        Where :meth:`to_device` copies the block (``None``: it returns the host views).
    pin
        Page-locked host memory; ``None``: when ``torch.cuda.is_available()``.
    threads, parallel_bytes
        As :class:`~arrow_split.block.RankBlock`: threads filling a large rank.
    """

    def __init__(
        self,
        device: torch.device | str | None = None,
        *,
        pin: bool | None = None,
        threads: int = 1,
        parallel_bytes: int = 8 << 20,
    ) -> None:
        self.device = parse_device(device)
        self.pinned = torch.cuda.is_available() if pin is None else as_flag("pin", pin)
        if self.pinned and not torch.cuda.is_available():
            msg = "`pin=True` needs CUDA, which is not available here; pass `pin=None` or False"
            raise OptionError(msg, key="pin", got="True")
        self.host: torch.Tensor = torch.empty(0, dtype=torch.uint8)
        self.block = RankBlock(
            allocate=self._allocate, threads=threads, parallel_bytes=parallel_bytes
        )
        on_cuda = self.device is not None and self.device.type == "cuda"
        if on_cuda and not torch.cuda.is_available():
            msg = f"`device` is {self.device} but CUDA is not available here; pass `device=None`"
            raise OptionError(msg, key="device")
        self._stream = torch.cuda.Stream(self.device) if on_cuda else None  # type: ignore[no-untyped-call]
        self._device_buffer: torch.Tensor | None = None
        self._filled: FilledBlock | None = None
        self._layout = "packed"

    def _allocate(self, nbytes: int) -> np.ndarray:
        self.host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pinned)
        return self.host.numpy()

    def fill(
        self,
        source: RolloutBatch | Shard,
        rows: Any = None,
        *,
        layout: BlockLayout = "packed",
    ) -> dict[str, Tensors]:
        """Write ``rows`` of ``source`` into the block; the layout's tensors as views of it.

        Waits first for the previous :meth:`to_device` copy. The views are valid until the
        next fill.

        Raises
        ------
        OptionError, OptionTypeError
            As :meth:`~arrow_split.block.RankBlock.fill`, or an unknown ``layout``.
        SchemaError
            A column named as a key the layout adds (``<name>_offsets``).
        """
        chosen = as_choice("layout", layout, BlockLayout)
        filled = self.block.fill(source, rows)
        tensors = _arrange(filled, None, chosen)
        self._filled, self._layout = filled, chosen
        return tensors

    def close(self) -> None:
        """End the fill threads (a later fill starts them again).

        As :meth:`~arrow_split.block.RankBlock.close`: waits for a fill that is running.
        """
        self.block.close()

    def to_device(self) -> dict[str, Tensors]:
        """The last fill on :attr:`device`: one asynchronous copy, views of one device buffer.

        Raises
        ------
        OptionError
            Nothing was filled yet.
        """
        filled = self._filled
        if filled is None:
            msg = "`to_device` copies the last fill: call `fill(shard)` first"
            raise OptionError(msg, key="to_device")
        if self.device is None:
            return _arrange(filled, None, self._layout)
        nbytes = filled.nbytes
        buffer = self._device_buffer
        if buffer is None or buffer.numel() < self.block.capacity:
            buffer = torch.empty(self.block.capacity, dtype=torch.uint8, device=self.device)
            self._device_buffer = buffer
        if self._stream is None:
            buffer[:nbytes].copy_(self.host[:nbytes])
            return _arrange(filled, buffer, self._layout)
        current = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(current)  # the previous step may still read the buffer
        with torch.cuda.stream(self._stream):
            buffer[:nbytes].copy_(self.host[:nbytes], non_blocking=True)
            event = torch.cuda.Event()  # type: ignore[no-untyped-call]
            event.record(self._stream)
        self.block.record(event)
        current.wait_event(event)
        return _arrange(filled, buffer, self._layout)
