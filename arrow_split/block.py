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
import operator
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, TypeGuard

import numpy as np

from arrow_split._args import as_int, as_rows, describe
from arrow_split._codecs import codec_for
from arrow_split.batch import RolloutBatch
from arrow_split.errors import OptionError, OptionTypeError, mistake
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
        SchemaTypeError
            ``source`` is neither a RolloutBatch nor a Shard.
        OptionError, OptionTypeError
            ``rows`` is not an array of ints, or holds a row outside ``source`` (as the
            ``indices`` of :func:`arrow_split.take_rows`).
        """
        batch = source.rows if isinstance(source, Shard) else source
        if not isinstance(batch, RolloutBatch):
            got = describe(source)
            raise mistake("data_type", key="source", expected="a RolloutBatch or a Shard", got=got)
        picked = None if rows is None else _rows(batch, rows)
        plans, nbytes = _plan(_views(batch), _Pick.of(picked, batch.num_samples))
        with self._lock:
            self.wait()
            buffer = self._room(nbytes)
            columns, copies = _place(plans, buffer)
            self._run(copies, nbytes)
        count = batch.num_samples if picked is None else len(picked)
        return FilledBlock(columns, buffer, nbytes, count)

    def _room(self, nbytes: int) -> np.ndarray:
        if nbytes > self._buffer.nbytes:
            grown = max(nbytes, int(self._buffer.nbytes * _GROWTH))
            grown = -(-grown // _GRAIN) * _GRAIN
            buffer = self._allocate(grown)
            if not (
                isinstance(buffer, np.ndarray)
                and (buffer.dtype, buffer.ndim) == (_UINT8, 1)
                and buffer.nbytes >= grown
                and buffer.flags.c_contiguous
                and buffer.flags.writeable
            ):
                msg = (
                    f"`allocate({grown})` must return a writable, contiguous 1-D uint8 numpy "
                    f"array of {grown} bytes, got {describe(buffer)}"
                )
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
        """End the fill threads (a later fill starts them again); waits for a running fill."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None


def _rows(batch: RolloutBatch, rows: object) -> np.ndarray:
    """``rows`` parsed and checked (a plan's rows too: a hand-made Plan is not checked)."""
    num_samples = batch.num_samples
    if not _is_int64_rows(rows):
        return as_rows("rows", rows, num_samples)
    if len(rows) and _largest(rows.view(_UINT64)) >= num_samples:  # negatives read as huge
        as_rows("rows", rows, num_samples)  # raises the error of every door's rows
    return rows


def _largest(rows: np.ndarray) -> int:
    """The largest row: by Python for a rank's few rows (no numpy reduction to start cold)."""
    return max(rows.tolist()) if len(rows) <= _FEW else int(rows.max())


_FEW = 4096


def _is_int64_rows(rows: object) -> TypeGuard[np.ndarray]:
    """A 1-D int64 array (a plan's rows) is read as it is: the fill only reads it."""
    return type(rows) is np.ndarray and rows.dtype == _INT64 and rows.ndim == 1


_UINT8 = np.dtype(np.uint8)
_UINT64 = np.dtype(np.uint64)
_INT64 = np.dtype(np.int64)

_Views = tuple[ColumnSpec, np.ndarray, "np.ndarray | None", "np.ndarray | None"]


def _views(batch: RolloutBatch) -> list[_Views]:
    """The numeric columns' numpy views (as :meth:`RolloutBatch.numeric_columns`, bare)."""
    record_batch, specs = batch.record_batch, batch.specs
    found: list[_Views] = []
    for name, array in zip(record_batch.schema.names, record_batch.columns, strict=True):
        spec = specs[name]
        tensor = codec_for(spec).tensor_values(array)  # the kind says what a tensor is made of
        if tensor is not None:
            found.append((spec, tensor.values, tensor.offsets, tensor.token_offsets))
    return found


@dataclasses.dataclass(frozen=True, slots=True)
class _Pick:
    """The rows to gather: ``rows``, or (``rows`` is ``None``) the span ``first:stop``."""

    rows: np.ndarray | None
    first: int
    stop: int

    @staticmethod
    def of(picked: np.ndarray | None, num_samples: int) -> _Pick:
        if picked is None:
            return _Pick(None, 0, num_samples)
        count = len(picked)
        first = int(picked[0]) if count else 0
        if count <= 1 or (
            int(picked[-1]) - first == count - 1 and bool((np.diff(picked) == 1).all())
        ):
            return _Pick(None, first, first + count)  # consecutive rows: one run
        return _Pick(picked, 0, count)


@dataclasses.dataclass(slots=True)
class _Tokens:
    """A list per token: runs of its token offsets, each run's shift to the block's values."""

    source: np.ndarray
    starts: list[int]
    stops: list[int]
    shifts: list[int]
    count: int


@dataclasses.dataclass(slots=True)
class _Copy:
    """One gather into ``out``: ``rows`` of ``source``, else its runs ``starts[i]:stops[i]``."""

    source: np.ndarray
    out: np.ndarray
    rows: np.ndarray | None
    starts: list[int]
    stops: list[int]


@dataclasses.dataclass(slots=True)
class _Plan:
    """A column's gather before ``copy.out`` is placed; ragged: the samples' new ``offsets``."""

    spec: ColumnSpec
    copy: _Copy
    shape: tuple[int, ...]
    offsets: _Offsets | None = None
    tokens: _Tokens | None = None


_UNPLACED = np.empty(0, dtype=np.uint8)
_Offsets = list[int] | np.ndarray


