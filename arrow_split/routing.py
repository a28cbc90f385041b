"""A rank's own slice of the routed experts: its pipeline stage's layers, its CP chunks' tokens.

MoE routing replay stores, per sample, one row per token but the last (``tokens_minus_one``)
of ``layers x top_k`` expert ids. A model-parallel rank needs only the layers of its pipeline
stage and the tokens of its context-parallel chunks: Megatron's load-balanced split cuts each
sequence of ``T`` tokens into ``2 x cp_size`` chunks of ``ceil(T / (2 x cp_size))`` tokens (the
last padded), CP rank ``r`` holding chunks ``r`` and ``2 x cp_size - 1 - r``. Routing row ``j``
belongs to token ``j``; the last token (and any padding) has no row and replays as a pad value.

:func:`take_expert_slice` gathers exactly those ids, once, as narrow as the expert count allows,
into an :class:`ExpertSlice` that says which layers and which token rows it holds; its
:meth:`ExpertSlice.padded` is the per-sample zigzag layout a replay consumes. numpy and pyarrow
only; ``arrow_split.torch.expert_tensors`` makes tensors of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from arrow_split._args import as_flag, as_int, as_rows, describe
from arrow_split.batch import ColumnValues, RolloutBatch
from arrow_split.errors import (
    ColumnNotFoundError,
    OptionError,
    OptionTypeError,
    PlanError,
    SchemaError,
    ValueRangeError,
    mistake,
)
from arrow_split.schema import ROUTED_EXPERTS
from arrow_split.shard import Shard

__all__ = ["ExpertSlice", "ParallelPlace", "expert_id_dtype", "take_expert_slice"]

_META_LAYERS = b"arrow_split.layers"
_META_CP = b"arrow_split.cp"
_MAX_SIZE = 1 << 20
"""Above any real pipeline or CP size; ``2 x cp_size`` chunk counts stay far inside int64."""


@dataclasses.dataclass(frozen=True, slots=True)
class ParallelPlace:
    """Where a rank sits in the model-parallel layout: its pipeline stage and CP rank.

    Parameters
    ----------
    pp_size, pp_rank
        The pipeline stages and this rank's stage, in ``[0, pp_size)``.
    cp_size, cp_rank
        The context-parallel size and this rank's CP rank, in ``[0, cp_size)``.
    stage_layers
        Layers per stage when the stages are uneven (``pp_size`` ints, each >= 1, summing to the
        layer count); ``None``: the layers divided evenly (Megatron's default).
    cp_pad
        ``True`` pads each sequence to a multiple of ``2 x cp_size`` (as miles' ``slice_with_cp``
        does); ``False`` requires every sequence to divide it already.
    """

    pp_size: int = 1
    pp_rank: int = 0
    cp_size: int = 1
    cp_rank: int = 0
    stage_layers: tuple[int, ...] | None = None
    cp_pad: bool = True

    def __post_init__(self) -> None:
        pp_size = as_int("pp_size", self.pp_size, minimum=1, maximum=_MAX_SIZE - 1)
        cp_size = as_int("cp_size", self.cp_size, minimum=1, maximum=_MAX_SIZE - 1)
        object.__setattr__(self, "pp_size", pp_size)
        object.__setattr__(self, "cp_size", cp_size)
        pp_rank = as_int("pp_rank", self.pp_rank, minimum=0, maximum=pp_size - 1)
        cp_rank = as_int("cp_rank", self.cp_rank, minimum=0, maximum=cp_size - 1)
        object.__setattr__(self, "pp_rank", pp_rank)
        object.__setattr__(self, "cp_rank", cp_rank)
        object.__setattr__(self, "cp_pad", as_flag("cp_pad", self.cp_pad))
        if self.stage_layers is not None:
            stages = tuple(
                as_int("stage_layers", n, minimum=1) for n in _sequence(self.stage_layers)
            )
            if len(stages) != pp_size:
                msg = (
                    f"`stage_layers` gives {len(stages)} stages but `pp_size` is {pp_size}; pass "
                    "one layer count per pipeline stage"
                )
                raise OptionError(msg, key="stage_layers")
            object.__setattr__(self, "stage_layers", stages)

    def layers(self, layer_count: int) -> range:
        """The stage's layers of ``layer_count``; a PlanError for a layout that does not fit."""
        if self.stage_layers is not None:
            if sum(self.stage_layers) != layer_count:
                msg = (
                    f"`stage_layers` {list(self.stage_layers)} sums to {sum(self.stage_layers)} "
                    f"layers but the routed experts hold {layer_count}; give every layer a stage"
                )
                raise PlanError(msg, key="stage_layers")
            start = sum(self.stage_layers[: self.pp_rank])
            return range(start, start + self.stage_layers[self.pp_rank])
        if self.pp_size > layer_count:
            msg = (
                f"`pp_size` {self.pp_size} is more pipeline stages than the {layer_count} layers "
                "of the routed experts; every stage needs at least one layer"
            )
            raise PlanError(msg, key="pp_size")
        if layer_count % self.pp_size:
            msg = (
                f"{layer_count} layers do not divide into `pp_size` {self.pp_size} equal stages; "
                "pass `stage_layers` (one count per stage) for an uneven pipeline"
            )
            raise PlanError(msg, key="pp_size")
        per_stage = layer_count // self.pp_size
        return range(self.pp_rank * per_stage, (self.pp_rank + 1) * per_stage)

    def chunks(self, total_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per sample of ``total_lengths`` tokens: rows held, layout slots, padded length.

        Returns ``ranges`` (``n x 2 x 2``: per chunk, the routing rows ``[start, stop)`` it
        holds), ``slots`` (``n x 2``: where each chunk starts in the padded layout) and
        ``padded`` (``n``: rows of the padded layout). With ``cp_size == 1`` the one chunk is
        every row and the layout is the sequence's ``T`` rows.
        """
        lengths = np.asarray(total_lengths, dtype=np.int64)
        rows = np.maximum(lengths - 1, 0)
        n = len(lengths)
        ranges = np.zeros((n, 2, 2), dtype=np.int64)
        slots = np.zeros((n, 2), dtype=np.int64)
        if self.cp_size == 1:
            ranges[:, 0, 1] = rows
            ranges[:, 1, :] = rows[:, None]
            slots[:, 1] = rows
            return ranges, slots, lengths.copy()
        parts = 2 * self.cp_size
        if not self.cp_pad and n and (bad := np.flatnonzero(lengths % parts)).size:
            sample = int(bad[0])
            msg = (
                f"{int(lengths[sample])} tokens do not divide into 2 x `cp_size`"
                f" = {parts} equal chunks; pad the sequences to a multiple of {parts} or pass "
                "`cp_pad=True`"
            )
            raise PlanError(msg, key="cp_size", sample=sample)
        chunk = -(-lengths // parts)
        for which, index in enumerate((self.cp_rank, parts - 1 - self.cp_rank)):
            start = index * chunk
            ranges[:, which, 0] = np.minimum(start, rows)
            ranges[:, which, 1] = np.minimum(start + chunk, rows)
        slots[:, 1] = chunk
        return ranges, slots, 2 * chunk


def _sequence(value: object) -> Sequence[object]:
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return cast("list[object]", value.tolist())
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        msg = f"`stage_layers` must be a sequence of ints, got {describe(value)}"
        raise OptionTypeError(msg, key="stage_layers")
    return list(value)


def expert_id_dtype(num_experts: int) -> np.dtype:
    """The narrowest dtype of ids below ``num_experts``: uint8 up to 256, uint16 up to 65,536.

    ``num_experts`` is an int in ``[1, 2**31]`` (ids are int32 at most); else an
    :class:`~arrow_split.OptionTypeError` or :class:`~arrow_split.OptionError`.
    """
    fix = "ids are int32 at most: pass the model's expert count"
    count = as_int("num_experts", num_experts, minimum=1, maximum=2**31, fix=fix)
    return next(
        np.dtype(dtype)
        for dtype in (np.uint8, np.uint16, np.int32)
        if count - 1 <= np.iinfo(dtype).max
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ExpertSlice:
    """A rank's routed experts: its stage's layers, its CP chunks' token rows (real ids only).

    ``column`` (``values``: the same ids as a read-only ``rows x layers x top_k`` array) holds,
    per sample, the held rows (chunk ``r``'s, then chunk ``2 x cp - 1 - r``'s)
    of ``len(layers)`` layers by ``top_k`` ids; ``field`` names it, with its type and metadata
    (``arrow_split.layers``: ``start:stop/count``, ``arrow_split.cp``: ``rank/size``).
    ``rows`` are the batch rows of the samples, ``ranges`` (``n x 2 x 2``) the routing rows of
    each chunk, ``slots`` and ``padded_lengths`` where they go in the padded zigzag layout.
    """

    field: pa.Field
    column: pa.Array
    values: np.ndarray
    rows: np.ndarray
    layers: range
    layer_count: int
    cp_size: int
    cp_rank: int
    ranges: np.ndarray
    slots: np.ndarray
    padded_lengths: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        """Held rows per sample as offsets (int64, ``n + 1``, from 0)."""
        counts = (self.ranges[:, :, 1] - self.ranges[:, :, 0]).sum(axis=1)
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return offsets

    @property
    def nbytes(self) -> int:
        """Bytes of the held ids and their offsets."""
        return int(self.column.nbytes)

    def packed(
        self, pad_value: int = -1, dtype: npt.DTypeLike = np.int32
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every sample's zigzag layout one after the other, and its offsets (int64, from 0).

        Sample ``i`` has ``padded_lengths[i]`` rows; rows without routing (the last token's,
        the sequence padding's) hold ``pad_value``; ids are cast to ``dtype``.

        Raises
        ------
        OptionError, OptionTypeError
            ``dtype`` is not an integer dtype, or ``pad_value`` not an int it holds.
        ValueRangeError
            An id that ``dtype`` does not hold (an int8 layout of 256 experts).
        """
        target, fill = _id_layout(self, dtype, pad_value)
        offsets = np.zeros(len(self.padded_lengths) + 1, dtype=np.int64)
        np.cumsum(self.padded_lengths, out=offsets[1:])
        out = np.full((int(offsets[-1]), *self.values.shape[1:]), fill, dtype=target)
        held = self.ranges[:, :, 1] - self.ranges[:, :, 0]
        spots = np.stack((self.slots, self.slots + held), axis=2)
        out[_gather_index(offsets[:-1], spots)] = self.values
        return out, offsets

    def padded(self, pad_value: int = -1, dtype: npt.DTypeLike = np.int32) -> list[np.ndarray]:
        """:meth:`packed`, one array per sample."""
        out, offsets = self.packed(pad_value, dtype)
        return np.split(out, offsets[1:-1]) if len(offsets) > 1 else []


def _id_layout(expert_slice: ExpertSlice, dtype: object, pad_value: object) -> tuple[np.dtype, int]:
    """``dtype`` (an integer dtype) and ``pad_value`` checked, and every id checked to fit it."""
    try:
        target = np.dtype(cast("npt.DTypeLike", dtype))
    except TypeError:
        msg = f"`dtype` must be an integer dtype such as int32, got {describe(dtype)}"
        raise OptionTypeError(msg, key="dtype") from None
    if target.kind not in "iu":  # a dtype of the wrong kind: a value mistake, as `id_dtype`'s
        msg = f"`dtype` must be an integer dtype such as int32, got {target}"
        raise OptionError(msg, key="dtype", got=str(target))
    low, high = int(np.iinfo(target).min), int(np.iinfo(target).max)
    fill = as_int("pad_value", pad_value, minimum=low, maximum=high)
    values = expert_slice.values
    if values.size and (int(values.min()) < low or int(values.max()) > high):
        bad = int(values.min()) if int(values.min()) < low else int(values.max())
        msg = (
            f"column `{expert_slice.field.name}` holds id {bad}, which {target} does not "
            f"hold; pass a wider dtype (int32)"
        )
        raise ValueRangeError(
            msg, key=expert_slice.field.name, expected=f"in [{low}, {high}]", got=str(bad)
        )
    return target, fill


def _experts_of(batch: RolloutBatch, column: str) -> ColumnValues:
    if not isinstance(column, str):
        got = describe(column)
        raise mistake("option_type", key="column", expected="a column's name (a str)", got=got)
    if column not in batch.column_names:
        msg = (
            f"the batch has no column `{column}`; its columns are {batch.column_names}: pass "
            "the routed-experts column's name as `column`"
        )
        raise ColumnNotFoundError(msg, key=column)
    for found in batch.numeric_columns():
        if found.spec.name == column and found.offsets is not None and found.values.ndim == 3:
            return found
    if batch.num_samples == 0:
        msg = (
            f"the batch holds no samples, so column `{column}` has no layers x top_k to slice; "
            "skip the slice for an empty step"
        )
        raise SchemaError(msg, key=column, got="no samples")
    msg = (
        f"column `{column}` is not per-token ids of layers x top_k (one 2-D array per sample); "
        "routed experts are declared `per_sample_tensor`"
    )
    raise SchemaError(msg, key=column)


def take_expert_slice(
    source: RolloutBatch | Shard,
    place: ParallelPlace,
    rows: Sequence[int] | np.ndarray | None = None,
    *,
    column: str = ROUTED_EXPERTS,
    num_experts: int | None = None,
) -> ExpertSlice:
    """Gather only ``place``'s layers and CP token rows of ``column`` for ``rows``, once.

    Parameters
    ----------
    source
        A whole batch (with ``rows``: the rank's partition) or a shard.
    place
        The rank's :class:`ParallelPlace`.
    rows
        Rows of ``source`` (``None``: all of them, in order).
    column
        The routed-experts column (``rollout_routed_experts``; ``rollout_indexer_topk`` too).
    num_experts
        Store the ids as :func:`expert_id_dtype` of it (checked); ``None`` keeps the column's
        stored type (already the narrowest that holds the batch's ids).

    Raises
    ------
    SchemaTypeError
        ``source`` is neither a RolloutBatch nor a Shard.
    ColumnNotFoundError, SchemaError
        No such column, or not a column of per-token ids.
    OptionError, OptionTypeError
        A bad ``place``, ``rows``, ``num_experts`` or ``column`` (not a str); ``rows`` as
        every door's (:func:`arrow_split.take_rows`).
    PlanError
        A layout that does not fit: more stages than layers, layers that do not divide, a
        sequence that does not divide ``2 x cp_size`` with ``cp_pad=False``.
    ValueRangeError
        An id at or above ``num_experts``.
    """
    if not isinstance(place, ParallelPlace):
        msg = f"`place` must be a ParallelPlace, got {describe(place)}"
        raise OptionTypeError(msg, key="place")
    batch = source.rows if isinstance(source, Shard) else source
    if not isinstance(batch, RolloutBatch):
        got = describe(source)
        raise mistake("data_type", key="source", expected="a RolloutBatch or a Shard", got=got)
    experts = _experts_of(batch, column)
    picked = _rows(rows, batch.num_samples)
    values, offsets = experts.values, cast("np.ndarray", experts.offsets)  # ragged: offsets
    layer_count, top_k = values.shape[1], values.shape[2]
    layers = place.layers(layer_count)
    dtype = values.dtype if num_experts is None else expert_id_dtype(num_experts)
    counts = offsets[picked + 1] - offsets[picked]
    ranges, slots, padded = place.chunks(counts + 1)
    gathered = _gather(values, offsets[picked], ranges, layers)
    if num_experts is not None and gathered.size:
        _check_ids(gathered, column, num_experts)
    gathered = gathered.astype(dtype, copy=False)
    array = _column(gathered, (ranges[:, :, 1] - ranges[:, :, 0]).sum(axis=1), top_k)
    gathered.flags.writeable = False
    metadata = {
        _META_LAYERS: f"{layers.start}:{layers.stop}/{layer_count}".encode(),
        _META_CP: f"{place.cp_rank}/{place.cp_size}".encode(),
    }
    field = pa.field(column, array.type, nullable=False, metadata=metadata)
    return ExpertSlice(
        field, array, gathered, picked, layers, layer_count, place.cp_size, place.cp_rank,
        ranges, slots, padded,
    )  # fmt: skip


def _check_ids(gathered: np.ndarray, column: str, num_experts: int) -> None:
    """Every id in ``[0, num_experts)`` (a negative id would wrap in an unsigned type)."""
    low, high = int(gathered.min()), int(gathered.max())
    if low >= 0 and high < num_experts:
        return
    bad = low if low < 0 else high
    msg = (
        f"column `{column}` holds id {bad}, not in [0, `num_experts` {num_experts}); pass the "
        "model's expert count"
    )
    raise ValueRangeError(msg, key=column, expected=f"below {num_experts}", got=str(bad))


def _rows(rows: object, num_samples: int) -> np.ndarray:
    if rows is None:
        return np.arange(num_samples, dtype=np.int64)
    return as_rows("rows", rows, num_samples)


def _gather_index(starts: np.ndarray, ranges: np.ndarray) -> np.ndarray:
    """The flat routing rows of every held chunk: ``starts[i] + range(*ranges[i, k])``."""
    begin = (starts[:, None] + ranges[:, :, 0]).reshape(-1)
    lengths = (ranges[:, :, 1] - ranges[:, :, 0]).reshape(-1)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    shift = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], out=shift[1:])
    return np.repeat(begin - shift, lengths) + np.arange(total, dtype=np.int64)


def _gather(
    values: np.ndarray, starts: np.ndarray, ranges: np.ndarray, layers: range
) -> np.ndarray:
    """The held rows of the stage's layers: one copy per chunk (a run of rows)."""
    stage = values[:, layers.start : layers.stop]
    begins = (starts[:, None] + ranges[:, :, 0]).reshape(-1).tolist()
    ends = (starts[:, None] + ranges[:, :, 1]).reshape(-1).tolist()
    runs = [stage[begin:end] for begin, end in zip(begins, ends, strict=True) if end > begin]
    total = sum(len(run) for run in runs)
    out = np.empty((total, *stage.shape[1:]), dtype=values.dtype)
    if runs:
        np.concatenate(runs, out=out)
    return out


def _column(values: np.ndarray, counts: np.ndarray, top_k: int) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = pa.array(values.reshape(-1), type=pa.from_numpy_dtype(values.dtype))
    layer = pa.FixedSizeListArray.from_arrays(flat, top_k)
    token = pa.FixedSizeListArray.from_arrays(layer, values.shape[1] if values.ndim > 1 else 1)
    return pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), token)
