"""One step of a builder: its keys, specs, identities, growable columns, and a group's rules.

The rules a group (a call's, or a journal record's) keeps to join the step live here; the
builder adds its API, its journal and the batch at ``finish`` (``_builder``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._args import describe
from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._growable import Growable, ShapeMismatch, growable_for
from arrow_split.errors import (
    DuplicateSampleError,
    RaggedLengthError,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, resolve_specs

__all__ = ["Group", "StepState", "copy_value"]

_IDENTITY_FIX = (
    "pass a per-sample scalar key of ints or strings (such as `sample_indices`), "
    "declared with a ColumnSpec if it is not a known key, or `identity=None`"
)


class StepState:
    """The builder's step and the rules a group keeps to join it (the builder's base class)."""

    __slots__ = (
        "_columns",
        "_declared",
        "_globals",
        "_identity",
        "_known",
        "_length",
        "_options",
        "_sample_globals",
        "_sample_keys",
        "_seen",
        "_specs",
    )

    def __init__(
        self, declared: tuple[ColumnSpec, ...], options: EncodeOptions, identity: object
    ) -> None:
        self._declared = declared
        self._options = options
        self._known: dict[str, ColumnSpec] = {}  # every key resolved so far (all steps)
        self._identity = self._as_identity(identity)
        self._columns: dict[str, Growable] = {}  # kept across steps: their capacity is reused
        self._sample_globals: dict[str, Growable] = {}
        self._reset()

    def _reset(self) -> None:
        """Forget the step's keys, specs, globals and identities (the growables are emptied)."""
        self._sample_keys: tuple[str, ...] | None = None  # fixed by the step's first call
        self._specs: dict[str, ColumnSpec] = {}  # this step's specs as used, in key order
        self._globals: dict[str, object] = {}
        self._seen: dict[object, int] = {}  # identity -> the sample that has it, this step
        self._length = 0

    def _as_identity(self, identity: object) -> str | None:
        """The identity key, if it names a per-sample scalar column of ints or strings."""
        if identity is None:
            return None
        if not isinstance(identity, str):
            msg = f"`identity` must be a per-sample key (a str) or None, got {describe(identity)}"
            raise SchemaTypeError(msg, key="identity")
        try:
            spec = self._spec(identity)
        except SchemaError as exc:
            msg = f"`identity` {identity!r:.40} is not a key the builder knows ({exc}); "
            raise SchemaError(msg + _IDENTITY_FIX, key="identity") from None
        value_type = spec.value_type
        hashable = value_type is not None and (
            pa.types.is_integer(value_type)
            or pa.types.is_string(value_type)
            or pa.types.is_large_string(value_type)
        )
        if not (spec.is_per_sample and codec_for(spec).one_number) or not hashable:
            msg = (
                f"`identity` {identity!r:.40} is a {spec.kind} key of {value_type}, which cannot "
                f"identify a sample; {_IDENTITY_FIX}"
            )
            raise SchemaError(msg, key="identity")
        return identity

    def _spec(self, key: str) -> ColumnSpec:
        """The spec of ``key``, resolved at its first use (an unknown key raises then)."""
        if key not in self._known:
            self._known[key] = resolve_specs([key], self._declared)[key]
        return self._known[key]

    def _per_sample(self, key: str) -> bool:
        """Whether ``key`` gives one value per sample (unknown keys too: resolving raises)."""
        if key == TOTAL_LENGTHS:  # checked against the length source, never stored
            return True
        declared = any(spec.name == key for spec in self._declared)
        if key not in self._known and key not in KNOWN_COLUMNS and not declared:
            return True
        spec = self._spec(key)
        return spec.is_per_sample or spec.global_shape == "float_per_sample"

    def _resolve(self, keys: Iterable[str]) -> dict[str, ColumnSpec]:
        """A group's specs: the step's as used, or resolved anew (together, in a first call)."""
        used = self._specs
        if self._sample_keys is None:
            resolved = resolve_specs(keys, self._declared)  # role checks too
            self._known.update(resolved)
            return {key: used.get(key, spec) for key, spec in resolved.items()}
        return {
            key: used[key] if key in used else self._spec(key)
            for key in keys
            if key != TOTAL_LENGTHS
        }

    def _check_keys(self, train_data: Mapping[str, Any], base: int) -> tuple[str, ...]:
        sample_keys = tuple(key for key in train_data if self._per_sample(key))
        for key in sample_keys:
            if key in self._globals:
                msg = (
                    f"batch-global key `{key}` was given whole by `set_global` "
                    "in this step; give it one way only"
                )
                raise SchemaError(msg, key=key, sample=base)
        if self._sample_keys is None:
            return sample_keys
        missing = [key for key in self._sample_keys if key not in sample_keys]
        added = [key for key in sample_keys if key not in self._sample_keys]
        if missing or added:
            key = missing[0] if missing else added[0]
            what = f"lacks key `{key}`" if missing else f"has the new key `{key}`"
            msg = (
                f"the sample {what}; every sample of a batch has the same per-sample keys "
                f"(this step's: {', '.join(self._sample_keys)})"
            )
            raise SchemaError(msg, key=key, sample=base)
        return sample_keys

    def _check_group(self, group: Group) -> None:
        """Raise if the group cannot join the batch: a tensor shape, a batch-global value."""
        for name, array in group.columns.items():
            growable = self._columns.get(name)
            if growable is None or growable.length == 0:
                continue
            if group.used[name].codec != self._specs[name].codec:
                continue  # an object column that falls back to pickles: re-encoded on commit
            try:
                growable.check(array)
            except ShapeMismatch as mismatch:
                msg = (
                    f"`{name}` has trailing shape {mismatch.shape} but "
                    f"sample {mismatch.first_row} has {mismatch.first}; every sample must have "
                    "the same shape after the first axis"
                )
                raise RaggedLengthError(msg, key=name, sample=mismatch.row) from None
        for key, value in group.globals.items():
            if key in self._globals and not _same(self._globals[key], value):
                msg = (
                    f"batch-global key `{key}` is {value!r:.60} in this sample's group but "
                    f"{self._globals[key]!r:.60} before; a batch-global key has one value for "
                    "the whole batch (set it once with `set_global`)"
                )
                raise SchemaError(msg, key=key, sample=self._length)

    def _check_identity(self, group: Group, base: int) -> None:
        """Raise unless every sample of the group has an identity (the builder's key, not None)."""
        if self._identity is None:
            return
        column = group.columns.get(self._identity)
        if column is None:
            msg = (
                f"the sample lacks the identity key `{self._identity}`; with "
                f"`identity={self._identity!r}` every sample carries it"
            )
            raise SchemaError(msg, key=self._identity, sample=base)
        if column.null_count:
            row = column.is_null().to_pylist().index(True)
            msg = (
                f"the identity key `{self._identity}` is None; every "
                "sample needs its own identity (samples without one would be taken for "
                "replays of each other)"
            )
            raise SchemaError(msg, key=self._identity, sample=base + row)

    def _identities(self, group: Group) -> list[object]:
        if self._identity is None or self._identity not in group.columns:
            return []
        return list(group.columns[self._identity].to_pylist())

    def _first_seen(self, group: Group, mode: str) -> Group | None:
        """The group without its replayed samples (``skip``), or raise (``error``)."""
        identities = self._identities(group)
        seen: dict[object, int] = {}  # identity -> its first row in the group
        keep: list[int] = []
        for row, identity in enumerate(identities):
            first = self._seen.get(identity)
            if first is None and identity not in seen:
                seen[identity] = row
                keep.append(row)
            elif mode == "error":
                held = (
                    f"sample {first}'s already"
                    if first is not None
                    else "repeated within this call (samples "
                    f"{self._length + seen[identity]} and {self._length + row})"
                )
                msg = (
                    f"`{self._identity}` {identity!r:.40} is {held}; a replayed sample is "
                    'refused (`on_duplicate="error"`): drop it, or pass `on_duplicate="skip"`'
                )
                raise DuplicateSampleError(msg, key=self._identity, sample=self._length + row)
        if len(keep) == len(identities):
            return group
        return group.take(keep) if keep else None

    def _join(self, group: Group) -> None:
        """Add a checked group to the step (nothing here checks the values again, or raises)."""
        if self._sample_keys is None:
            self._sample_keys = group.sample_keys
        for key, spec in group.used.items():
            previous = self._specs.get(key)
            self._specs[key] = spec
            if previous is not None and previous != spec and key in self._columns:
                self._reencode(key, previous, spec)
        for name, array in group.columns.items():
            grow = codec_for(group.used[name]).growable
            _growable(self._columns, name, array, grow).append(array)
        for key, values in group.sample_globals.items():  # float64 numbers, not a kind's column
            array = pa.array(values)
            _growable(self._sample_globals, key, array, growable_for).append(array)
        for key, value in group.globals.items():
            self._globals.setdefault(key, value)
        for row, identity in enumerate(self._identities(group)):
            self._seen[identity] = self._length + row
        self._length += group.count

    def _reencode(self, key: str, previous: ColumnSpec, spec: ColumnSpec) -> None:
        """Store the rows so far as ``spec`` says (a ``string`` column that fell back to pickle)."""
        codec = codec_for(spec)
        rows = codec.decode(previous, self._columns[key].finish())
        array, _ = codec.encode(spec, rows, self._options)
        self._columns[key] = codec.growable(array.type)
        self._columns[key].append(array)


