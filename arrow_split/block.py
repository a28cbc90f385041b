"""One reused block per rank: the take writes the rank's numeric columns into one buffer.

A :class:`RankBlock` owns one consolidated byte buffer, reused step after step: it grows when a
step needs more (the only allocation), and each :meth:`RankBlock.fill` gathers the rank's rows
of every numeric column straight into it (values, then offsets, each 64-byte aligned), the
result's arrays being views of it. The block is allocated by ``allocate`` (a leaf passes page-
locked memory, so that moving the block to a device is one asynchronous copy); a reader of the
block that is still running (that copy) is :meth:`RankBlock.record`-ed, and the next fill waits
for it before writing: nothing is written while a device may still read it. Large ranks are
filled by several threads (numpy's copies release the GIL). numpy only.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, cast

import numpy as np

from arrow_split._args import as_index_array, as_int, describe
from arrow_split.batch import RolloutBatch
from arrow_split.errors import OptionError, OptionTypeError
from arrow_split.schema import ColumnSpec
from arrow_split.shard import Shard

__all__ = ["BlockColumn", "Event", "FilledBlock", "RankBlock"]

_ALIGN = 64
_GROWTH = 1.25
_GRAIN = 1 << 20


class Event(Protocol):
    """What :meth:`RankBlock.record` takes: a pending reader of the block (a CUDA event)."""

    def synchronize(self) -> None:
        """Return once the reader is done."""


@dataclasses.dataclass(frozen=True, slots=True)
class BlockColumn:
    """One column in the block: its values, offsets and token offsets, all views of it.

    ``values`` holds the rank's rows; ``offsets`` per sample (ragged, int64 from 0, else
    ``None``); ``token_offsets`` (a list per token) index ``values`` by token.
    """

    spec: ColumnSpec
    values: np.ndarray
    offsets: np.ndarray | None
    token_offsets: np.ndarray | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class FilledBlock:
    """What one fill wrote: its columns (views of ``buffer``), ``buffer[:nbytes]`` in use."""

    columns: dict[str, BlockColumn]
    buffer: np.ndarray
    nbytes: int
    num_samples: int

    def start_of(self, array: np.ndarray) -> int:
        """Where ``array`` (a view of the block) starts, in bytes from the block's start."""
        return _address(array) - _address(self.buffer)


def _address(array: np.ndarray) -> int:
    return int(array.__array_interface__["data"][0])


def _numpy_allocate(nbytes: int) -> np.ndarray:
    return np.empty(nbytes, dtype=np.uint8)


@dataclasses.dataclass(slots=True)
class _Copy:
    """One column's gather: runs of ``source`` rows into ``out`` (its first axis)."""

    source: np.ndarray
    bounds: np.ndarray | None  # (n, 2) runs of source rows; None: ``take`` rows
    rows: np.ndarray | None
    out: np.ndarray | tuple[int, ...]  # the view of the block, once placed (its shape before)


