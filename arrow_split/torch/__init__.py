"""Torch leaf: one rank's shard -> torch tensors, in the layout a training step wants.

Options are parsed here, columns read under one memory rule (``_private_or_copy``) and arranged
by ``arrow_split.torch._layouts`` (docs/torch.md).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa

try:
    import torch
except ImportError:
    msg = "arrow_split.torch needs PyTorch; install it with `pip install arrow-split[torch]`"
    raise ImportError(msg) from None

from arrow_split import (
    ColumnValues,
    OptionError,
    RolloutBatch,
    Shard,
    ValueRangeError,
)
from arrow_split._args import as_choice, as_flag, as_int, as_keywords, as_offsets, as_real
from arrow_split.errors import mistake
from arrow_split.torch._block import BlockLayout, TensorBlock
from arrow_split.torch._experts import ExpertLayout, expert_tensors
from arrow_split.torch._layouts import (
    MAX_PAD_MULTIPLE,
    AllColumns,
    RaggedColumn,
    TensorOptions,
    Tensors,
    arrange,
    move,
    parse_device,
    parse_dtype,
    token_list_tensors,
)

__all__ = [
    "BlockLayout",
    "ExpertLayout",
    "TensorBlock",
    "TensorLayout",
    "expert_tensors",
    "to_micro_batches",
    "to_tensors",
]

TensorLayout = Literal["per_sample", "packed", "padded", "nested"]
"""How :func:`to_tensors` lays out the ragged columns (see ``docs/torch.md``)."""

# The dtypes each option may be (ids: as tokens), with the numpy dtype a column is cast to.
_TOKEN_DTYPES: dict[torch.dtype, type[np.generic]] = {torch.int32: np.int32, torch.int64: np.int64}
_MASK_DTYPES: dict[torch.dtype, type[np.generic]] = {torch.bool: np.bool_, torch.uint8: np.uint8}
_MASK_DTYPES |= {**_TOKEN_DTYPES, torch.float32: np.float32}


def to_tensors(
    shard: Shard | RolloutBatch,
    *,
    layout: TensorLayout = "per_sample",
    device: torch.device | str | None = None,
    token_dtype: torch.dtype = torch.int64,
    mask_dtype: torch.dtype = torch.int64,
    id_dtype: torch.dtype | None = torch.int32,
    pad_value: int | float = 0,
    pad_to_multiple_of: int | None = None,
    writable: bool = False,
) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """Convert the numeric columns of a shard (or a whole batch) into torch tensors.

    Parameters
    ----------
    shard
        What a split returns (or a whole :class:`~arrow_split.RolloutBatch`).
    layout
        ``"per_sample"``, ``"packed"``, ``"padded"`` or ``"nested"`` (:data:`TensorLayout`).
    device
        Move every tensor to this device (``torch.device`` or str); ``None`` keeps the CPU.
    token_dtype, mask_dtype, id_dtype
        dtype of ``tokens`` (int64, int32), of flag columns (int64, int32, uint8, bool, float32)
        and of ids stored narrow (int32, int64, or ``None`` for the stored type).
    pad_value, pad_to_multiple_of
        ``"padded"`` only: the value of padding positions (flags: 0), and the multiple (``>= 1``)
        each padded length is rounded up to.
    writable
        ``False`` (default): a tensor may be a zero-copy view of the shard's private buffers,
        so a write into it changes the shard; treat it as read-only. ``True``: every tensor
        owns its memory (a copy where it would view the shard), safe to change in place.

    Returns
    -------
    dict of str to torch.Tensor or list of torch.Tensor
        The ragged and scalar columns in the shard's order, then the layout's extra keys.

    Raises
    ------
    SchemaTypeError
        ``shard`` is neither a Shard nor a RolloutBatch.
    OptionError, OptionTypeError
        An option of the wrong type (a torch dtype not a ``torch.dtype``), or outside its values:
        an unknown value (an ``id_dtype`` of float32), ``pad_to_multiple_of`` out of range, a
        ``pad_value`` that does not fit a column.
    SchemaError
        A column whose name clashes with an extra key of the layout.
    ValueRangeError
        More than 2**31 - 1 values in a column, or an ``id_dtype`` narrower than a column's
        stored type.

    Examples
    --------
    >>> import arrow_split as A
    >>> from arrow_split.torch import to_tensors
    >>> batch = A.RolloutBatch.from_train_data({"tokens": [[1, 2, 3], [4, 5]]})
    >>> to_tensors(batch, layout="packed")["cu_seqlens"]
    tensor([0, 3, 5], dtype=torch.int32)
    """
    rows = _rows_of(shard)
    options = _options(
        layout, device, token_dtype, mask_dtype, id_dtype, pad_value, pad_to_multiple_of, writable
    )
    return _convert(rows, options)


def to_micro_batches(
    shard: Shard | RolloutBatch, micro_batch_offsets: Sequence[int] | np.ndarray, **options: Any
) -> list[dict[str, torch.Tensor | list[torch.Tensor]]]:
    """One :func:`to_tensors` result (``**options``) per micro-batch of a shard.

    Micro-batch ``i`` is rows ``micro_batch_offsets[i]`` to ``micro_batch_offsets[i + 1]``
    (``RankSchedule.micro_batch_offsets``), a slice of the shard. Raises OptionTypeError or
    OptionError for offsets not rising from 0 to ``len(shard)``, OptionError (``key``: the
    option) for an option ``to_tensors`` does not take, and what ``to_tensors`` raises.
    """
    rows = _rows_of(shard)
    offsets = as_offsets("micro_batch_offsets", micro_batch_offsets)
    if int(offsets[-1]) != len(rows):
        msg = (
            f"`micro_batch_offsets` must rise from 0 to the shard's {len(rows)} rows, got "
            f"{offsets.tolist()!r:.80}; pass the rank's `micro_batch_offsets` for this shard"
        )
        raise OptionError(msg, key="micro_batch_offsets")
    parsed = _options(**as_keywords("to_micro_batches", options, to_tensors))
    record_batch, specs, batch_globals = rows.record_batch, rows.specs, rows.batch_globals
    pairs = itertools.pairwise(offsets.tolist())
    slices = (record_batch.slice(start, stop - start) for start, stop in pairs)
    return [_convert(RolloutBatch(part, specs, batch_globals), parsed) for part in slices]


def _rows_of(shard: object) -> RolloutBatch:
    if isinstance(shard, Shard):
        return shard.rows
    if isinstance(shard, RolloutBatch):
        return shard
    msg = (
        f"`shard` must be a Shard or a RolloutBatch, got {type(shard).__name__}; build one with "
        "`RolloutBatch.from_train_data(data)` or take one from a split"
    )
    raise mistake("data_type", msg, key="shard")


def _options(
    layout: object = "per_sample",
    device: object = None,
    token_dtype: object = torch.int64,
    mask_dtype: object = torch.int64,
    id_dtype: object = torch.int32,
    pad_value: object = 0,
    pad_to_multiple_of: object = None,
    writable: object = False,
) -> TensorOptions:
    """The keywords of :func:`to_tensors` (the same defaults), each parsed once."""
    chosen = as_choice("layout", layout, TensorLayout)
    multiple = _multiple(pad_to_multiple_of)
    token = parse_dtype("token_dtype", token_dtype, _TOKEN_DTYPES)
    mask = parse_dtype("mask_dtype", mask_dtype, _MASK_DTYPES)
    where = parse_device(device)
    fill = as_real("pad_value", pad_value, "an int or a float")
    ids = None if id_dtype is None else parse_dtype("id_dtype", id_dtype, _TOKEN_DTYPES)
    own = as_flag("writable", writable)
    return TensorOptions(chosen, token, mask, ids, where, fill, multiple, own)


def _multiple(pad_to_multiple_of: object) -> int | None:
    """``None`` or an int in ``[1, MAX_PAD_MULTIPLE]`` (an option: OptionError out of range)."""
    if pad_to_multiple_of is None:
        return None
    fix = "every padded row is at least that wide: pass a token multiple such as 8 or 128"
    return as_int(  # a 0-d array or tensor too; never a bool
        "pad_to_multiple_of", pad_to_multiple_of, minimum=1, maximum=MAX_PAD_MULTIPLE, fix=fix
    )


def _convert(rows: RolloutBatch, options: TensorOptions) -> dict[str, Tensors]:
    """Every numeric column of ``rows`` read (scalars as tensors), then arranged by the layout."""
    columns: AllColumns = {}
    # A move to another device makes every tensor fresh; on the CPU, `writable` copies instead:
    # without its buffer, memory that is not the tensor's own is copied (_private_or_copy).
    private = options.writable and options.on_cpu
    for shared in rows.numeric_columns():
        column = dataclasses.replace(shared, buffer=None) if private else shared
        columns[column.spec.name] = _READERS[column.role](column, options)
    return arrange(columns, options)


def _private_or_copy(values: np.ndarray, buffer: pa.Buffer | None) -> np.ndarray:
    """The memory rule, decided here only: share ``buffer`` if it is private, else copy.

    A mutable buffer was allocated here (a ``take``); an immutable one may be the object store.
    """
    if buffer is None or not _is_view_of(values, buffer):
        if not values.flags.writeable and _fresh(values):
            values.flags.writeable = True  # unpacked for this call: nobody else holds it
        return values if values.flags.writeable else values.copy()
    if not buffer.is_mutable:
        return values.copy()
    start = _address(values) - buffer.address
    return np.frombuffer(buffer, values.dtype, values.size, start).reshape(values.shape)


def _fresh(values: np.ndarray) -> bool:
    """Whether ``values`` is (a view of) numpy memory that owns its data, not an Arrow buffer."""
    base = values
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base.base is None and bool(base.flags.owndata)


def _address(values: np.ndarray) -> int:
    """Where ``values`` starts (``.ctypes.data`` would import ctypes on a process's first use)."""
    return int(values.__array_interface__["data"][0])


def _is_view_of(values: np.ndarray, buffer: pa.Buffer) -> bool:
    start, end = _address(values), buffer.address + buffer.size
    inside = buffer.address <= start and start + values.nbytes <= end
    return bool(values.size > 0 and values.flags.c_contiguous and inside)


def _tensor_of(
    column: ColumnValues, options: TensorOptions, dtype: type[np.generic] | None = None
) -> torch.Tensor:
    """The column's values on the device; a dtype conversion is a copy, else the memory rule."""
    values = column.values
    if dtype is not None and values.dtype != dtype:
        return move(torch.from_numpy(values.astype(dtype)), options)
    return move(torch.from_numpy(_private_or_copy(values, column.buffer)), options)


def _token_list_column(column: ColumnValues, options: TensorOptions) -> dict[str, Tensors]:
    sample_offsets = np.asarray(column.offsets, dtype=np.int64)
    token_offsets = np.asarray(column.token_offsets, dtype=np.int64)
    values = _tensor_of(column, options)
    return token_list_tensors(column.spec.name, values, sample_offsets, token_offsets, options)


def _ragged_column(column: ColumnValues, options: TensorOptions) -> RaggedColumn:
    spec, offsets = column.spec, np.asarray(column.offsets, dtype=np.int64)
    if spec.storage == "narrow":
        return RaggedColumn(spec, _id_tensor(column, options), offsets)
    dtype: type[np.generic] | None = None
    if spec.role == "length_source":
        dtype = _TOKEN_DTYPES[options.token_dtype]
    elif spec.flag and column.values.ndim == 1:
        dtype = _MASK_DTYPES[options.mask_dtype]
    return RaggedColumn(spec, _tensor_of(column, options, dtype), offsets)


def _id_tensor(column: ColumnValues, options: TensorOptions) -> torch.Tensor:
    """A narrow id column widened to ``id_dtype``: one cast, on the device when there is one."""
    dtype, stored = options.id_dtype, column.values.dtype
    if dtype is not None and stored.itemsize > dtype.itemsize:
        msg = (
            f"column `{column.spec.name}` is stored as {stored} (its ids do not fit "
            f"{dtype}); pass `id_dtype=torch.int64` or `id_dtype=None`"
        )
        raise ValueRangeError(msg, key=column.spec.name)
    if dtype is None:
        return _tensor_of(column, options)
    if options.on_cpu:
        return _tensor_of(column, options, _TOKEN_DTYPES[dtype])
    return _tensor_of(column, options).to(dtype)


_READERS: dict[str, Callable[[ColumnValues, TensorOptions], Any]] = {
    "scalar": _tensor_of,
    "ragged": _ragged_column,
    "token_lists": _token_list_column,
}
"""How each tensor role of a column (``ColumnValues.role``, the kind's answer) is read."""