def copy_value(value: object) -> object:
    """A private copy of a list or array given to :meth:`RolloutBatchBuilder.set_global`."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return list(value) if isinstance(value, (list, tuple)) else value


def _same(left: object, right: object) -> bool:
    return type(left) is type(right) and left == right


def _growable(
    growables: dict[str, Growable],
    name: str,
    array: pa.Array,
    grow: Callable[[pa.DataType], Growable],
) -> Growable:
    """The column's growable; an empty one of another Arrow type is replaced (never carried)."""
    growable = growables.get(name)
    reusable = growable is not None and (growable.type.equals(array.type) or growable.length)
    if growable is None or not reusable:
        growable = growables[name] = grow(array.type)
    return growable


class Group:
    """One accepted call, encoded and checked: columns, specs as used, batch-global values."""

    __slots__ = ("columns", "count", "globals", "sample_globals", "sample_keys", "used")

    def __init__(
        self,
        columns: dict[str, pa.Array],
        used: dict[str, ColumnSpec],
        batch_globals: dict[str, object],
        sample_keys: tuple[str, ...],
    ) -> None:
        self.columns = columns
        self.used = used
        self.sample_keys = sample_keys
        self.sample_globals = {
            k: np.asarray(v, dtype=np.float64) for k, v in batch_globals.items() if k in sample_keys
        }
        self.globals = {k: v for k, v in batch_globals.items() if k not in sample_keys}
        self.count = len(next(iter(columns.values())))  # the length source is always there

    def take(self, rows: Sequence[int]) -> Group:
        """The group of the samples at ``rows`` only (a replay's samples dropped)."""
        picked = np.asarray(rows, dtype=np.int64)
        columns = {
            name: codec_for(self.used[name]).take(array, picked)
            for name, array in self.columns.items()
        }
        values: dict[str, object] = {k: v[picked] for k, v in self.sample_globals.items()}
        return Group(columns, self.used, {**self.globals, **values}, self.sample_keys)