def _ends(offsets: np.ndarray, pick: _Pick) -> tuple[np.ndarray, np.ndarray, _Offsets]:
    """Where the picked rows start and stop (one run for a span), their offsets in the block.

    A rank's few rows are summed in Python (no numpy ufunc to start cold for a short list).
    """
    if pick.rows is None:
        span = offsets[pick.first : pick.stop + 1]
        return span[:1], span[-1:], span - span[0]
    starts, stops = offsets[pick.rows], offsets[1:][pick.rows]
    if len(starts) > _FEW:
        return starts, stops, np.concatenate([[0], np.cumsum(stops - starts)])
    new = itertools.accumulate(map(operator.sub, stops.tolist(), starts.tolist()), initial=0)
    return starts, stops, list(new)


def _tokens(token_offsets: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> _Tokens:
    values_from = token_offsets[starts]
    sizes = token_offsets[stops] - values_from
    shifts = values_from - (np.cumsum(sizes) - sizes)  # minus where each run starts in the block
    count = int((stops - starts).sum())
    return _Tokens(token_offsets, starts.tolist(), stops.tolist(), shifts.tolist(), count)


def _plan(columns: list[_Views], pick: _Pick) -> tuple[list[_Plan], int]:
    """Each column's gather, and the bytes the block needs (each array 64-byte aligned)."""
    plans, nbytes = [], 0
    for spec, values, offsets, token_offsets in columns:
        trailing = values.shape[1:]
        if offsets is None:
            runs = ([pick.first], [pick.stop]) if pick.rows is None else ([], [])
            count = pick.stop - pick.first
            plan = _Plan(spec, _Copy(values, _UNPLACED, pick.rows, *runs), (count, *trailing))
        else:
            starts, stops, new_offsets = _ends(offsets, pick)
            tokens = None
            if token_offsets is not None:
                tokens = _tokens(token_offsets, starts, stops)
                starts, stops = token_offsets[starts], token_offsets[stops]
            copy = _Copy(values, _UNPLACED, None, starts.tolist(), stops.tolist())
            shape = (sum(copy.stops) - sum(copy.starts), *trailing)
            plan = _Plan(spec, copy, shape, new_offsets, tokens)
        plans.append(plan)
        sizes = [math.prod(plan.shape) * values.dtype.itemsize]
        if plan.offsets is not None:
            sizes.append(len(plan.offsets) * 8)
        if plan.tokens is not None:
            sizes.append((plan.tokens.count + 1) * 8)
        for size in sizes:
            nbytes = -(-nbytes // _ALIGN) * _ALIGN + size
    return plans, nbytes


def _place(plans: list[_Plan], buffer: np.ndarray) -> tuple[dict[str, BlockColumn], list[_Copy]]:
    """Give each planned array its place in ``buffer``; offsets are written here (small)."""
    at = 0

    def view(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        nonlocal at
        at = -(-at // _ALIGN) * _ALIGN
        out = np.ndarray(shape, dtype=dtype, buffer=buffer, offset=at)
        at += out.nbytes
        return out

    columns, copies = {}, []
    for plan in plans:
        copy = plan.copy
        copy.out = values = view(copy.source.dtype, plan.shape)
        copies.append(copy)
        offsets = token_offsets = None
        if plan.offsets is not None:
            offsets = view(_INT64, (len(plan.offsets),))
            offsets[...] = plan.offsets
        if plan.tokens is not None:
            token_offsets = view(_INT64, (plan.tokens.count + 1,))
            _write_tokens(token_offsets, plan.tokens)
        columns[plan.spec.name] = BlockColumn(plan.spec, values, offsets, token_offsets)
    return columns, copies


def _write_tokens(out: np.ndarray, tokens: _Tokens) -> None:
    """The block's token offsets: each run's source offsets less its shift."""
    out[0] = 0
    at = 1
    for start, stop, shift in zip(tokens.starts, tokens.stops, tokens.shifts, strict=True):
        np.subtract(tokens.source[start + 1 : stop + 1], shift, out=out[at : at + stop - start])
        at += stop - start


def _copy(copy: _Copy) -> None:
    if copy.rows is not None:  # rows checked at the door: "clip" writes into `out` unbuffered
        np.take(copy.source, copy.rows, axis=0, out=copy.out, mode="clip")
        return
    source, starts, stops = copy.source, copy.starts, copy.stops
    if len(starts) == 1:
        np.copyto(copy.out, source[starts[0] : stops[0]])
    elif starts:
        np.concatenate([source[a:b] for a, b in zip(starts, stops, strict=True)], out=copy.out)


def _split(copy: _Copy, parts: int) -> list[_Copy]:
    """``copy`` cut into up to ``parts`` copies of consecutive rows (disjoint outputs)."""
    out, source = copy.out, copy.source
    if copy.rows is not None:
        cuts = np.linspace(0, len(copy.rows), parts + 1).astype(np.int64).tolist()
        return [
            _Copy(source, out[a:b], copy.rows[a:b], [], [])
            for a, b in itertools.pairwise(cuts)
            if b > a
        ]
    if len(copy.starts) == 1:  # one run: cut into pieces of rows
        first = copy.starts[0]
        cuts = np.linspace(first, copy.stops[0], parts + 1).astype(np.int64).tolist()
        return [
            _Copy(source, out[a - first : b - first], None, [a], [b])
            for a, b in itertools.pairwise(cuts)
            if b > a
        ]
    lengths = np.subtract(copy.stops, copy.starts)
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    cuts = np.searchsorted(ends, np.linspace(0, total, parts + 1)[1:-1], side="left") + 1
    cuts = np.unique(np.concatenate([[0], np.minimum(cuts, len(lengths)), [len(lengths)]]))
    starts = [0, *ends.tolist()]
    return [
        _Copy(source, out[starts[a] : starts[b]], None, copy.starts[a:b], copy.stops[a:b])
        for a, b in itertools.pairwise(cuts.tolist())
        if b > a
    ]
