"""One rank's shard -> torch tensors, in the layout a training step wants.

:func:`to_tensors` turns the numeric columns of a shard into tensors; this leaf is the only part of
arrow_split that imports torch, and nothing in the core imports it. Its keywords are parsed by
:mod:`arrow_split.torch._options`.

Layouts (:data:`TensorLayout`) of the ragged columns (``per_token`` and ``per_sample_tensor``):

``per_sample`` (default)
    One ``list[torch.Tensor]`` per column, one tensor per sample (``[len]``, or
    ``[rows, *trailing]`` for a tensor column). The tensors are views of one flat tensor per column
    (``torch.split``), so they share one storage: there is never one allocation per sample.
``packed``
    One flat tensor per column (``[sum_len]``, or ``[sum_rows, *trailing]``) plus int32 cumulative
    lengths starting at 0 (``n + 1`` values), ready for packed-sequence (THD) attention. Their keys
    follow the schema, never the data: ``cu_seqlens`` for ``tokens`` and the columns whose length
    rule is ``"tokens"``, ``response_cu_seqlens`` for rule ``"response"``, ``<name>_cu_seqlens``
    for any other ragged column.
``padded``
    ``[n, max_len]`` per column (``[n, max_rows, *trailing]`` for a tensor column) filled with
    ``pad_value``; ``max_len`` is the longest sample of the column's length group, rounded up to
    ``pad_to_multiple_of`` when given. Flag columns (``loss_masks``) and bool columns are padded
    with 0 (False) whatever ``pad_value`` is, so that padding never counts in a loss. Adds
    ``attention_mask`` (bool, the shape of ``tokens``) and, when the shard has response columns,
    ``response_mask``.
``nested``
    One jagged nested tensor per column, ``torch.nested.nested_tensor_from_jagged(values,
    offsets)`` of shape ``[n, j, *trailing]``: torch accepts trailing dimensions, so tensor columns
    are supported too. The nested tensor is a view of the same values as ``packed``; columns of
    one length group share one offsets tensor, so ``loss_masks * rollout_log_probs`` works. The
    known noise of torch's nested tensors (a log line of torch 2.13, the prototype warning of older
    versions) is silenced around these calls only.

A list per token (``per_token_list``: ``rollout_sampling_masks``, the ids the sampler could pick
at each response token) has no dense shape. In the ``per_sample`` layout it gives ``<name>``, one
flat tensor of values per sample, and ``<name>_offsets``, one int64 tensor per sample of its
``tokens + 1`` per-token offsets from 0 (miles' ``rollout_sampling_mask_ids`` /
``rollout_sampling_mask_offsets`` per sample). In every other layout it is packed: ``<name>``
(every value of the shard), ``<name>_offsets`` (int64, one more than the shard's tokens, from 0:
token ``t`` holds ``values[offsets[t]:offsets[t + 1]]``) and ``<name>_cu_seqlens`` (int32,
``n + 1`` cumulative token counts from 0: sample ``i`` holds tokens ``cu[i]`` to ``cu[i + 1]``).
These keys come after the other columns; the values follow the memory rule below.

Per-sample scalars become 1-D tensors in every layout. Object columns (``prompt``, ``metadata``...)
and batch-global values are not tensors and are not in the result: read them from
``shard.rows.to_train_data()`` and ``shard.batch_globals``.

dtypes: ``tokens`` is ``token_dtype`` (int64 by default, int32 allowed); per-token flag columns
(``loss_masks``) are ``mask_dtype`` (int64 by default; bool, uint8, int32 and float32 allowed);
id columns stored narrow (``rollout_routed_experts``, ``rollout_indexer_topk``: uint8 or uint16
in the shard, see :data:`arrow_split.schema.ColumnStorage`) are widened to ``id_dtype`` (int32 by
default, as the actor expects; int64 allowed; ``None`` keeps the stored type, zero-copy) in one
vectorised cast: on the CPU before any move, or after the move when ``device=`` is given (the
narrow values cross to the device and the cast runs there); every other column keeps its Arrow
type (log-probs float32, scalars int64, float64 or bool). Cumulative lengths are int32;
``attention_mask`` and ``response_mask`` are bool.

Memory rule: a tensor shares the Arrow buffer only when that buffer is private to this process.
Arrow marks a buffer it allocated (what ``take``, and so every split, returns) as mutable: such a
column is wrapped without a copy, and a write into the tensor is a write into the shard. A buffer
read zero-copy from shared, read-only memory (Ray's object store, an IPC stream over read-only
bytes) is immutable: the column is copied once, so nothing returned lets a write reach the shared
copy. A dtype conversion (int32 tokens -> int64) is a copy anyway; bool columns are unpacked
from bits (a copy); padding always allocates; the cumulative lengths, the masks and the nested
offsets are always fresh. A whole batch built from writable numpy arrays may hold them as mutable
buffers: its tensors then share memory with those arrays. ``device=`` moves every
tensor (on the CPU nothing moves, so the rule above holds there).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

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
    SchemaTypeError,
    Shard,
    ValueRangeError,
)
from arrow_split._args import as_offsets
from arrow_split.torch._layouts import (
    LAYOUTS,
    AllColumns,
    RaggedColumn,
    TensorOptions,
    TokenListColumn,
    move,
)
from arrow_split.torch._options import (
    ID_DTYPES,
    MASK_DTYPES,
    TOKEN_DTYPES,
    TensorLayout,
    check_id_dtype,
    check_options,
)

__all__ = ["TensorLayout", "to_micro_batches", "to_tensors"]


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
) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """Convert the numeric columns of a shard (or a whole batch) into torch tensors.

    Parameters
    ----------
    shard
        What a split returns (or a whole :class:`~arrow_split.RolloutBatch`).
    layout
        How the ragged columns are laid out (:data:`TensorLayout`): ``"per_sample"`` (a list of
        views per column), ``"packed"`` (flat + cumulative lengths), ``"padded"`` or ``"nested"``.
    device
        Move every tensor to this device (``torch.device`` or str); ``None`` keeps them on the CPU.
    token_dtype
        dtype of ``tokens``: ``torch.int64`` (a copy) or ``torch.int32`` (zero-copy when allowed).
    mask_dtype
        dtype of per-token flag columns (``loss_masks``): ``torch.int64``, ``torch.int32``,
        ``torch.uint8`` (the stored type), ``torch.bool`` or ``torch.float32``.
    id_dtype
        dtype of the id columns stored narrow (``rollout_routed_experts``...): ``torch.int32``
        (the default), ``torch.int64``, or ``None`` for the stored type (uint8, uint16 or int32,
        the same on every rank of a step; zero-copy when allowed).
    pad_value
        ``"padded"`` only: the value of padding positions (flag and bool columns: 0).
    pad_to_multiple_of
        ``"padded"`` only: round each padded length up to a multiple of this (``>= 1``).

    Returns
    -------
    dict of str to torch.Tensor or list of torch.Tensor
        The ragged and scalar columns in the shard's column order, then the extra keys of the
        layout (``cu_seqlens``..., ``attention_mask``...). Objects and batch-global values are
        left out. The module docstring says when a tensor shares the Arrow buffers.

    Raises
    ------
    SchemaTypeError
        ``shard`` is neither a Shard nor a RolloutBatch.
    OptionError
        An unknown ``layout`` or ``device``, or a ``token_dtype``/``mask_dtype``/``id_dtype`` not
        listed above.
    OptionTypeError
        An option of the wrong type: a ``layout``, ``device`` or dtype that is not one at all
        (``device=0.5``, ``token_dtype="int64"``), a ``pad_value`` that is not a number, a
        ``pad_to_multiple_of`` that is not an int (``2.0``, ``True``). Also an OptionError.
    SchemaError
        A column whose name clashes with an extra key of the layout.
    ValueRangeError
        ``pad_to_multiple_of`` < 1, a ``pad_value`` that does not fit a column's dtype, or more
        than 2**31 - 1 values in a column (int32 cumulative lengths), or an ``id_dtype`` narrower
        than a column's stored type (ids beyond int32 in an int64 column).

    Examples
    --------
    >>> import arrow_split as A
    >>> from arrow_split.torch import to_tensors
    >>> batch = A.RolloutBatch.from_train_data({"tokens": [[1, 2, 3], [4, 5]]})
    >>> to_tensors(batch, layout="packed")["cu_seqlens"]
    tensor([0, 3, 5], dtype=torch.int32)
    """
    rows = _rows_of(shard)
    options = check_options(layout, device, token_dtype, mask_dtype, pad_value, pad_to_multiple_of)
    ids = check_id_dtype(id_dtype)
    columns: AllColumns = {}
    for column in rows.numeric_columns():
        if column.token_offsets is not None:
            tensor = move(_tensor_of(column.values, column.buffer), options)
            sample_offsets = np.asarray(column.offsets, dtype=np.int64)
            token_offsets = np.asarray(column.token_offsets, dtype=np.int64)
            columns[column.spec.name] = TokenListColumn(
                column.spec, tensor, sample_offsets, token_offsets
            )
        elif column.offsets is None:
            tensor = _tensor_of(column.values, column.buffer)
            columns[column.spec.name] = move(tensor, options)
        elif column.spec.storage == "narrow":
            columns[column.spec.name] = _id_column(column, options, ids)
        else:
            columns[column.spec.name] = _ragged_column(column, options)
    return LAYOUTS[layout](columns, options)


def to_micro_batches(
    shard: Shard | RolloutBatch, micro_batch_offsets: Sequence[int] | np.ndarray, **options: Any
) -> list[dict[str, torch.Tensor | list[torch.Tensor]]]:
    """One :func:`to_tensors` result per micro-batch of a shard whose rows are in micro-batch order.

    A rank of a rollout-side schedule (:func:`arrow_split.plan_schedule`) gets its rows ordered
    by micro-batch, so micro-batch ``i`` is the row range ``micro_batch_offsets[i]`` to
    ``micro_batch_offsets[i + 1]``: each is converted from a slice of the shard, with no second
    gather, and gets its own ``cu_seqlens`` (starting at 0) in the packed layout.

    Parameters
    ----------
    shard
        What a split returns (or a whole batch).
    micro_batch_offsets
        ``num_microbatches + 1`` non-decreasing row offsets from 0 to ``len(shard)``
        (``RankSchedule.micro_batch_offsets``).
    **options
        The keywords of :func:`to_tensors` (``layout="packed"`` for packed micro-batches).

    Raises
    ------
    OptionTypeError, OptionError
        Offsets that are not integers, or not non-decreasing from 0 to the shard's rows; and
        what :func:`to_tensors` raises for its options.
    """
    rows = _rows_of(shard)
    offsets = as_offsets("micro_batch_offsets", micro_batch_offsets)
    if int(offsets[-1]) != len(rows):
        msg = (
            f"`micro_batch_offsets` must rise from 0 to the shard's {len(rows)} rows, got "
            f"{offsets.tolist()!r:.80}; pass the rank's `micro_batch_offsets` for this shard"
        )
        raise OptionError(msg)
    bounds = offsets.tolist()
    record_batch = rows.record_batch
    return [
        to_tensors(
            RolloutBatch(record_batch.slice(start, stop - start), rows.specs, rows.batch_globals),
            **options,
        )
        for start, stop in itertools.pairwise(bounds)
    ]


def _rows_of(shard: object) -> RolloutBatch:
    """A shard's rows (``shard.rows``), or a whole batch as it is."""
    if isinstance(shard, Shard):
        return shard.rows
    if isinstance(shard, RolloutBatch):
        return shard
    msg = (
        f"`shard` must be a Shard or a RolloutBatch, got {type(shard).__name__}; build one with "
        "`RolloutBatch.from_train_data(data)` or take one from a split"
    )
    raise SchemaTypeError(msg)


