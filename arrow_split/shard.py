"""One rank's rows of a batch (:class:`Shard`), and the one gather that takes them.

A shard HOLDS a :class:`~arrow_split.RolloutBatch` of its rows beside where they came from.
:meth:`Shard._take` gathers each column by its codec into fresh, compact buffers (never a slice
view: a pickled shard ships only its own bytes), padding as it goes, so rows are copied once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, cast, overload

import numpy as np
import pyarrow as pa

import arrow_split.batch._frame as _frame
from arrow_split._args import MAX_DP_SIZE, as_choice, as_rows, check_dp_rank, check_lengths
from arrow_split._codecs import codec_for
from arrow_split.batch import ColumnValues, RolloutBatch, check_batch
from arrow_split.errors import SchemaError, mistake
from arrow_split.plan import PlanKey
from arrow_split.schema import (
    KNOWN_COLUMNS,
    PADDING_VALUES,
    TOTAL_LENGTHS,
    ActorTrainData,
    ColumnSpec,
    Role,
    Roles,
    RolloutTrainData,
    TrainData,
)

__all__ = ["Shard", "TrainDataLayout"]

TrainDataLayout = Literal["rollout", "actor"]
"""``rollout``: ``partition`` and the WHOLE batch's ``total_lengths``; ``actor``: the shard's
``total_lengths``, the whole batch's as ``global_total_lengths``."""

_REMOVED: dict[tuple[str, str], tuple[str, str]] = {
    ("Shard", "layout"): (
        "0.3.0",
        "a shard stores no layout: pass it each time, `shard.to_train_data(layout='actor')` "
        "or `layout='rollout'`",
    ),
    ("Shard", "with_layout"): (
        "0.3.0",
        "`shard.with_layout(layout).to_train_data()` is `shard.to_train_data(layout=layout)`",
    ),
    ("Shard", "make_plan"): (
        "0.3.0",
        "a shard is not a batch: plan the whole batch with "
        "`batch.make_plan(dp_size, balance_data=...)` (or re-plan this shard's rows with "
        "`shard.rows.make_plan(...)`)",
    ),
}
"""Names removed from the public classes: ``(class name, attribute)`` -> ``(release that removed
it, what to use instead)``, so that code written for an older release fails with the fix."""


