"""The rollout batch: one Arrow RecordBatch plus batch-global values, and its column views.

:class:`RolloutBatch` is a whole batch, immutable: no attribute can be rebound, the numpy arrays
it hands out are read-only, and so are its Arrow buffers except a take's private buffers, which
:func:`arrow_split.torch.to_tensors` may share. A :class:`~arrow_split.Shard` holds a batch of its
rows; :func:`check_batch` is the one check of a function that takes a batch. Equality here is a
NaN-position compare (:func:`arrays_equal`): NaN equals NaN at the same place, so a batch built
with ``allow_nonfinite=True`` equals itself.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split._args import SplitMethod, as_flag, check_dp_size, method_of
from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions, TensorRole, data_buffer, numpy_view, parts
from arrow_split._codecs._convert import (
    check_finite_columns,
    check_parts,
    decode_train_data,
    encode_train_data,
    per_sample_values,
)
from arrow_split._codecs.lists import token_list_values
from arrow_split._codecs.scalar import global_to_python
from arrow_split._dump import Compression, read_dump, read_parquet, write_dump, write_parquet
from arrow_split.errors import (
    ArrowSplitError,
    ColumnNotFoundError,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.plan import Plan
from arrow_split.schema import ColumnSpec, Role, Roles, TrainData, resolve_specs

__all__ = [
    "ColumnValues",
    "RolloutBatch",
    "arrays_equal",
    "check_batch",
    "record_batches_equal",
    "values_equal",
]


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
        Optional: the plan the driver chose for this batch, so that ranks check against it (and
        need not re-plan). Not part of equality.
    trust_objects
        Whether any pickled object may be decoded (:meth:`to_train_data`), or plain data only
        (refusing others with :class:`~arrow_split.UntrustedObjectError`: unpickling runs the
        code a file names). ``True`` for batches built in this process, ``False`` by default for
        a batch read from a file; shards and shipped batches keep their batch's flag. Not part
        of equality.
    """

    __slots__ = (
        "_batch_globals",
        "_globals_view",
        "_plan",
        "_record_batch",
        "_roles",
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
        trust = as_flag("trust_objects", trust_objects)
        if plan is not None and (
            not isinstance(plan, Plan) or plan.num_samples != record_batch.num_rows
        ):
            msg = f"`plan` must be a Plan of {record_batch.num_rows} samples, got {plan!r}"
            raise SchemaError(msg)
        owned = {key: _own_global(value) for key, value in (batch_globals or {}).items()}
        self._set(record_batch, MappingProxyType(dict(specs)), MappingProxyType(owned), plan, trust)

    def _set(
        self,
        record_batch: pa.RecordBatch,
        specs: Mapping[str, ColumnSpec],
        batch_globals: Mapping[str, object],
        plan: Plan | None,
        trust_objects: bool,
        roles: Roles | None = None,
    ) -> None:
        self._record_batch = record_batch
        self._specs = specs
        self._batch_globals = batch_globals
        self._plan = plan
        self._trust_objects = trust_objects
        self._roles = Roles.of(specs) if roles is None else roles

    @classmethod
    def _make(
        cls,
        record_batch: pa.RecordBatch,
        specs: Mapping[str, ColumnSpec],
        batch_globals: Mapping[str, object],
        *,
        plan: Plan | None = None,
        trust_objects: bool = True,
        roles: Roles | None = None,
    ) -> RolloutBatch:
        """A batch of parts the library built or checked: nothing is validated or copied.

        ``specs`` and ``batch_globals`` are held as given (read-only mappings of owned values,
        e.g. another batch's), ``roles`` (if given) are those of ``specs``.
        """
        batch = object.__new__(cls)
        batch._set(record_batch, specs, batch_globals, plan, trust_objects, roles)
        return batch

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
        return cls._encode(data, specs, options)

    @classmethod
    def _encode(
        cls, data: Mapping[str, Any], specs: Iterable[ColumnSpec], options: EncodeOptions
    ) -> RolloutBatch:
        """:meth:`from_train_data` with its options parsed (the library's own defaults)."""
        record_batch, used, batch_globals = encode_train_data(data, specs, options)
        owned = {key: _own_global(value) for key, value in batch_globals.items()}
        return cls._make(record_batch, MappingProxyType(used), MappingProxyType(owned))

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
    def roles(self) -> Roles:
        """Which column plays each role (:class:`~arrow_split.schema.Roles`), found once."""
        return self._roles

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
        offsets = self._record_batch.column(self._roles.length_source).offsets.to_numpy()
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
        name = self._roles.column(role)
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
        return self._plan_for(check_dp_size(dp_size), method_of(balance_data))

    def _plan_for(self, dp_size: int, method: SplitMethod) -> Plan:
        """:meth:`make_plan` of parsed arguments: the lengths and slots are the batch's own."""
        slots = self.role_values("adapter_slot")
        keys = None if slots is None else slots.astype(np.int64, copy=False)
        return Plan._make(self.total_lengths, dp_size, method, keys)

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
        if plan is not None and (not isinstance(plan, Plan) or plan.num_samples != len(self)):
            msg = f"`plan` must be a Plan of {len(self)} samples, got {plan!r}"
            raise SchemaError(msg)
        return self._with(plan=plan)

    def _with(self, *, plan: Plan | None) -> RolloutBatch:
        """The same batch carrying ``plan`` (trusted: a plan of this batch)."""
        return RolloutBatch._make(
            self._record_batch,
            self._specs,
            self._batch_globals,
            plan=plan,
            trust_objects=self._trust_objects,
            roles=self._roles,
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
        merged = MappingProxyType({**self._specs, **resolved})
        return RolloutBatch._make(
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
    owned = {key: _own_global(value) for key, value in batch_globals.items()}
    return RolloutBatch._make(
        record_batch,
        MappingProxyType(specs),
        MappingProxyType(owned),
        plan=plan,
        trust_objects=trust_objects,
    )


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


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnValues:
    """A numeric column as numpy, for the leaves that turn columns into tensors.

    Every array is read-only: ``values`` is a view of ``buffer`` or, for booleans, a fresh
    unpacked array (read-only too, so that no array handed out here is writable); ``offsets``
    (int64 from 0) is set for ragged columns, ``None`` for one number per sample.
    A list per token (role ``token_lists``) has ``offsets`` into its tokens (``n + 1``) and
    ``token_offsets`` into ``values`` (one more than its tokens), both from 0.
    ``buffer.is_mutable`` says whether the buffer is private to this process (see
    :mod:`arrow_split.batch`).
    """

    spec: ColumnSpec
    role: TensorRole
    values: np.ndarray
    offsets: np.ndarray | None
    buffer: pa.Buffer | None
    token_offsets: np.ndarray | None = None


def numeric_columns(
    record_batch: pa.RecordBatch, specs: Mapping[str, ColumnSpec]
) -> list[ColumnValues]:
    """The columns of ``record_batch`` a tensor can be made of, as numpy views, in its order.

    Each column's codec says whether it is numeric and gives its values and offsets
    (:class:`ColumnValues`); an object column gives none.
    """
    found = []
    for name in record_batch.schema.names:
        spec = specs[name]
        codec = codec_for(spec)
        array = record_batch.column(name)
        if codec.tensor_role == "token_lists":
            flat, sample_offsets, tokens = token_list_values(array)
            buffer = data_buffer(array)
            found.append(
                ColumnValues(
                    spec,
                    codec.tensor_role,
                    _read_only(flat),
                    _read_only(sample_offsets),
                    buffer,
                    _read_only(tokens),
                )
            )
            continue
        tensor_values = codec.tensor_values(array)
        if tensor_values is not None:
            values, offsets = tensor_values
            offsets = None if offsets is None else _read_only(offsets)
            found.append(
                ColumnValues(
                    spec, codec.tensor_role, _read_only(values), offsets, data_buffer(array)
                )
            )
    return found


def _read_only(array: np.ndarray) -> np.ndarray:
    """``array`` with its writeable flag cleared (a flag of this array object only)."""
    array.flags.writeable = False
    return array


def _holds_floats(data_type: pa.DataType) -> bool:
    if pa.types.is_floating(data_type):
        return True
    return any(_holds_floats(data_type.field(i).type) for i in range(data_type.num_fields))


def arrays_equal(left: pa.Array, right: pa.Array) -> bool:
    """Whether two Arrow arrays are equal, NaN equal to NaN at the same place."""
    if left.type != right.type or len(left) != len(right):
        return False
    if left.equals(right):
        return True
    if pa.types.is_dictionary(left.type):  # the same values, whatever each dictionary holds
        value_type = left.type.value_type
        return arrays_equal(left.cast(value_type), right.cast(value_type))
    if not _holds_floats(left.type) or not left.is_null().equals(right.is_null()):
        return False
    if pa.types.is_floating(left.type):
        return bool(
            np.array_equal(
                left.to_numpy(zero_copy_only=False),
                right.to_numpy(zero_copy_only=False),
                equal_nan=True,
            )
        )
    left_parts, right_parts = parts(left), parts(right)
    if left_parts is None or right_parts is None:
        return False
    return all(arrays_equal(a, b) for a, b in zip(left_parts, right_parts, strict=True))


def record_batches_equal(left: pa.RecordBatch, right: pa.RecordBatch) -> bool:
    """Same schema (metadata aside, as ``RecordBatch.equals``), columns by :func:`arrays_equal`."""
    return left.schema.equals(right.schema) and all(
        arrays_equal(a, b) for a, b in zip(left.columns, right.columns, strict=True)
    )


def values_equal(left: object, right: object) -> bool:
    """Python values (batch globals, decoded) equal, NaN equal to NaN; arrays by dtype too."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        if not (isinstance(left, np.ndarray) and isinstance(right, np.ndarray)):
            return False
        if left.dtype != right.dtype or left.shape != right.shape:
            return False
        nan_aware = left.dtype.kind in "fc"
        return bool(np.array_equal(left, right, equal_nan=nan_aware))
    if isinstance(left, float) and isinstance(right, float):
        return left == right or (math.isnan(left) and math.isnan(right))
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return (
            type(left) is type(right)
            and len(left) == len(right)
            and all(values_equal(a, b) for a, b in zip(left, right, strict=True))
        )
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(values_equal(left[k], right[k]) for k in left)
    return bool(left == right)
