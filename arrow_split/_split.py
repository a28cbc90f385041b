"""RecordBatch + Plan -> shards, by a take per column; one rank's shard alone; padding.

:func:`_gather` is the one place rows are gathered: each column taken by its codec into fresh,
compact buffers (never a slice view, so pickling a shard ships only its own bytes). The public
functions parse their arguments once and call the trusted cores (``_gather``, ``_split_all``,
``_pad``, :meth:`RolloutBatch._plan_for`), which check nothing again.

Padding (miles #2694, ``pad_to_dp=True``): ``(-num_samples) % dp_size`` copies of the last row
are appended, with the values of :data:`arrow_split.schema.PADDING_VALUES` (zero loss mask,
``sample_indices`` -1, ...) and the ``padding`` role's flag (``is_padding``) true on them;
per-sample batch statistics (``raw_reward``) keep one value per real sample. A batch that
divides ``dp_size`` only gains the (all false) flag, so every step has the same columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._args import (
    as_flag,
    as_index_array,
    check_dp_rank,
    check_dp_size,
    describe,
    method_of,
)
from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions, numpy_view, ragged_values
from arrow_split.batch import RolloutBatch, check_batch
from arrow_split.errors import (
    OptionError,
    PlanError,
    PlanMismatchError,
    PlanTypeError,
    SchemaTypeError,
)
from arrow_split.plan import Plan, PlanKey
from arrow_split.schema import KNOWN_COLUMNS, PADDING_VALUES, ColumnSpec
from arrow_split.shard import Shard

__all__ = [
    "as_rollout_batch",
    "pad_to_dp",
    "shard_for_rank",
    "split",
    "split_train_data_by_dp_raw",
    "take",
    "take_rows",
]

# The column the schema declares with the ``padding`` role (``is_padding``).
_MARKER = next(name for name, spec in KNOWN_COLUMNS.items() if spec.role == "padding")


_DEFAULTS = EncodeOptions()


def as_rollout_batch(data_or_batch: RolloutBatch | Mapping[str, Any]) -> RolloutBatch:
    """Return a RolloutBatch as it is, or build one from a train-data dict."""
    if isinstance(data_or_batch, Mapping):
        return RolloutBatch._encode(data_or_batch, (), _DEFAULTS)
    return check_batch(data_or_batch, "data_or_batch")


def _parse_indices(indices: object, num_samples: int) -> np.ndarray:
    try:
        rows = as_index_array("indices", indices)
    except OptionError as exc:
        got = (
            f"shape {indices.shape} {indices.dtype}"
            if isinstance(indices, np.ndarray)
            else describe(indices)
        )
        msg = f"`indices` must be a 1-D array of row numbers, got {got}; {exc}"
        raise PlanError(msg) from None
    if rows.size and (rows.min() < 0 or rows.max() >= num_samples):
        bad = rows[(rows < 0) | (rows >= num_samples)][0]
        msg = f"`indices` holds row {bad}, outside [0, {num_samples}) for this batch"
        raise PlanError(msg)
    rows.flags.writeable = False
    return rows


def _take_columns(batch: RolloutBatch, rows: np.ndarray) -> pa.RecordBatch:
    record_batch = batch.record_batch
    columns = [
        codec_for(batch.specs[name]).take(record_batch.column(name), rows)
        for name in record_batch.schema.names
    ]
    return pa.RecordBatch.from_arrays(columns, schema=record_batch.schema)


def _gather(
    batch: RolloutBatch,
    rows: np.ndarray,
    partition: np.ndarray | None,
    batch_total_lengths: np.ndarray,
    plan_key: PlanKey | None,
    dp_rank: int | None,
) -> Shard:
    """The one gatherer: ``rows`` (read-only int64, in range) of ``batch`` as a Shard.

    ``partition`` maps ``batch``'s rows to the whole batch's (``None``: ``batch`` is whole).
    """
    taken = RolloutBatch._make(
        _take_columns(batch, rows),
        batch.specs,
        batch._batch_globals,
        trust_objects=batch.trust_objects,
        roles=batch.roles,
    )
    # A fresh array either way: ``rows`` may view a plan read from the object store, and a
    # shard holds no view of the store (it would pin the whole batch's object).
    partition = rows.copy() if partition is None else partition[rows]
    partition.flags.writeable = False
    return Shard._make(taken, partition, batch_total_lengths, plan_key, dp_rank)


def take_rows(source: RolloutBatch | Shard, indices: np.ndarray) -> Shard:
    """Gather ``indices`` (rows of ``source``) into a shard with fresh, compact buffers.

    The shard's ``partition`` maps each row to the row of the original whole batch, and it keeps
    the whole batch's total lengths. Rows taken of a shard keep that shard's plan and rank.
    """
    if isinstance(source, Shard):  # its rows, mapped back to its whole batch
        rows = _parse_indices(indices, source.num_samples)
        lengths = source.batch_total_lengths
        return _gather(
            source.rows, rows, source.partition, lengths, source.plan_key, source.dp_rank
        )
    batch = check_batch(source)
    rows = _parse_indices(indices, batch.num_samples)
    return _gather(batch, rows, None, batch.total_lengths, None, None)


def _parse_plan(batch: RolloutBatch, plan: object) -> Plan:
    if not isinstance(plan, Plan):
        msg = f"`plan` must be a Plan, got {type(plan).__name__}; make one with `batch.make_plan`"
        raise PlanTypeError(msg)
    if plan.num_samples != batch.num_samples:
        msg = (
            f"the plan is for {plan.num_samples} samples but the batch has "
            f"{batch.num_samples}; plan this batch (`batch.make_plan(dp_size, ...)`)"
        )
        raise PlanError(msg)
    return plan


def take(batch: RolloutBatch, plan: Plan, dp_rank: int) -> Shard:
    """Rank ``dp_rank``'s rows of ``plan``, gathered alone into a shard.

    No other rank's rows are gathered, converted or copied.

    Raises
    ------
    SchemaTypeError
        ``batch`` is not a RolloutBatch (a Shard's rows are ``shard.rows``).
    PlanError, PlanTypeError
        ``plan`` is not a Plan of this batch's sample count, or ``dp_rank`` is out of range.
    """
    batch = check_batch(batch)
    plan = _parse_plan(batch, plan)
    rank = check_dp_rank(dp_rank, plan.dp_size)
    return _gather(batch, plan.partitions[rank], None, batch.total_lengths, plan.key, rank)


def split(batch: RolloutBatch, plan: Plan) -> list[Shard]:
    """Every rank's shard of ``plan``; the shards share one array of the batch's total lengths.

    Raises
    ------
    SchemaTypeError, PlanError, PlanTypeError
        As :func:`take`.
    """
    batch = check_batch(batch)
    return _split_all(batch, _parse_plan(batch, plan))


def _split_all(batch: RolloutBatch, plan: Plan) -> list[Shard]:
    lengths = batch.total_lengths  # one read-only array, shared by every shard
    return [
        _gather(batch, rows, None, lengths, plan.key, rank)
        for rank, rows in enumerate(plan.partitions)
    ]


def split_train_data_by_dp_raw(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_size: int,
    *,
    balance_data: bool,
    pad_to_dp: bool = False,
) -> list[Shard]:
    """Split a batch into ``dp_size`` shards, one per data-parallel rank.

    Parameters
    ----------
    data_or_batch
        A train-data dict (converted with :meth:`RolloutBatch.from_train_data`) or a
        RolloutBatch (to split a shard's rows again, pass ``shard.rows``).
    dp_size
        The number of data-parallel ranks.
    balance_data
        ``False``: rank ``r`` gets rows ``r, r + dp_size, ...``. ``True``: Karmarkar-Karp
        partitions of equal size balanced by total length (see :func:`plan_partitions`).
        Either way, a batch with adapter slots has each rank's rows stably sorted by slot.
    pad_to_dp
        First add the fewest padding rows that make the batch a multiple of ``dp_size``
        (:func:`arrow_split.pad_to_dp`: zero loss mask, ``sample_indices`` -1, ``is_padding``
        true), so that a balanced split of any size works.

    Returns
    -------
    list of Shard
        Shard ``r`` holds rank ``r``'s rows in plan order; ``shard.partition`` maps them back,
        ``shard.plan_fingerprint`` is the same on every shard.
    """
    size = check_dp_size(dp_size)
    method = method_of(balance_data)
    pad = as_flag("pad_to_dp", pad_to_dp)
    batch = as_rollout_batch(data_or_batch)
    if pad:
        batch = _pad(batch, size)
    return _split_all(batch, batch._plan_for(size, method))


def shard_for_rank(
    data_or_batch: RolloutBatch | Mapping[str, Any],
    dp_rank: int,
    dp_size: int,
    *,
    balance_data: bool | None,
    resplit: bool = False,
    pad_to_dp: bool = False,
) -> Shard:
    """Rank ``dp_rank``'s shard, as ``split_train_data_by_dp_raw(...)[dp_rank]``, alone.

    The plan is computed from the length source's offsets (and the adapter slots) alone, as
    :func:`split_train_data_by_dp_raw` computes it (:meth:`RolloutBatch.make_plan`), and the
    rank's rows are taken by :func:`take`: no other rank's rows are gathered, converted or
    copied. A batch that carries the driver's plan (:meth:`RolloutBatch.with_plan`) is checked
    against it and not re-planned.

    Parameters
    ----------
    data_or_batch, dp_size
        As for :func:`split_train_data_by_dp_raw`.
    dp_rank
        The rank whose shard to take, in ``[0, dp_size)``.
    balance_data
        The plan's method; ``None`` follows the plan the batch carries (an error if it has none).
    resplit
        Only for a batch that carries a plan: allow a ``dp_size`` other than the plan's (the
        batch is planned again for the new size, e.g. after a rank was lost). Without it a
        different ``dp_size`` is a :class:`PlanMismatchError`.
    pad_to_dp
        As for :func:`split_train_data_by_dp_raw`: pad the batch to a multiple of ``dp_size``
        first (every rank pads the same way). A batch that carries a plan for this ``dp_size``
        was padded, if at all, before it was planned, and is taken as it is.

    Raises
    ------
    PlanMismatchError
        The batch carries a plan of another method, or of another ``dp_size`` without
        ``resplit=True``.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    if not isinstance(resplit, (bool, np.bool_)):
        msg = f"`resplit` must be a bool, got {type(resplit).__name__}"
        raise PlanTypeError(msg)
    pad = as_flag("pad_to_dp", pad_to_dp)
    batch = as_rollout_batch(data_or_batch)
    plan = batch.plan
    if balance_data is None:
        if plan is None:
            msg = (
                "`balance_data` is None but the batch carries no plan to follow; pass "
                "`balance_data=True` or `False`, as the driver did"
            )
            raise PlanError(msg)
        balance_data = plan.method == "balanced"
    method = method_of(balance_data)
    if plan is not None:
        _check_against(plan, method, size, bool(resplit))
        if plan.dp_size == size:
            return _gather(batch, plan.partitions[rank], None, batch.total_lengths, plan.key, rank)
    if pad:
        batch = _pad(batch, size)
    plan = batch._plan_for(size, method)
    return _gather(batch, plan.partitions[rank], None, batch.total_lengths, plan.key, rank)


def _check_against(plan: Plan, method: str, dp_size: int, resplit: bool) -> None:
    """Raise unless a rank's request matches the plan the batch was put with."""
    if plan.method != method:
        msg = (
            f"this rank asks for a {method} plan (`balance_data={method == 'balanced'}`) but the "
            f"batch was put with a {plan.method} plan (`balance_data="
            f"{plan.method == 'balanced'}`, fingerprint {plan.fingerprint}); pass the same "
            "`balance_data` on every rank as on the driver"
        )
        raise PlanMismatchError(msg)
    if plan.dp_size != dp_size and not resplit:
        msg = (
            f"this rank asks for `dp_size={dp_size}` but the batch was put for "
            f"`dp_size={plan.dp_size}` (fingerprint {plan.fingerprint}); pass `resplit=True` to "
            "split it again for the new size (e.g. after losing a rank), or fix `dp_size`"
        )
        raise PlanMismatchError(msg)


def pad_to_dp(batch: RolloutBatch, dp_size: int) -> RolloutBatch:
    """The batch with the fewest padding rows that make its size a multiple of ``dp_size``.

    Parameters
    ----------
    batch
        A whole batch (not a shard: pad before splitting).
    dp_size
        The number of data-parallel ranks.

    Returns
    -------
    RolloutBatch
        A new batch (``batch`` is unchanged) of ``ceil(n / dp_size) * dp_size`` rows whose
        ``is_padding`` column marks the added rows; see the module docstring for their values.
        It carries no plan: plan it afterwards.

    Raises
    ------
    PlanError, PlanTypeError
        A bad ``dp_size``.
    SchemaTypeError
        ``batch`` is not a whole RolloutBatch.
    """
    size = check_dp_size(dp_size)
    if type(batch) is not RolloutBatch:
        msg = (
            f"`pad_to_dp` pads a whole RolloutBatch before it is split, got "
            f"{type(batch).__name__}; build one with `RolloutBatch.from_train_data(data)`"
        )
        raise SchemaTypeError(msg)
    return _pad(batch, size)


def _pad(batch: RolloutBatch, dp_size: int) -> RolloutBatch:
    """:func:`pad_to_dp` of parsed arguments."""
    num_samples = batch.num_samples
    deficit = -num_samples % dp_size
    marker = batch.roles.padding
    if deficit == 0 and marker is not None:
        return batch
    record_batch = batch.record_batch
    specs = dict(batch.specs)
    if deficit:
        rows = np.concatenate(
            [np.arange(num_samples, dtype=np.int64), np.full(deficit, num_samples - 1, np.int64)]
        )
        record_batch = _take_columns(batch, rows)
    if marker is None:
        marker = _MARKER
        specs[marker] = KNOWN_COLUMNS[marker]
        flags = pa.array(np.zeros(record_batch.num_rows, dtype=np.bool_), type=pa.bool_())
        record_batch = record_batch.append_column(marker, flags)
    columns = {name: record_batch.column(name) for name in record_batch.schema.names}
    for name, value in PADDING_VALUES.items():
        if name in columns:
            columns[name] = _fill_rows(specs[name], columns[name], num_samples, value)
    names = list(columns)
    padded = pa.RecordBatch.from_arrays([columns[name] for name in names], names=names)
    return RolloutBatch._make(
        padded,
        MappingProxyType(specs),
        batch._batch_globals,
        trust_objects=batch.trust_objects,
    )


def _fill_rows(spec: ColumnSpec, array: pa.Array, start: int, value: int) -> pa.Array:
    """``array`` with every value of the rows from ``start`` on set to ``value``."""
    if start >= len(array):
        return array
    if codec_for(spec).tensor_role == "ragged":
        values, offsets = ragged_values(array)
        filled = values.copy()
        filled[offsets[start] :] = value
        child = pa.array(filled, type=array.type.value_type)
        return pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), child)
    filled = np.array(numpy_view(array), copy=True)
    filled[start:] = value
    return pa.array(filled, type=array.type)