class RankBlock:
    """One rank's reused buffer: :meth:`fill` gathers a step's rows into it.

    Parameters
    ----------
    allocate
        Makes a 1-D uint8 array of the given byte count (default: ``numpy.empty``); called only
        when a step needs more than the block holds (:attr:`allocations` counts the calls).
    threads
        Threads filling a rank of at least ``parallel_bytes`` (``1``: the calling thread).
    parallel_bytes
        The size from which ``threads`` share a fill.
    """

    def __init__(
        self,
        *,
        allocate: Callable[[int], np.ndarray] | None = None,
        threads: int = 1,
        parallel_bytes: int = 8 << 20,
    ) -> None:
        if allocate is not None and not callable(allocate):
            msg = f"`allocate` must be a callable taking a byte count, got {describe(allocate)}"
            raise OptionTypeError(msg, key="allocate")
        self._allocate = allocate or _numpy_allocate
        self._threads = as_int("threads", threads, minimum=1, maximum=256)
        self._parallel_bytes = as_int("parallel_bytes", parallel_bytes, minimum=0)
        self._buffer = np.empty(0, dtype=np.uint8)
        self._pending: Event | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self.allocations = 0

    @property
    def capacity(self) -> int:
        """Bytes the block holds now."""
        return int(self._buffer.nbytes)

    @property
    def address(self) -> int:
        """Where the block starts (changes only when it grows)."""
        return _address(self._buffer)

    def record(self, event: Event) -> None:
        """Mark the block as being read until ``event`` completes; the next fill waits for it."""
        if not callable(getattr(event, "synchronize", None)):
            msg = f"`event` must have a `synchronize()` method, got {describe(event)}"
            raise OptionTypeError(msg, key="event")
        self._pending = event

    def wait(self) -> None:
        """Wait for the recorded reader, if any (each fill does, before writing)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.synchronize()

    def fill(
        self, source: RolloutBatch | Shard, rows: Sequence[int] | np.ndarray | None = None
    ) -> FilledBlock:
        """Gather ``rows`` of ``source``'s numeric columns into the block (``None``: all rows).

        The previous fill's arrays are overwritten: the result is valid until the next fill.

        Raises
        ------
        OptionError, OptionTypeError
            ``source`` is not a batch or a shard, or ``rows`` is not rows of it.
        """
        batch = source.rows if isinstance(source, Shard) else source
        if not isinstance(batch, RolloutBatch):
            msg = f"`source` must be a RolloutBatch or a Shard, got {describe(source)}"
            raise OptionTypeError(msg, key="source")
        picked = None if rows is None else _rows(rows, batch.num_samples)
        count = batch.num_samples if picked is None else len(picked)
        plans, nbytes = _plan(batch, picked)
        with self._lock:
            self.wait()
            buffer = self._room(nbytes)
            columns, copies = _place(plans, buffer)
            self._run(copies, nbytes)
        return FilledBlock(columns, buffer, nbytes, count)

    def _room(self, nbytes: int) -> np.ndarray:
        if nbytes > self._buffer.nbytes:
            grown = max(nbytes, int(self._buffer.nbytes * _GROWTH))
            grown = -(-grown // _GRAIN) * _GRAIN
            buffer = self._allocate(grown)
            if buffer.dtype != np.uint8 or buffer.ndim != 1 or buffer.nbytes < grown:
                msg = f"`allocate({grown})` must return a 1-D uint8 array of {grown} bytes"
                raise OptionError(msg, key="allocate")
            self._buffer = buffer
            self.allocations += 1
        return self._buffer

    def _run(self, copies: list[_Copy], nbytes: int) -> None:
        if self._threads == 1 or nbytes < self._parallel_bytes:
            for copy in copies:
                _copy(copy)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="arrow_split-block")
        pieces = [piece for copy in copies for piece in _split(copy, self._threads)]
        list(self._pool.map(_copy, pieces))

    def close(self) -> None:
        """End the fill threads (a later fill starts them again)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None


def _rows(rows: object, num_samples: int) -> np.ndarray:
    picked = as_index_array("rows", rows)
    if picked.size and (picked.min() < 0 or picked.max() >= num_samples):
        bad = picked[(picked < 0) | (picked >= num_samples)][0]
        msg = f"`rows` holds row {bad}, outside [0, {num_samples}) for this batch"
        raise OptionError(msg, key="rows", got=str(bad))
    return picked


@dataclasses.dataclass(slots=True)
class _Plan:
    """One column's arrays to place: (name, dtype, shape) and how each is filled."""

    spec: ColumnSpec
    values: _Copy
    offsets: np.ndarray | None = None
    token_offsets: np.ndarray | None = None


