"""The rollout batch: a dict of per-sample lists <-> one Arrow RecordBatch plus batch-global values.

:meth:`RolloutBatch.from_train_data` validates the whole dict before it returns anything and never
mutates it. The record batch holds one row per sample; ``total_lengths`` is derived from the
``tokens`` offsets, never trusted from input. A shard (what a split returns) is a RolloutBatch too,
with ``partition`` (the original row of each of its rows) and the whole batch's total lengths.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Literal, get_args

import numpy as np
import pyarrow as pa

from arrow_split.batch_globals import check_batch_global, global_to_python
from arrow_split.decode import column_to_python
from arrow_split.encode import EncodeOptions, encode_scalar
from arrow_split.errors import ArrowSplitError, SchemaError
from arrow_split.schema import ColumnSpec, resolve_specs
from arrow_split.train_data import encode_train_data, per_sample_values

__all__ = ["RolloutBatch", "TrainDataLayout"]

TrainDataLayout = Literal["rollout", "actor"]
"""The classic layouts of a shard's train data.

``rollout``: what the rollout side's classic split ships: ``partition`` (list of ints) and
``total_lengths`` of the WHOLE batch. ``actor``: what a train actor works with after
``process_rollout_data``: no ``partition``, ``total_lengths`` of this shard's rows, and the whole
batch's as ``global_total_lengths``.
"""


class RolloutBatch:
    """A rollout batch (or one rank's shard of it) as an Arrow RecordBatch.

    Build one with :meth:`from_train_data`; split it with
    :func:`arrow_split.split_train_data_by_dp_raw` or :func:`arrow_split.shard_for_rank`.
    Instances are immutable.

    Parameters
    ----------
    record_batch
        One row per sample, one column per per-sample key (``tokens`` required).
    specs
        The spec of every key, per-sample and batch-global, in the train data's key order.
    batch_globals
        The batch-global values, already checked (see :func:`from_train_data`).
    partition
        For a shard, the original row index of each row (int64); ``None`` for a whole batch.
    batch_total_lengths
        For a shard, the whole batch's total lengths; ``None`` for a whole batch.
    layout
        The default layout of :meth:`to_train_data` for a shard.
    """

    __slots__ = (
        "_batch_globals",
        "_batch_total_lengths",
        "_layout",
        "_partition",
        "_record_batch",
        "_specs",
    )

    def __init__(
        self,
        record_batch: pa.RecordBatch,
        specs: Mapping[str, ColumnSpec],
        batch_globals: Mapping[str, object] | None = None,
        *,
        partition: np.ndarray | None = None,
        batch_total_lengths: np.ndarray | None = None,
        layout: TrainDataLayout = "rollout",
    ) -> None:
        if layout not in get_args(TrainDataLayout):
            msg = f"invalid `layout`: {layout!r}; expected one of: 'rollout', 'actor'"
            raise SchemaError(msg)
        _check_parts(record_batch, specs, batch_globals or {})
        self._record_batch = record_batch
        self._specs = MappingProxyType(dict(specs))
        self._batch_globals = MappingProxyType(dict(batch_globals or {}))
        self._partition = _frozen(partition, record_batch.num_rows, "partition")
        self._batch_total_lengths = (
            None if batch_total_lengths is None else _frozen(batch_total_lengths, None, "lengths")
        )
        self._layout: TrainDataLayout = layout

    @classmethod
    def from_train_data(
        cls,
        data: Mapping[str, Any],
        *,
        specs: Iterable[ColumnSpec] = (),
        allow_nonfinite: bool = False,
        round_floats: bool = False,
    ) -> RolloutBatch:
        """Validate a train-data dict and convert it; ``data`` is never mutated.

        Parameters
        ----------
        data
            The classic train data: per-sample keys (lists or numpy arrays with one value per
            sample) and batch-global keys. ``tokens`` is required; ``total_lengths``, if present,
            must agree with ``tokens`` and is then dropped (it is always derived).
        specs
            :class:`ColumnSpec` declarations for keys the library does not know (an undeclared
            key is an error), or overrides of known keys.
        allow_nonfinite
            Keep NaN and infinity in float columns instead of rejecting them.
        round_floats
            Round float64 input to float32 columns to the nearest float32 instead of rejecting
            values that are not exactly float32.

        Returns
        -------
        RolloutBatch
            The whole batch (``partition`` is ``None``).

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            The first problem found, naming the key, the sample and the fix.
        """
        if not isinstance(data, Mapping):
            msg = f"`data` must be a dict of per-sample lists, got {type(data).__name__}"
            raise SchemaError(msg)
        resolved = resolve_specs(data.keys(), specs)
        columns, resolved = encode_train_data(
            data, resolved, allow_nonfinite=allow_nonfinite, round_floats=round_floats
        )
        num_samples = len(columns["tokens"])
        batch_globals = {
            key: check_batch_global(spec, data[key], num_samples, allow_nonfinite=allow_nonfinite)
            for key, spec in resolved.items()
            if spec.kind == "batch_global"
        }
        record_batch = pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))
        record_batch.validate(full=True)
        return cls(record_batch, resolved, batch_globals)

    @property
    def record_batch(self) -> pa.RecordBatch:
        """The per-sample columns, one row per sample."""
        return self._record_batch

    @property
    def specs(self) -> Mapping[str, ColumnSpec]:
        """The spec of every key (per-sample and batch-global), in the train data's order."""
        return self._specs

    @property
    def batch_globals(self) -> Mapping[str, object]:
        """The batch-global values, shipped whole with every shard (read-only)."""
        return self._batch_globals

    @property
    def partition(self) -> np.ndarray | None:
        """For a shard, the original row index of each row (int64, read-only); else ``None``."""
        return self._partition

    @property
    def layout(self) -> TrainDataLayout:
        """The default layout of :meth:`to_train_data` (see :data:`TrainDataLayout`)."""
        return self._layout

    @property
    def num_samples(self) -> int:
        """The number of samples (rows)."""
        return int(self._record_batch.num_rows)

    def __len__(self) -> int:
        return self.num_samples

    @property
    def nbytes(self) -> int:
        """Bytes of the record batch's buffers (what a put moves, batch-global values aside)."""
        return int(self._record_batch.nbytes)

    @property
    def total_lengths(self) -> np.ndarray:
        """Token count of each of this batch's rows (int64), from the ``tokens`` offsets alone."""
        offsets = self._record_batch.column("tokens").offsets.to_numpy()
        return np.diff(offsets)

    @property
    def batch_total_lengths(self) -> np.ndarray:
        """Token count of every sample of the WHOLE batch this one was split from (int64)."""
        if self._batch_total_lengths is None:
            return self.total_lengths
        return self._batch_total_lengths

    def column(self, name: str) -> pa.Array:
        """The Arrow array of one per-sample key."""
        if name not in self._record_batch.schema.names:
            msg = f"no per-sample column `{name}`; the batch has: {', '.join(self.column_names)}"
            raise KeyError(msg)
        return self._record_batch.column(name)

    @property
    def column_names(self) -> list[str]:
        """The per-sample keys, in order."""
        return list(self._record_batch.schema.names)

    def with_layout(self, layout: TrainDataLayout) -> RolloutBatch:
        """The same batch (same buffers) with another default :meth:`to_train_data` layout."""
        return self.replace(layout=layout)

    def replace(self, **changes: Any) -> RolloutBatch:
        """A new batch with some constructor arguments replaced; buffers are shared, not copied."""
        arguments: dict[str, Any] = {
            "record_batch": self._record_batch,
            "specs": self._specs,
            "batch_globals": self._batch_globals,
            "partition": self._partition,
            "batch_total_lengths": self._batch_total_lengths,
            "layout": self._layout,
        }
        arguments.update(changes)
        return RolloutBatch(**arguments)

    def add_train_data(
        self, data: Mapping[str, Any], *, specs: Iterable[ColumnSpec] = ()
    ) -> RolloutBatch:
        """A new batch with more per-sample keys (one value per row of this batch).

        The new keys are validated as :meth:`from_train_data` would; existing keys cannot be
        replaced.
        """
        clash = sorted(set(data) & set(self._specs))
        if clash:
            msg = f"keys already in the batch: {', '.join(map(repr, clash))}; pick new names"
            raise SchemaError(msg)
        resolved = resolve_specs(data.keys(), specs)
        if any(spec.kind != "per_sample_scalar" for spec in resolved.values()):
            msg = "`add_train_data` takes per-sample scalar keys only (ids, flags, numbers)"
            raise SchemaError(msg)
        record_batch = self._record_batch
        for key, spec in resolved.items():
            values = per_sample_values(data, key, self.num_samples)
            array = encode_scalar(spec, values, EncodeOptions())
            record_batch = record_batch.append_column(key, array)
        return self.replace(record_batch=record_batch, specs={**self._specs, **resolved})

    def to_train_data(self, *, layout: TrainDataLayout | None = None) -> dict[str, object]:
        """The batch (or shard) in the classic train-data layout, as fresh Python objects.

        Per-token columns become lists of Python numbers, per-sample tensors one numpy array per
        sample, scalars lists, objects decoded; batch-global values are copied whole. A whole
        batch compares equal to the dict it was built from. A shard adds the keys of ``layout``
        (default: :attr:`layout`), see :data:`TrainDataLayout`.
        """
        layout = layout or self._layout
        train_data: dict[str, object] = {}
        for key, spec in self._specs.items():
            if spec.kind == "batch_global":
                train_data.update(global_to_python({key: self._batch_globals[key]}))
            else:
                train_data[key] = column_to_python(spec, self._record_batch.column(key))
        if self._partition is None:
            return train_data
        if layout == "rollout":
            train_data["partition"] = self._partition.tolist()
            train_data["total_lengths"] = self.batch_total_lengths.tolist()
        else:
            train_data["total_lengths"] = self.total_lengths.tolist()
            train_data["global_total_lengths"] = self.batch_total_lengths.tolist()
        return train_data

    def equals(self, other: object) -> bool:
        """Whether two batches hold the same values, specs, globals, partition and layout."""
        if not isinstance(other, RolloutBatch):
            return False
        return (
            self._record_batch.equals(other._record_batch)
            and dict(self._specs) == dict(other._specs)
            and _same_globals(self._batch_globals, other._batch_globals)
            and _same_optional(self._partition, other._partition)
            and np.array_equal(self.batch_total_lengths, other.batch_total_lengths)
            and self._layout == other._layout
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # pyarrow pickles buffers out of band (protocol 5): Ray stores them without a copy.
        return (
            _rebuild,
            (
                self._record_batch,
                dict(self._specs),
                dict(self._batch_globals),
                self._partition,
                self._batch_total_lengths,
                self._layout,
            ),
        )

    def __repr__(self) -> str:
        kind = "whole batch" if self._partition is None else f"shard, layout={self._layout!r}"
        return (
            f"RolloutBatch({self.num_samples} samples, {kind}, "
            f"columns=[{', '.join(self.column_names)}], "
            f"globals=[{', '.join(self._batch_globals)}], {self.nbytes} bytes)"
        )


def _rebuild(
    record_batch: pa.RecordBatch,
    specs: dict[str, ColumnSpec],
    batch_globals: dict[str, object],
    partition: np.ndarray | None,
    batch_total_lengths: np.ndarray | None,
    layout: TrainDataLayout,
) -> RolloutBatch:
    return RolloutBatch(
        record_batch,
        specs,
        batch_globals,
        partition=partition,
        batch_total_lengths=batch_total_lengths,
        layout=layout,
    )


def _check_parts(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
) -> None:
    if not isinstance(record_batch, pa.RecordBatch):
        msg = f"`record_batch` must be a pyarrow.RecordBatch, got {type(record_batch).__name__}"
        raise SchemaError(msg)
    names = record_batch.schema.names
    per_sample = [key for key, spec in specs.items() if spec.kind != "batch_global"]
    if "tokens" not in names or sorted(names) != sorted(per_sample):
        msg = f"the record batch's columns {names} do not match the per-sample specs {per_sample}"
        raise SchemaError(msg)
    missing = sorted(set(specs) - set(names) - set(batch_globals))
    if missing:
        msg = f"batch-global keys without a value: {', '.join(missing)}"
        raise SchemaError(msg)


def _frozen(values: np.ndarray | None, length: int | None, what: str) -> np.ndarray | None:
    if values is None:
        return None
    array = np.array(values, dtype=np.int64, copy=True)
    if array.ndim != 1 or (length is not None and len(array) != length):
        msg = f"`{what}` must be a 1-D int array of {length} values, got shape {array.shape}"
        raise ArrowSplitError(msg)
    array.flags.writeable = False
    return array


def _same_optional(left: np.ndarray | None, right: np.ndarray | None) -> bool:
    if left is None or right is None:
        return left is right
    return bool(np.array_equal(left, right))


def _same_globals(left: Mapping[str, object], right: Mapping[str, object]) -> bool:
    return global_to_python(left) == global_to_python(right)
