"""The state of one builder step: its keys, specs, identities, growable columns and globals.

:class:`StepState` is the part of :class:`~arrow_split.RolloutBatchBuilder` that holds the
samples since the last ``finish`` and adds a checked group to them: the per-sample keys fixed by
the step's first call, the specs as used, the identities seen (replays skipped or refused), the
growable columns (:mod:`arrow_split._codecs._growable`, kept across steps so that their capacity
is reused) and the batch-global values. The builder parses the arguments, encodes each call and
keeps the journal (:mod:`arrow_split._builder_journal`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from arrow_split._builder_group import Group, group_from_record
from arrow_split._codecs import EncodeOptions, check_batch_global, codec_for
from arrow_split._codecs._growable import Growable, ShapeMismatch, growable_for
from arrow_split._journal import Record, spec_from_json
from arrow_split._journal_values import check_v1_value, unpack_value, unpickle_v1
from arrow_split.errors import (
    ArrowSplitError,
    DuplicateSampleError,
    JournalError,
    RaggedLengthError,
    SchemaError,
)
from arrow_split.schema import ColumnSpec

__all__ = ["StepState"]


class StepState(abc.ABC):
    """One step's samples, checked and added group by group (see the module docstring)."""

    __slots__ = (
        "_columns",
        "_globals",
        "_identity",
        "_length",
        "_on_duplicate",
        "_options",
        "_sample_globals",
        "_sample_keys",
        "_seen",
        "_specs",
    )

    _columns: dict[str, Growable]
    _globals: dict[str, object]
    _identity: str | None
    _length: int
    _on_duplicate: str  # an OnDuplicate, checked by the builder
    _options: EncodeOptions
    _sample_globals: dict[str, Growable]
    _sample_keys: tuple[str, ...] | None
    _seen: dict[object, int]
    _specs: dict[str, ColumnSpec]

    @abc.abstractmethod
    def _per_sample(self, key: str) -> bool:
        """Whether ``key`` gives one value per sample (the builder resolves the specs)."""

    def _set_global(self, key: str, spec: ColumnSpec, value: object) -> None:
        self._specs.setdefault(key, spec)
        self._globals[key] = value

    def _identities(self, group: Group) -> list[object]:
        if self._identity is None or self._identity not in group.columns:
            return []
        return list(group.columns[self._identity].to_pylist())

    def _first_seen(self, group: Group, mode: str = "") -> Group | None:
        """The group without its replayed samples (``skip``), or raise (``error``)."""
        mode = mode or self._on_duplicate
        identities = self._identities(group)
        seen: dict[object, int] = {}
        keep: list[int] = []
        for row, identity in enumerate(identities):
            first = self._seen.get(identity, seen.get(identity))
            if first is None:
                seen[identity] = self._length + len(keep)
                keep.append(row)
            elif mode == "error":
                msg = (
                    f"sample {self._length + row}: `{self._identity}` {identity!r:.40} is "
                    f"sample {first}'s already; a replayed sample is refused "
                    '(`on_duplicate="error"`): drop it, or pass `on_duplicate="skip"`'
                )
                raise DuplicateSampleError(msg)
        if len(keep) == len(identities):
            return group
        return group.take(keep) if keep else None

    def _check_keys(self, train_data: Mapping[str, Any], base: int) -> tuple[str, ...]:
        sample_keys = tuple(key for key in train_data if self._per_sample(key))
        for key in sample_keys:
            if key in self._globals:
                msg = (
                    f"sample {base}: batch-global key `{key}` was given whole by `set_global` "
                    "in this step; give it one way only"
                )
                raise SchemaError(msg)
        if self._sample_keys is None:
            return sample_keys
        missing = [key for key in self._sample_keys if key not in sample_keys]
        added = [key for key in sample_keys if key not in self._sample_keys]
        if missing or added:
            what = f"lacks key `{missing[0]}`" if missing else f"has the new key `{added[0]}`"
            msg = (
                f"sample {base} {what}; every sample of a batch has the same per-sample keys "
                f"(this step's: {', '.join(self._sample_keys)})"
            )
            raise SchemaError(msg)
        return sample_keys

    def _check_group(self, group: Group) -> None:
        """Raise if the group cannot join the batch: a tensor shape, a batch-global value."""
        for name, array in group.columns.items():
            growable = self._columns.get(name)
            if growable is None or growable.length == 0:
                continue
            try:
                growable.check(array)
            except ShapeMismatch as mismatch:
                msg = (
                    f"sample {mismatch.row}: `{name}` has trailing shape {mismatch.shape} but "
                    f"sample {mismatch.first_row} has {mismatch.first}; every sample must have "
                    "the same shape after the first axis"
                )
                raise RaggedLengthError(msg) from None
        for key, value in group.globals.items():
            if key in self._globals and not _same(self._globals[key], value):
                msg = (
                    f"batch-global key `{key}` is {value!r:.60} in sample {self._length}'s group "
                    f"but {self._globals[key]!r:.60} before; a batch-global key has one value "
                    "for the whole batch (set it once with `set_global`)"
                )
                raise SchemaError(msg)

    def _commit(self, group: Group) -> None:
        """Add a checked group: nothing here raises on the caller's values."""
        if self._sample_keys is None:
            self._sample_keys = group.sample_keys
        for key, spec in group.used.items():
            previous = self._specs.get(key)
            self._specs[key] = spec
            if previous is not None and previous != spec and key in self._columns:
                self._reencode(key, previous, spec)
        for name, array in group.columns.items():
            self._growable(self._columns, name, array).append(array)
        for key, values in group.sample_globals.items():
            array = pa.array(values)
            self._growable(self._sample_globals, key, array).append(array)
        for key, value in group.globals.items():
            self._globals.setdefault(key, value)
        for row, identity in enumerate(self._identities(group)):
            self._seen[identity] = self._length + row
        self._length += group.count

    @staticmethod
    def _growable(growables: dict[str, Growable], name: str, array: pa.Array) -> Growable:
        """The column's growable; a new one where an empty one holds another Arrow type.

        An empty growable of another type (the previous step's narrow storage, tensor shape or
        object codec) is replaced: a step's types depend on its own samples only.
        """
        growable = growables.get(name)
        reusable = growable is not None and (growable.type.equals(array.type) or growable.length)
        if growable is None or not reusable:
            growable = growables[name] = growable_for(array.type)
        return growable

    def _reencode(self, key: str, previous: ColumnSpec, spec: ColumnSpec) -> None:
        """Store the rows so far as ``spec`` says (a ``string`` column that fell back to pickle)."""
        codec = codec_for(spec)
        rows = codec.decode(previous, self._columns[key].finish())
        array, _ = codec.encode(spec, rows, self._options)
        self._columns[key] = growable_for(array.type)
        self._columns[key].append(array)

    def _checked_globals(self) -> dict[str, object]:
        return {
            key: check_batch_global(
                self._specs[key], value, self._length, self._options.allow_nonfinite
            )
            for key, value in self._globals.items()
        }

    def _reset(self) -> None:
        self._sample_keys = None
        self._specs = {}
        self._globals = {}
        self._seen = {}
        self._length = 0

    def _check_identity(self, group: Group, base: int) -> None:
        """Raise unless every sample of the group has an identity (the builder's key, not None)."""
        if self._identity is None:
            return
        column = group.columns.get(self._identity)
        if column is None:
            msg = (
                f"sample {base} lacks the identity key `{self._identity}`; with "
                f"`identity={self._identity!r}` every sample carries it"
            )
            raise SchemaError(msg)
        if column.null_count:
            row = column.is_null().to_pylist().index(True)
            msg = (
                f"sample {base + row}: the identity key `{self._identity}` is None; every "
                "sample needs its own identity (samples without one would be taken for "
                "replays of each other)"
            )
            raise SchemaError(msg)

    def _replayed(
        self, record: Record, source: str
    ) -> Group | tuple[str, ColumnSpec, object] | None:
        """What a journal record adds, every field checked (replays skipped by identity).

        Raises
        ------
        JournalError
            The record breaks a rule; the message names the file, the record and its offset.
        """
        where = f"`{source}` record {record.sequence} at offset {record.offset}"
        try:
            if record.kind == "global":
                return self._replayed_global(record, source)
            if record.kind != "group":
                msg = f"an unknown kind of record {record.kind!r:.40}"
                raise JournalError(msg)
            group = group_from_record(record, source, self._options.allow_nonfinite)
            self._check_keys(dict.fromkeys(group.sample_keys), self._length)
            self._check_identity(group, self._length)
            self._check_group(group)
            return self._first_seen(group, "skip")
        except JournalError as exc:
            msg = f"{where}: {exc}; the record was not written by this library as it stands"
            raise JournalError(msg) from None
        except (ArrowSplitError, pa.ArrowException, ValueError, TypeError, KeyError) as exc:
            msg = f"{where}: {type(exc).__name__}: {exc}; the record breaks a rule of the library"
            raise JournalError(msg) from None

    def _replayed_global(self, record: Record, source: str) -> tuple[str, ColumnSpec, object]:
        key, stored = record.meta.get("key"), record.meta.get("spec")
        spec = spec_from_json(stored, source)
        if not isinstance(key, str) or spec.name != key or spec.is_per_sample:
            msg = f"its `key` {key!r:.40} is not the batch-global key of its spec {spec}"
            raise JournalError(msg)
        if self._sample_keys is not None and key in self._sample_keys:
            msg = f"batch-global key `{key}` is given per sample already in this step"
            raise JournalError(msg)
        if record.sequence < 0:
            value = check_v1_value(
                spec, unpickle_v1(record.meta.get("value")), self._options.allow_nonfinite
            )
        else:
            value = unpack_value(spec, record.meta.get("value"), self._options.allow_nonfinite)
        return key, spec, value


def _same(left: object, right: object) -> bool:
    """Equal batch-global values (lists of ints or str, or ints)."""
    return type(left) is type(right) and left == right