# --- Arrow -> torch, and the memory rule -------------------------------------------------------


def _private_or_copy(values: np.ndarray, buffer: pa.Buffer | None) -> np.ndarray:
    """The memory rule, decided here only: share ``buffer`` if it is private, else copy.

    ``values`` is what :meth:`RolloutBatch.numeric_columns` returned: a view into ``buffer``, or
    (booleans) an array it already unpacked into fresh memory. A mutable buffer is one Arrow
    allocated in this process: the result is a writable view of it. An immutable buffer may be
    shared (an object store's read-only memory): the result is a copy.
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
    """Whether ``values`` is (a view of) numpy memory that owns its data, not an Arrow buffer.

    What :meth:`RolloutBatch.numeric_columns` unpacks (booleans) is fresh memory handed out
    read-only; to_tensors made that call itself, so the array is its own to write.
    """
    base = values
    while isinstance(base.base, np.ndarray):
        base = base.base
    return base.base is None and bool(base.flags.owndata)


def _address(values: np.ndarray) -> int:
    """Where ``values`` starts (``.ctypes.data`` would import ctypes on a process's first use)."""
    address: int = values.__array_interface__["data"][0]
    return address


def _is_view_of(values: np.ndarray, buffer: pa.Buffer) -> bool:
    start = _address(values)
    return bool(
        values.size > 0
        and values.flags.c_contiguous
        and buffer.address <= start
        and start + values.nbytes <= buffer.address + buffer.size
    )


def _tensor_of(
    values: np.ndarray, buffer: pa.Buffer | None, dtype: type[np.generic] | None = None
) -> torch.Tensor:
    """A CPU tensor of ``values``; a dtype conversion is a copy, else :func:`_private_or_copy`."""
    if dtype is not None and values.dtype != dtype:
        return torch.from_numpy(values.astype(dtype))
    return torch.from_numpy(_private_or_copy(values, buffer))


def _ragged_column(column: ColumnValues, options: TensorOptions) -> RaggedColumn:
    spec = column.spec
    dtype: type[np.generic] | None = None
    if spec.role == "length_source":
        dtype = TOKEN_DTYPES[options.token_dtype]
    elif spec.flag and column.values.ndim == 1:
        dtype = MASK_DTYPES[options.mask_dtype]
    tensor = _tensor_of(column.values, column.buffer, dtype)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    return RaggedColumn(spec, move(tensor, options), offsets)


def _id_column(
    column: ColumnValues, options: TensorOptions, dtype: torch.dtype | None
) -> RaggedColumn:
    """A narrow id column widened to ``dtype``: one cast, on the device when there is one."""
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = column.values
    if dtype is not None and values.dtype.itemsize > dtype.itemsize:
        msg = (
            f"column `{column.spec.name}` is stored as {values.dtype} (its ids do not fit "
            f"{dtype}); pass `id_dtype=torch.int64` or `id_dtype=None`"
        )
        raise ValueRangeError(msg)
    on_cpu = options.device is None or options.device.type == "cpu"
    if dtype is None or not on_cpu:
        tensor = move(_tensor_of(values, column.buffer), options)
        return RaggedColumn(column.spec, tensor if dtype is None else tensor.to(dtype), offsets)
    tensor = _tensor_of(values, column.buffer, ID_DTYPES[dtype])
    return RaggedColumn(column.spec, move(tensor, options), offsets)