def _runs(offsets: np.ndarray, picked: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Source runs ``(n, 2)`` of the picked samples, and their new offsets (from 0)."""
    starts = offsets[:-1] if picked is None else offsets[picked]
    stops = offsets[1:] if picked is None else offsets[picked + 1]
    new = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(stops - starts, out=new[1:])
    bounds = np.empty((len(starts), 2), dtype=np.int64)
    bounds[:, 0], bounds[:, 1] = starts, stops
    return bounds, new


def _plan(batch: RolloutBatch, picked: np.ndarray | None) -> tuple[list[_Plan], int]:
    plans, nbytes = [], 0
    for column in batch.numeric_columns():
        values, offsets = column.values, column.offsets
        if offsets is None:
            rows = picked
            shape = values.shape if rows is None else (len(rows), *values.shape[1:])
            plan = _Plan(column.spec, _Copy(values, None, rows, shape))
        elif column.token_offsets is None:
            bounds, new = _runs(offsets, picked)
            shape = (int(new[-1]), *values.shape[1:])
            plan = _Plan(column.spec, _Copy(values, bounds, None, shape), new)
        else:
            token_offsets = column.token_offsets
            bounds, new = _runs(offsets, picked)
            token_bounds = token_offsets[bounds]
            lengths = np.diff(token_offsets)
            pieces = [lengths[a:b] for a, b in bounds.tolist()]
            token_lengths = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
            new_tokens = np.zeros(len(token_lengths) + 1, dtype=np.int64)
            np.cumsum(token_lengths, out=new_tokens[1:])
            shape = (int(new_tokens[-1]), *values.shape[1:])
            plan = _Plan(column.spec, _Copy(values, token_bounds, None, shape), new, new_tokens)
        plans.append(plan)
        sizes = [math.prod(shape) * values.dtype.itemsize]
        sizes += [array.nbytes for array in (plan.offsets, plan.token_offsets) if array is not None]
        for size in sizes:
            nbytes = -(-nbytes // _ALIGN) * _ALIGN + size
    return plans, nbytes


def _place(plans: list[_Plan], buffer: np.ndarray) -> tuple[dict[str, BlockColumn], list[_Copy]]:
    """Give each planned array its place in ``buffer``; offsets are written here (small)."""
    at = 0

    def view(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        nonlocal at
        at = -(-at // _ALIGN) * _ALIGN
        size = math.prod(shape) * dtype.itemsize
        out = buffer[at : at + size].view(dtype).reshape(shape)
        at += size
        return out

    columns, copies = {}, []
    for plan in plans:
        copy = plan.values
        values = view(copy.source.dtype, cast("tuple[int, ...]", copy.out))
        copy.out = values
        copies.append(copy)
        offsets = token_offsets = None
        if plan.offsets is not None:
            offsets = view(plan.offsets.dtype, plan.offsets.shape)
            offsets[...] = plan.offsets
        if plan.token_offsets is not None:
            token_offsets = view(plan.token_offsets.dtype, plan.token_offsets.shape)
            token_offsets[...] = plan.token_offsets
        columns[plan.spec.name] = BlockColumn(plan.spec, values, offsets, token_offsets)
    return columns, copies


def _copy(copy: _Copy) -> None:
    out = cast("np.ndarray", copy.out)
    if copy.bounds is None:
        if copy.rows is None:
            np.copyto(out, copy.source)
        else:
            np.take(copy.source, copy.rows, axis=0, out=out)
        return
    bounds = copy.bounds
    if len(bounds) == 0:
        return
    if len(bounds) == 1 or bool(np.all(bounds[1:, 0] == bounds[:-1, 1])):  # one run
        np.copyto(out, copy.source[bounds[0, 0] : bounds[-1, 1]])
        return
    np.concatenate([copy.source[a:b] for a, b in bounds.tolist()], out=out)


def _split(copy: _Copy, parts: int) -> list[_Copy]:
    """``copy`` cut into up to ``parts`` copies of consecutive rows (disjoint outputs)."""
    out = cast("np.ndarray", copy.out)
    if copy.bounds is None:
        if copy.rows is None:
            cuts = np.linspace(0, len(out), parts + 1).astype(np.int64)
            return [
                _Copy(copy.source[a:b], None, None, out[a:b])
                for a, b in itertools.pairwise(cuts)
                if b > a
            ]
        cuts = np.linspace(0, len(copy.rows), parts + 1).astype(np.int64)
        return [
            _Copy(copy.source, None, copy.rows[a:b], out[a:b])
            for a, b in itertools.pairwise(cuts)
            if b > a
        ]
    lengths = copy.bounds[:, 1] - copy.bounds[:, 0]
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    cuts = np.searchsorted(ends, np.linspace(0, total, parts + 1)[1:-1], side="left") + 1
    cuts = np.unique(np.concatenate([[0], np.minimum(cuts, len(lengths)), [len(lengths)]]))
    starts = np.concatenate([[0], ends])
    return [
        _Copy(copy.source, copy.bounds[a:b], None, out[starts[a] : starts[b]])
        for a, b in itertools.pairwise(cuts)
        if b > a
    ]