class Shard(_frame.Frame):
    """One rank's rows of a batch: what a split returns.

    Parameters
    ----------
    rows
        This shard's rows, as a batch of their own.
    partition, batch_total_lengths
        The original row of each row; the whole batch's total lengths (int64; read-only: shared).
        Row ``i`` is the whole batch's row ``partition[i]``, so its total length is
        ``batch_total_lengths[partition[i]]``.
    plan_key, dp_rank
        The plan that made the shard and its rank (in ``[0, plan_key.dp_size)``); ``None`` for
        :func:`arrow_split.take_rows`.

    Raises
    ------
    SchemaTypeError, SchemaError
        ``rows`` is not a RolloutBatch, ``plan_key`` not a PlanKey, or the parts disagree: not
        one ``partition`` entry per row, or a row's total length other than its sample's.
    OptionTypeError, OptionError
        ``partition`` is not an array of ints, or holds a row outside ``batch_total_lengths``
        (as the ``indices`` of :func:`arrow_split.take_rows`).
    PlanTypeError, PlanError
        ``batch_total_lengths`` is not token counts (as ``total_lengths`` at every door), or
        ``dp_rank`` is not a rank (as :func:`arrow_split.take`'s).
    """

    __slots__ = ("_batch_total_lengths", "_dp_rank", "_partition", "_plan_key", "_rows")

    def __init__(
        self,
        rows: RolloutBatch,
        *,
        partition: np.ndarray,
        batch_total_lengths: np.ndarray,
        plan_key: PlanKey | None = None,
        dp_rank: int | None = None,
    ) -> None:
        self._rows = check_batch(rows, "rows")
        lengths = _frozen(check_lengths(batch_total_lengths, "batch_total_lengths"))
        self._batch_total_lengths = lengths
        self._partition = _frozen(as_rows("partition", partition, len(lengths)))
        _check_parts(self._rows, self._partition, lengths)
        if plan_key is not None and not isinstance(plan_key, PlanKey):
            msg = f"`plan_key` must be a PlanKey or None, got {type(plan_key).__name__}"
            raise SchemaError(msg, key="plan_key")
        size = MAX_DP_SIZE if plan_key is None else plan_key.dp_size  # no plan: any rank
        self._dp_rank = None if dp_rank is None else check_dp_rank(dp_rank, size)
        self._plan_key = plan_key

    @classmethod
    def _take(
        cls,
        batch: RolloutBatch,
        rows: np.ndarray,
        batch_total_lengths: np.ndarray,
        plan_key: PlanKey | None = None,
        dp_rank: int | None = None,
        *,
        partition: np.ndarray | None = None,
        padded: bool = False,
    ) -> Shard:
        """``rows`` (read-only int64, in range) of ``batch``, gathered: nothing checked."""
        # A fresh array either way: ``rows`` may view a plan read from the object store, and a
        # shard holds no view of the store (it would pin the whole batch's object).
        mapped = rows.copy() if partition is None else partition[rows]
        mapped.flags.writeable = False
        return cls._make(
            _gather(batch, rows, padded), mapped, batch_total_lengths, plan_key, dp_rank
        )

    @classmethod
    def _make(
        cls,
        rows: RolloutBatch,
        partition: np.ndarray,
        batch_total_lengths: np.ndarray,
        plan_key: PlanKey | None,
        dp_rank: int | None,
    ) -> Shard:
        """A shard of parts the library built: read-only int64 arrays, nothing checked."""
        shard = object.__new__(cls)
        shard._rows = rows
        shard._partition = partition
        shard._batch_total_lengths = batch_total_lengths
        shard._plan_key = plan_key
        shard._dp_rank = dp_rank
        return shard

    def __getattr__(self, name: str) -> Any:
        # Only names that normal lookup missed reach here: a removed name says what replaced it.
        removed = _REMOVED.get(("Shard", name))
        if removed is None:
            msg = f"'Shard' object has no attribute {name!r}"
        else:
            msg = f"`Shard.{name}` was removed in {removed[0]}; {removed[1]} (see CHANGELOG.md)"
        raise AttributeError(msg) from None

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            msg = f"Shard is immutable: `{name}` cannot be set"
            raise AttributeError(msg)
        object.__setattr__(self, name, value)

    @property
    def rows(self) -> RolloutBatch:
        """The shard's rows as a batch of their own (no partition, no plan)."""
        return self._rows

    @property
    def partition(self) -> np.ndarray:
        """The original row index of each row (int64, read-only)."""
        return self._partition

    @property
    def batch_total_lengths(self) -> np.ndarray:
        """Token count of every sample of the WHOLE batch (read-only, shared by the split)."""
        return self._batch_total_lengths

    @property
    def plan_key(self) -> PlanKey | None:
        """The key of the plan that made this shard, or ``None`` for rows taken without one."""
        return self._plan_key

    @property
    def plan_fingerprint(self) -> str | None:
        """The plan's fingerprint, equal on every rank of a step (compare it across ranks)."""
        return None if self._plan_key is None else self._plan_key.fingerprint

    @property
    def dp_rank(self) -> int | None:
        """The rank this shard belongs to, or ``None`` for rows taken without a plan."""
        return self._dp_rank

    # What the rows are, read through: the shard's own rows, never the whole batch's.

    @property
    def record_batch(self) -> pa.RecordBatch:
        """The rows' per-sample columns (``rows.record_batch``)."""
        return self._rows.record_batch

    @property
    def specs(self) -> Mapping[str, ColumnSpec]:
        """The spec of every key (``rows.specs``)."""
        return self._rows.specs

    @property
    def batch_globals(self) -> Mapping[str, object]:
        """The batch-global values, whole (``rows.batch_globals``)."""
        return self._rows.batch_globals

    @property
    def num_samples(self) -> int:
        """The number of this shard's rows."""
        return self._rows.num_samples

    @property
    def nbytes(self) -> int:
        """Bytes of the rows' buffers (``rows.nbytes``)."""
        return self._rows.nbytes

    @property
    def total_lengths(self) -> np.ndarray:
        """Token count of each of this shard's rows (``rows.total_lengths``)."""
        return self._rows.total_lengths

    @property
    def column_names(self) -> list[str]:
        """The per-sample keys, in order."""
        return self._rows.column_names

    def column(self, name: str) -> pa.Array:
        """The Arrow array of one per-sample key (``rows.column(name)``)."""
        return self._rows.column(name)

    def role_values(self, role: Role) -> np.ndarray | None:
        """The values of the per-sample scalar column that plays ``role`` (see ``rows``)."""
        return self._rows.role_values(role)

    def numeric_columns(self) -> list[ColumnValues]:
        """The rows' numeric columns as numpy views (``rows.numeric_columns()``)."""
        return self._rows.numeric_columns()

    def with_rows(self, rows: RolloutBatch) -> Shard:
        """The same shard (partition, lengths, plan, rank) holding ``rows``, as many, instead."""
        parts = (self._partition, self._batch_total_lengths, self._plan_key, self._dp_rank)
        return _rebuild_shard(rows, *parts)

    def add_train_data(self, data: Mapping[str, Any], *, specs: Iterable[ColumnSpec] = ()) -> Shard:
        """The same shard with more per-sample scalar keys (:meth:`RolloutBatch.add_train_data`)."""
        parts = (self._partition, self._batch_total_lengths, self._plan_key, self._dp_rank)
        return Shard._make(self._rows.add_train_data(data, specs=specs), *parts)

    @overload
    def to_train_data(self, *, layout: Literal["rollout"]) -> RolloutTrainData: ...
    @overload
    def to_train_data(self, *, layout: Literal["actor"]) -> ActorTrainData: ...
    @overload
    def to_train_data(self, *, layout: TrainDataLayout) -> TrainData: ...
    def to_train_data(self, *, layout: TrainDataLayout) -> TrainData:
        """The keys of :meth:`RolloutBatch.to_train_data` plus those of ``layout`` (required)."""
        as_choice("layout", layout, TrainDataLayout)
        train_data = cast("dict[str, Any]", self._rows.to_train_data())
        if layout == "rollout":
            train_data["partition"] = self._partition.tolist()
            train_data[TOTAL_LENGTHS] = self._batch_total_lengths.tolist()
        else:
            train_data[TOTAL_LENGTHS] = self.total_lengths.tolist()
            train_data["global_total_lengths"] = self._batch_total_lengths.tolist()
        return cast("RolloutTrainData | ActorTrainData", train_data)

    def equals(self, other: object) -> bool:
        """Same rows (:meth:`RolloutBatch.equals`), partition, lengths, plan key and rank."""
        if not isinstance(other, Shard):
            return False
        return (
            self._rows.equals(other._rows)
            and np.array_equal(self._partition, other._partition)
            and np.array_equal(self._batch_total_lengths, other._batch_total_lengths)
            and self._plan_key == other._plan_key
            and self._dp_rank == other._dp_rank
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # The rows pickle their buffers out of band (protocol 5): Ray stores them without a copy.
        parts = (self._partition, self._batch_total_lengths, self._plan_key, self._dp_rank)
        return (_rebuild_shard, (self._rows, *parts))

    # For notebooks: the rows' reads (``_frame.Frame``) with the shard's own index, and a slice.

    def _frame_rows(self) -> RolloutBatch:
        return self._rows

    def _frame_title(self) -> str:
        rank = "" if self._dp_rank is None else f" dp_rank={self._dp_rank}"
        return f"Shard{rank} ({self.num_samples} of {len(self._batch_total_lengths)} samples)"

    def _frame_index(self) -> np.ndarray:
        return self._partition

    def _key_hint(self, key: object) -> str:
        return _MILES_HINT if key in _LAYOUT_KEYS else ""

    def slice(self, offset: int = 0, length: int | None = None) -> Shard:
        """Rows ``offset : offset + length`` (and their ``partition``), in fresh buffers."""
        indices = _frame.slice_rows(self._rows, offset, length)
        parts = (self._batch_total_lengths, self._plan_key, self._dp_rank)
        return Shard._take(self._rows, indices, *parts, partition=self._partition)


# The keys of miles' per-rank dict that a shard keeps as attributes or gives by layout.
_LAYOUT_KEYS = ("partition", TOTAL_LENGTHS, "global_total_lengths")
_MILES_HINT = (
    "; a shard is not miles' per-rank dict: its rows' original indices are `shard.partition`, "
    "and `shard.to_train_data(layout='rollout')` (or `layout='actor'`) gives the dict with "
    "`partition` and `total_lengths` (for miles' own functions: `arrow_split.compat.miles`)"
)


# The column the schema declares with the ``padding`` role (``is_padding``).
_MARKER = next(name for name, spec in KNOWN_COLUMNS.items() if spec.role == "padding")


def _gather(batch: RolloutBatch, rows: np.ndarray, padded: bool) -> RolloutBatch:
    """``batch``'s ``rows`` in fresh buffers; with ``padded``, a row past the end is padding."""
    num_samples, specs = batch.num_samples, batch.specs
    roles: Roles | None = batch.roles
    taken = _frame.take_columns(batch, np.minimum(rows, num_samples - 1) if padded else rows)
    if padded:  # a filled column is built afresh: its type is named anew
        pads = rows >= num_samples
        names, columns = taken.schema.names, taken.columns
        if pads.any():
            columns = [
                codec_for(specs[name]).fill(column, pads, PADDING_VALUES[name])
                if name in PADDING_VALUES
                else column
                for name, column in zip(names, columns, strict=True)
            ]
        if batch.roles.padding is None:  # a new flag column: new roles
            specs, roles = MappingProxyType({**specs, _MARKER: KNOWN_COLUMNS[_MARKER]}), None
            names = [*names, _MARKER]
            columns = [*columns, pa.array(pads, type=pa.bool_())]
        taken = pa.RecordBatch.from_arrays(columns, names=names)
    trust = batch.trust_objects
    return RolloutBatch._make(taken, specs, batch._batch_globals, trust_objects=trust, roles=roles)


def _rebuild_shard(rows: RolloutBatch, *parts: Any) -> Shard:
    partition, lengths, key, rank = parts
    return Shard(rows, partition=partition, batch_total_lengths=lengths, plan_key=key, dp_rank=rank)


def _frozen(array: np.ndarray) -> np.ndarray:
    """A parsed int64 array made read-only: kept if it already is (shared), else a copy."""
    if array.flags.writeable:
        array = array.copy()
        array.flags.writeable = False
    return array


def _check_parts(rows: RolloutBatch, partition: np.ndarray, lengths: np.ndarray) -> None:
    """One ``partition`` entry per row, each row as long as its sample in ``lengths``."""
    if len(partition) != rows.num_samples:
        msg = f"`partition` has {len(partition)} values but `rows` has {rows.num_samples} rows"
        raise mistake("schema", msg, key="partition", fix="pass the original row of each row")
    differ = np.flatnonzero(lengths[partition] != rows.total_lengths)
    if differ.size:
        row = int(differ[0])
        expected, got = int(lengths[partition[row]]), int(rows.total_lengths[row])
        msg = (
            f"the row has {got} tokens but `batch_total_lengths` says its sample "
            f"{int(partition[row])} has {expected}; `partition` maps each row to its sample"
        )
        raise mistake("schema", msg, key="batch_total_lengths", sample=row, got=str(got))
