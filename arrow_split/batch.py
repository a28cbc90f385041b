"""The rollout batch: one Arrow RecordBatch plus batch-global values.

:class:`RolloutBatch` is a whole batch: :meth:`RolloutBatch.from_train_data` validates the dict
before it returns anything and never mutates it; ``total_lengths`` is derived from the length
source's offsets, never trusted from input. What a split returns is a
:class:`~arrow_split.Shard` (:mod:`arrow_split.shard`), which holds a batch of its rows: a shard
is not a batch, and :func:`check_batch` is the one check every function that takes a batch uses.

Immutability. No attribute of a batch or a shard can be rebound, and the numpy arrays they hand
out (``partition``, ``total_lengths``...) are read-only. The Arrow buffers are read-only too,
with one documented exception: a shard made by a take in this process owns private buffers, and
:func:`arrow_split.torch.to_tensors` may return tensors that share them (a write into such a
tensor is a write into that shard, which nobody else can see). Buffers read from shared memory
(Ray's object store, a memory-mapped file) are never handed out writable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import as_flag
from arrow_split._codecs import EncodeOptions, codec_for, global_to_python, numpy_view
from arrow_split._column_values import ColumnValues, numeric_columns
from arrow_split._convert import (
    check_finite_columns,
    check_parts,
    decode_train_data,
    encode_train_data,
    per_sample_values,
)
from arrow_split._dump import Compression, read_dump, read_parquet, write_dump, write_parquet
from arrow_split._train_data import TrainData
from arrow_split.equality import record_batches_equal, values_equal
from arrow_split.errors import (
    ArrowSplitError,
    ColumnNotFoundError,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.plan import Plan
from arrow_split.schema import ColumnSpec, Role, resolve_specs, role_column

__all__ = ["ColumnValues", "RolloutBatch", "check_batch"]


class RolloutBatch:
    """A whole rollout batch as an Arrow RecordBatch plus batch-global values.

    Build one with :meth:`from_train_data`; split it with
    :func:`arrow_split.split_train_data_by_dp_raw` or :func:`arrow_split.shard_for_rank`.

    Parameters
    ----------
    record_batch
        One row per sample, one column per per-sample key (the length source required).
    specs
        The spec of every key, per-sample and batch-global, in the train data's key order.
    batch_globals
        The batch-global values, already checked (see :meth:`from_train_data`).
    plan
        Optional: the plan the driver chose for this batch, shipped with it so that ranks check
        against it (and need not re-plan). Not part of equality.
    trust_objects
        Whether its pickled objects may be decoded whatever they are (:meth:`to_train_data`).
        ``True`` (the default) for parts built in this process from your own objects
        (:meth:`from_train_data`, the builder); a batch read from a file (:meth:`read`,
        :meth:`read_parquet`) is ``False`` unless read with ``trust_objects=True``, and then
        decodes only plain data (None, bools, numbers, str, bytes, lists, tuples, sets, dicts,
        numpy arrays and scalars), refusing any other object with
        :class:`~arrow_split.UntrustedObjectError`: unpickling runs the code a file names. Shards,
        takes, padded and shipped batches (a pickle, Ray) keep their batch's flag. Not part of
        equality.
    """

    __slots__ = (
        "_batch_globals",
        "_globals_view",
        "_plan",
        "_record_batch",
        "_specs",
        "_total_lengths",
        "_trust_objects",
    )
    _total_lengths: np.ndarray  # computed on first use (see `total_lengths`)
    _globals_view: Mapping[str, object]  # made on first use (see `batch_globals`)

    def __init__(
        self,
        record_batch: pa.RecordBatch,
        specs: Mapping[str, ColumnSpec],
        batch_globals: Mapping[str, object] | None = None,
        *,
        plan: Plan | None = None,
        trust_objects: bool = True,
    ) -> None:
        check_parts(record_batch, specs, batch_globals or {})
        self._trust_objects = as_flag("trust_objects", trust_objects)
        self._record_batch = record_batch
        self._specs = MappingProxyType(dict(specs))
        self._batch_globals = MappingProxyType(
            {key: _own_global(value) for key, value in (batch_globals or {}).items()}
        )
        if plan is not None and (not isinstance(plan, Plan) or plan.num_samples != len(self)):
            msg = f"`plan` must be a Plan of {len(self)} samples, got {plan!r}"
            raise SchemaError(msg)
        self._plan = plan

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, name):
            msg = f"{type(self).__name__} is immutable: `{name}` cannot be set"
            raise AttributeError(msg)
        object.__setattr__(self, name, value)

    @classmethod
    def from_train_data(
        cls,
        data: Mapping[str, Any],
        *,
        specs: Iterable[ColumnSpec] = (),
        allow_nonfinite: bool = False,
        exact_floats: bool = False,
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
            Keep NaN and infinity in float columns instead of rejecting them (the float specs as
            used then say ``finite=False``). By default they are rejected, except in a column
            aligned to the response at the tokens whose ``loss_masks`` is 0 (they do not count
            toward the loss; miles' log-prob guard).
        exact_floats
            Reject a wider float that a float32 column would round. By default it is rounded
            to the nearest float32, as the trainer's ``torch.tensor(..., dtype=float32)`` would.

        Returns
        -------
        RolloutBatch
            The whole batch.

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            The first problem found, naming the key, the sample and the fix.
        """
        options = EncodeOptions(
            allow_nonfinite=as_flag("allow_nonfinite", allow_nonfinite),
            exact_floats=as_flag("exact_floats", exact_floats),
        )
        record_batch, used, batch_globals = encode_train_data(data, specs, options)
        return cls(record_batch, used, batch_globals)

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
        """The batch-global values, shipped whole with every shard, read-only all the way down.

        A list comes as a tuple, a dict as a ``types.MappingProxyType``, an array
        (``raw_reward``) read-only: nothing handed out here can change the batch, another shard
        or :meth:`to_train_data` (which returns fresh lists and dicts, miles' types).
        """
        try:
            return self._globals_view
        except AttributeError:
            pass
        view = MappingProxyType(
            {key: _read_only_global(value) for key, value in self._batch_globals.items()}
        )
        self._globals_view = view  # set once: the batch is immutable
        return view

    @property
    def plan(self) -> Plan | None:
        """The plan the driver attached (:meth:`with_plan`), or ``None``."""
        return self._plan

    @property
    def trust_objects(self) -> bool:
        """Whether any pickled object decodes, or plain data only (see the class docstring)."""
        return self._trust_objects

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
        """Token count of each of this batch's rows (int64, read-only), from the length source.

        Computed once per batch and shared: every shard taken of this batch holds this array.
        """
        try:
            return self._total_lengths
        except AttributeError:
            pass
        source = role_column(self._specs, "length_source")
        offsets = self._record_batch.column(source).offsets.to_numpy()
        lengths: np.ndarray = np.diff(offsets).astype(np.int64, copy=False)
        lengths.flags.writeable = False
        self._total_lengths = lengths  # set once: the batch is immutable
        return lengths

    @property
    def batch_total_lengths(self) -> np.ndarray:
        """Token count of every sample of the WHOLE batch (for a whole batch, its own)."""
        return self.total_lengths

    def role_values(self, role: Role) -> np.ndarray | None:
        """The values of the per-sample scalar column that plays ``role`` (read-only), or ``None``.

        Raises
        ------
        SchemaError
            The column that plays ``role`` holds more than one value per sample (the
            ``length_source``, ``tokens``): read its lengths with :attr:`total_lengths`, its
            values with :meth:`column`.
        """
        name = role_column(self._specs, role)
        if name is None or name not in self._record_batch.schema.names:
            return None
        if codec_for(self._specs[name]).tensor_role != "scalar":  # not one number per sample
            msg = (
                f"role {role!r} is played by `{name}`, a {self._specs[name].kind} column; "
                "`role_values` gives the one value per sample of a per_sample_scalar column: "
                f"use `total_lengths` for its lengths, or `column({name!r})` for its values"
            )
            raise SchemaError(msg)
        values = numpy_view(self._record_batch.column(name))
        values.flags.writeable = False  # booleans are unpacked into fresh memory
        return values

    def column(self, name: str) -> pa.Array:
        """The Arrow array of one per-sample key."""
        if not isinstance(name, str):
            msg = f"`name` must be a str (a column's key), got {type(name).__name__}"
            raise SchemaTypeError(msg)
        if name not in self._record_batch.schema.names:
            msg = f"no per-sample column `{name}`; the batch has: {', '.join(self.column_names)}"
            raise ColumnNotFoundError(msg)
        return self._record_batch.column(name)

    @property
    def column_names(self) -> list[str]:
        """The per-sample keys, in order."""
        return list(self._record_batch.schema.names)

    def numeric_columns(self) -> list[ColumnValues]:
        """The columns a tensor can be made of, as numpy views (see :class:`ColumnValues`)."""
        return numeric_columns(self._record_batch, self._specs)

    def make_plan(self, dp_size: int, *, balance_data: bool) -> Plan:
        """The batch's plan for ``dp_size`` ranks (see :func:`arrow_split.plan_partitions`).

        By the total lengths; each rank's rows stably sorted by adapter slot when the batch has
        a column with the ``adapter_slot`` role.
        """
        return Plan.build(
            self.total_lengths,
            dp_size,
            balance_data=balance_data,
            order_by=self.role_values("adapter_slot"),
        )

    def write(
        self, path: str | os.PathLike[str], *, compression: Compression | None = None
    ) -> None:
        """Write the batch to one Arrow IPC file, specs and batch-global values included.

        Uncompressed by default, so that :meth:`read` maps it without a copy;
        ``compression="zstd"`` or ``"lz4"`` trades that for size. The file appears whole or not
        at all (written aside, then renamed). See :mod:`arrow_split._dump`.
        """
        write_dump(
            self._record_batch, self._specs, self._batch_globals, path, compression=compression
        )

    @staticmethod
    def read(
        path: str | os.PathLike[str], *, validate: bool = True, trust_objects: bool = False
    ) -> RolloutBatch:
        """Map a file written by :meth:`write` back into a batch, without copying its buffers.

        A dump is input: with ``validate=True`` (the default) its content is checked against
        its specs with the codecs' own checks (flags in {0, 1}, no nulls, every length rule,
        batch-global shapes), vectorised over the buffers. ``validate=False`` skips that, for
        files you trust.

        A file is input, never code: the batch read decodes (:meth:`to_train_data`) only plain
        data among its pickled objects unless ``trust_objects=True``, for a file you trust (see
        the class docstring). Its shards keep that choice.

        Raises
        ------
        DumpError
            The file is truncated, not an Arrow file, of an unknown version, its metadata is
            missing or does not match its columns, or its content breaks a rule (naming the
            file, the column and the sample).
        FileNotFoundError
            No such file.
        """
        trust_objects = as_flag("trust_objects", trust_objects)
        parts, _ = read_dump(path, validate=validate)
        return RolloutBatch(*parts, trust_objects=trust_objects)

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write the batch as Parquet for analysis tools (pandas, polars, duckdb read it).

        Same column names and Arrow types (pickled objects stay binary); the specs and
        batch-global values are kept in the file's key-value metadata.
        """
        write_parquet(self._record_batch, self._specs, self._batch_globals, path)

    @staticmethod
    def read_parquet(
        path: str | os.PathLike[str], *, validate: bool = True, trust_objects: bool = False
    ) -> RolloutBatch:
        """Read a file written by :meth:`to_parquet` back into a batch equal to the one written.

        A copy (Parquet is decoded into fresh memory). ``validate`` and ``trust_objects`` as for
        :meth:`read`.

        Raises
        ------
        DumpError
            Not a readable Parquet file, not one this library wrote, or content that breaks a
            rule (``validate=True``).
        FileNotFoundError
            No such file.
        """
        validate = as_flag("validate", validate)
        trust_objects = as_flag("trust_objects", trust_objects)
        parts = read_parquet(path, validate=validate)
        return RolloutBatch(*parts, trust_objects=trust_objects)

    def with_plan(self, plan: Plan | None) -> RolloutBatch:
        """The same batch (same buffers) carrying ``plan`` (see :attr:`plan`)."""
        return RolloutBatch(
            self._record_batch,
            self._specs,
            self._batch_globals,
            plan=plan,
            trust_objects=self._trust_objects,
        )

    def add_train_data(
        self, data: Mapping[str, Any], *, specs: Iterable[ColumnSpec] = ()
    ) -> RolloutBatch:
        """A new batch with more per-sample scalar keys, one value per row.

        The new keys are validated as :meth:`from_train_data` would; existing keys cannot be
        replaced.
        """
        if not isinstance(data, Mapping):
            msg = f"`data` must be a dict of per-sample lists, got {type(data).__name__}"
            raise SchemaTypeError(msg)
        clash = sorted(set(data) & set(self._specs))
        if clash:
            msg = f"keys already in the batch: {', '.join(map(repr, clash))}; pick new names"
            raise SchemaError(msg)
        resolved = resolve_specs(data.keys(), specs)
        if any(codec_for(spec).tensor_role != "scalar" for spec in resolved.values()):
            msg = "`add_train_data` takes per-sample scalar keys only (ids, flags, numbers)"
            raise SchemaError(msg)
        resolve_specs([*self._specs, *resolved], [*self._specs.values(), *resolved.values()])
        record_batch = self._record_batch
        for key, spec in resolved.items():
            values = per_sample_values(data, key, self.num_samples)
            array, _ = codec_for(spec).encode(spec, values, EncodeOptions())
            check_finite_columns({key: array}, {key: spec})
            record_batch = record_batch.append_column(key, array)
        merged = {**self._specs, **resolved}
        return RolloutBatch(
            record_batch,
            merged,
            self._batch_globals,
            plan=self._plan,
            trust_objects=self._trust_objects,
        )

    def to_train_data(self) -> TrainData:
        """The batch in the classic train-data layout, as fresh Python objects.

        Per-token columns become lists of Python numbers, per-sample tensors one numpy array per
        sample, scalars lists, objects decoded; batch-global values are copied whole. A whole
        batch compares equal to the dict it was built from. The result is a plain ``dict``,
        typed for a type checker by :class:`~arrow_split.TrainData`.

        Raises
        ------
        UntrustedObjectError
            A batch read from a file (``trust_objects=False``) holds a pickled object that is
            not plain data (naming the column, the sample and the option).
        DumpError
            A pickled object's bytes do not decode (a corrupt file).
        """
        train_data = decode_train_data(
            self._record_batch,
            self._specs,
            self._batch_globals,
            trust_objects=self._trust_objects,
        )
        return cast("TrainData", train_data)

    def equals(self, other: object) -> bool:
        """Whether two batches hold the same values, specs and batch-global values.

        NaN equals NaN at the same place (a NaN-position compare, whatever the NaN's bits).
        """
        if not isinstance(other, RolloutBatch):
            return False
        return (
            record_batches_equal(self._record_batch, other._record_batch)
            and dict(self._specs) == dict(other._specs)
            and values_equal(
                global_to_python(self._batch_globals), global_to_python(other._batch_globals)
            )
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # pyarrow pickles buffers out of band (protocol 5): Ray stores them without a copy.
        return (
            _rebuild_batch,
            (
                self._record_batch,
                dict(self._specs),
                dict(self._batch_globals),
                self._plan,
                self._trust_objects,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.num_samples} samples, "
            f"columns=[{', '.join(self.column_names)}], "
            f"globals=[{', '.join(self._batch_globals)}], {self.nbytes} bytes)"
        )


def _own_global(value: object) -> object:
    """A batch-global value as the batch keeps it: its own list, dict or read-only array.

    The classic types (lists, dicts) are kept, so that dumps and :meth:`RolloutBatch.to_train_data`
    see what they always saw; a caller's list is copied (never shared), and so is a writable
    array. The read-only views :attr:`RolloutBatch.batch_globals` hands out come back as lists
    and dicts when a batch is made of another's (a split, a pad).
    """
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, np.ndarray) and value.flags.writeable:
        array = value.copy()
        array.flags.writeable = False
        return array
    return value


def _read_only_global(value: object) -> object:
    """The read-only view of a kept batch-global value (a tuple, a mapping proxy, the array)."""
    if isinstance(value, list):
        return tuple(value)
    if isinstance(value, dict):
        return MappingProxyType(value)
    return value


def _rebuild_batch(
    record_batch: pa.RecordBatch,
    specs: dict[str, ColumnSpec],
    batch_globals: dict[str, object],
    plan: Plan | None,
    trust_objects: bool = True,
) -> RolloutBatch:
    return RolloutBatch(record_batch, specs, batch_globals, plan=plan, trust_objects=trust_objects)


def check_batch(
    value: object, name: str = "batch", error: type[ArrowSplitError] = SchemaTypeError
) -> RolloutBatch:
    """``value`` if it is a RolloutBatch, else ``error`` naming ``name`` and the fix.

    The one check of every function that takes a batch: a Shard is not one (it holds one).
    """
    if isinstance(value, RolloutBatch):
        return value
    msg = (
        f"`{name}` must be a RolloutBatch, got {type(value).__name__}; build one with "
        "`RolloutBatch.from_train_data(data)` (a Shard's rows are `shard.rows`)"
    )
    raise error(msg)
