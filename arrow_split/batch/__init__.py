"""The rollout batch: one Arrow RecordBatch plus batch-global values, immutable.

Every array handed out is read-only, except a take's private buffers, which
:func:`arrow_split.torch.to_tensors` may share. Dumps: :mod:`arrow_split.batch._dump`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, cast

import numpy as np
import pyarrow as pa

import arrow_split.batch._concat as _concat
import arrow_split.batch._frame as _frame
from arrow_split._args import as_flag, check_dp_size, method_of
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._convert import (
    add_columns,
    check_parts,
    decode_train_data,
    encode_train_data,
)
from arrow_split._codecs.batch_global import global_to_python, owned_globals, read_only_globals
from arrow_split.batch._columns import (
    ColumnValues,
    arrays_equal,
    column_of,
    lengths_of,
    numeric_columns,
    record_batches_equal,
    role_values,
    values_equal,
)
from arrow_split.batch._dump import Compression, read_dump, read_parquet, write_dump, write_parquet
from arrow_split.batch._dump_meta import spec_from_json, spec_to_json
from arrow_split.errors import ArrowSplitError, SchemaError, SchemaTypeError
from arrow_split.plan import Plan
from arrow_split.schema import ColumnSpec, Role, Roles, TrainData

__all__ = [
    "ColumnValues",
    "RolloutBatch",
    "arrays_equal",
    "check_batch",
    "record_batches_equal",
    "spec_from_json",
    "spec_to_json",
    "values_equal",
]


class RolloutBatch(_frame.Frame):
    """A whole rollout batch as an Arrow RecordBatch plus batch-global values.

    Neither ``plan`` nor ``trust_objects`` is part of equality.

    Parameters
    ----------
    record_batch
        One row per sample, one column per per-sample key (the length source required).
    specs
        The spec of every key, per-sample and batch-global, in the train data's key order.
    batch_globals
        The batch-global values, already checked (see :meth:`from_train_data`).
    plan
        Optional: the driver's plan for this batch, so that ranks need not re-plan.
    trust_objects
        Whether any pickled object decodes, or plain data only (unpickling runs the code a file
        names): ``False`` by default for a file read; shards keep their batch's flag.
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
    _total_lengths: np.ndarray  # made on first use
    _globals_view: Mapping[str, object]  # made on first use

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
        _refuse_foreign_plan(plan, record_batch.num_rows)
        owned = owned_globals(batch_globals or {})
        self._set(record_batch, MappingProxyType(dict(specs)), owned, plan, trust)

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
        """A batch of parts the library built or checked: nothing is validated or copied."""
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
            The classic train data (``tokens`` required; a ``total_lengths`` must agree with it
            and is dropped: it is always derived).
        specs
            :class:`ColumnSpec` declarations of keys the library does not know, or overrides.
        allow_nonfinite
            Keep NaN and infinity in float columns. By default they are refused, except in a
            response column where ``loss_masks`` is 0 (miles' log-prob guard).
        exact_floats
            Refuse a float that a float32 column would round (by default it is rounded, as
            ``torch.tensor(..., dtype=float32)`` would).

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
        return cls._make(record_batch, MappingProxyType(used), owned_globals(batch_globals))

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
        """The batch-global values, read-only (lists as tuples, dicts as proxies)."""
        if not hasattr(self, "_globals_view"):  # two threads may both make it: equal values
            object.__setattr__(self, "_globals_view", read_only_globals(self._batch_globals))
        return self._globals_view

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

    @property
    def nbytes(self) -> int:
        """Bytes of the record batch's buffers (what a put moves, batch-global values aside)."""
        return int(self._record_batch.nbytes)

    @property
    def total_lengths(self) -> np.ndarray:
        """Token count of each row (int64, read-only), computed once; every shard shares it."""
        if not hasattr(self, "_total_lengths"):  # two threads may both make it: equal values
            source = self._record_batch.column(self._roles.length_source)
            object.__setattr__(self, "_total_lengths", lengths_of(source))
        return self._total_lengths

    @property
    def batch_total_lengths(self) -> np.ndarray:
        """Token count of every sample of the WHOLE batch (for a whole batch, its own)."""
        return self.total_lengths

    def role_values(self, role: Role) -> np.ndarray | None:
        """The values of the per-sample scalar column playing ``role`` (read-only), or ``None``."""
        return role_values(self._record_batch, self._specs, self._roles.column(role), role)

    def column(self, name: str) -> pa.Array:
        """The Arrow array of one per-sample key."""
        return column_of(self._record_batch, name)

    @property
    def column_names(self) -> list[str]:
        """The per-sample keys, in order."""
        return list(self._record_batch.schema.names)

    def numeric_columns(self) -> list[ColumnValues]:
        """The columns a tensor can be made of, as numpy views (see :class:`ColumnValues`)."""
        return numeric_columns(self._record_batch, self._specs)

    def make_plan(self, dp_size: int, *, balance_data: bool) -> Plan:
        """The batch's plan for ``dp_size`` ranks, each rank's rows by adapter slot if any."""
        dp_size, method = check_dp_size(dp_size), method_of(balance_data)
        slots = self.role_values("adapter_slot")
        keys = None if slots is None else slots.astype(np.int64, copy=False)
        return Plan._make(self.total_lengths, dp_size, method, keys)

    def write(
        self, path: str | os.PathLike[str], *, compression: Compression | None = None
    ) -> None:
        """Write the batch to one Arrow IPC file atomically (uncompressed: :meth:`read` maps it)."""
        parts = (self._record_batch, self._specs, self._batch_globals)
        write_dump(*parts, path, compression=compression)

    @staticmethod
    def read(
        path: str | os.PathLike[str], *, validate: bool = True, trust_objects: bool = False
    ) -> RolloutBatch:
        """Map a file written by :meth:`write` back into a batch, without copying its buffers.

        ``validate=False`` skips the content checks (trusted files only); only plain data among
        its pickled objects decodes unless ``trust_objects=True``.

        Raises
        ------
        DumpError
            A truncated or foreign file, a folder, an unknown version, bad metadata or content.
        FileNotFoundError
            No such file.
        """
        trust = as_flag("trust_objects", trust_objects)
        parts, _ = read_dump(path, validate=validate)  # checked: trusted now
        return RolloutBatch._make(*parts, trust_objects=trust)

    def to_parquet(self, path: str | os.PathLike[str]) -> None:
        """Write the batch as Parquet for analysis tools, specs and globals in its metadata."""
        write_parquet(self._record_batch, self._specs, self._batch_globals, path)

    @staticmethod
    def read_parquet(
        path: str | os.PathLike[str], *, validate: bool = True, trust_objects: bool = False
    ) -> RolloutBatch:
        """Read a file written by :meth:`to_parquet` (a copy); arguments as :meth:`read`."""
        validate = as_flag("validate", validate)
        trust = as_flag("trust_objects", trust_objects)
        parts = read_parquet(path, validate=validate)  # checked: trusted now
        return RolloutBatch._make(*parts, trust_objects=trust)

    def with_plan(self, plan: Plan | None) -> RolloutBatch:
        """The same batch (same buffers) carrying ``plan`` (see :attr:`plan`)."""
        _refuse_foreign_plan(plan, len(self))
        return self._with(plan=plan)

    def _with(self, *, plan: Plan | None, rows: pa.RecordBatch | None = None) -> RolloutBatch:
        """The batch carrying ``plan`` (trusted: of these rows), of other ``rows`` (same specs)."""
        parts = (self._record_batch if rows is None else rows, self._specs, self._batch_globals)
        return RolloutBatch._make(
            *parts, plan=plan, trust_objects=self._trust_objects, roles=self._roles
        )

    def add_train_data(
        self, data: Mapping[str, Any], *, specs: Iterable[ColumnSpec] = ()
    ) -> RolloutBatch:
        """A new batch with more per-sample scalar keys (validated; existing keys stay)."""
        record_batch, resolved = add_columns(self._record_batch, self._specs, data, specs)
        merged = MappingProxyType({**self._specs, **resolved})
        trust = self._trust_objects
        return RolloutBatch._make(
            record_batch, merged, self._batch_globals, plan=self._plan, trust_objects=trust
        )

    def to_train_data(self) -> TrainData:
        """The batch as the classic train-data dict of fresh Python objects (equal to its source).

        Raises
        ------
        UntrustedObjectError
            An untrusted batch holds a pickled object that is not plain data.
        DumpError
            A pickled object's bytes do not decode (a corrupt file).
        """
        parts = (self._record_batch, self._specs, self._batch_globals)
        return cast("TrainData", decode_train_data(*parts, trust_objects=self._trust_objects))

    def equals(self, other: object) -> bool:
        """Whether two batches hold the same values, specs and globals (NaN equal to NaN)."""
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
        parts = (self._record_batch, dict(self._specs), dict(self._batch_globals))
        return (_rebuild_batch, (*parts, self._plan, self._trust_objects))

    # For notebooks: a frame's reads, previews and conversions (``_frame.Frame``), and these.

    def slice(self, offset: int = 0, length: int | None = None) -> RolloutBatch:
        """Rows ``offset : offset + length`` in fresh buffers; batch-global values stay whole.

        ``offset`` counts from the end where negative and ``length`` (``None``: to the end) is
        cut to the rows there are, as a Python slice; both are ints (a numpy or 0-d one too).
        An ``OptionTypeError`` for another type, an ``OptionError`` for a negative ``length``.
        """
        rows = _frame.take_columns(self, _frame.slice_rows(self, offset, length))
        return self._with(plan=None, rows=rows)

    @staticmethod
    def concat(batches: Iterable[RolloutBatch]) -> RolloutBatch:
        """One batch of the rows of ``batches`` (a list), in order: same keys and specs.

        A ``float_per_sample`` global (``raw_reward``) with one number per row of each batch
        is concatenated; slices of one batch (each holding its batch's whole value) keep it
        once; a mix of the two is refused. Other globals must be equal (they are kept once). A
        batch without rows adds none and leaves the columns' types to the others.

        Raises
        ------
        SchemaTypeError
            ``batches`` is not a list of RolloutBatch (a single batch: pass ``[batch]``).
        SchemaError
            No batch; other keys, or a key stored otherwise (named); other tensor shapes;
            differing globals.
        """
        listed = _concat.as_list(batches)
        listed = [check_batch(batch, f"batches[{i}]") for i, batch in enumerate(listed)]
        record_batch, specs, owned, trust = _concat.concat_batches(listed)
        return RolloutBatch._make(record_batch, specs, owned, trust_objects=trust)


def _refuse_foreign_plan(plan: object, num_samples: int) -> None:
    if plan is not None and (not isinstance(plan, Plan) or plan.num_samples != num_samples):
        msg = f"`plan` must be a Plan of {num_samples} samples, got {plan!r}"
        raise SchemaError(msg, key="plan")


def _rebuild_batch(
    record_batch: pa.RecordBatch,
    specs: dict[str, ColumnSpec],
    batch_globals: dict[str, object],
    plan: Plan | None,
    trust: bool = True,
) -> RolloutBatch:
    parts = (record_batch, MappingProxyType(specs), owned_globals(batch_globals))
    return RolloutBatch._make(*parts, plan=plan, trust_objects=trust)


def check_batch(
    value: object, name: str = "batch", error: type[ArrowSplitError] = SchemaTypeError
) -> RolloutBatch:
    """``value`` if it is a RolloutBatch (a Shard is not: it holds one), else ``error``."""
    if isinstance(value, RolloutBatch):
        return value
    msg = (
        f"`{name}` must be a RolloutBatch, got {type(value).__name__}; build one with "
        "`RolloutBatch.from_train_data(data)` (a Shard's rows are `shard.rows`)"
    )
    raise error(msg, key=name)
