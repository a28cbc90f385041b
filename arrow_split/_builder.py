"""The streaming builder: samples become columnar as they finish, not at the step's end.

:class:`RolloutBatchBuilder` encodes each appended sample (or group of samples) at once, through
the same path as :meth:`RolloutBatch.from_train_data` (:func:`arrow_split._convert.encode_columns`
and the codecs), so every check and message is the same; the encoded values are appended to
growable Arrow columns (:mod:`arrow_split._growable`), which :meth:`RolloutBatchBuilder.finish`
hands over to the batch without a copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._codecs import EncodeOptions, codec_for
from arrow_split._codecs.globals import check_batch_global
from arrow_split._convert import encode_columns, encode_train_data
from arrow_split._growable import Growable, ShapeMismatch, growable_for
from arrow_split.batch import RolloutBatch
from arrow_split.errors import ArrowSplitError, RaggedLengthError, SchemaError, SchemaTypeError
from arrow_split.schema import KNOWN_COLUMNS, ColumnSpec, resolve_specs, role_column

__all__ = ["RolloutBatchBuilder"]

_SAMPLE_AT = re.compile(r"\bsample (\d+)\b")
_DERIVED = "total_lengths"  # checked against the length source, never stored


def _shifted(error: ArrowSplitError, base: int) -> ArrowSplitError:
    """The same error, its sample positions moved from the group's to the batch's."""
    if base == 0:
        return error
    text = _SAMPLE_AT.sub(lambda match: f"sample {int(match.group(1)) + base}", str(error))
    return type(error)(text)


def _copy_value(value: object) -> object:
    """A private copy of a list or array given to :meth:`RolloutBatchBuilder.set_global`."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return list(value) if isinstance(value, (list, tuple)) else value


class _Group:
    """One append or extend, encoded and checked, not yet added to the builder."""

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
        self.sample_globals = {k: v for k, v in batch_globals.items() if k in sample_keys}
        self.globals = {k: v for k, v in batch_globals.items() if k not in sample_keys}
        self.count = len(next(iter(columns.values())))  # the length source is always there


class RolloutBatchBuilder:
    """Build a :class:`RolloutBatch` sample by sample, as the rollout loop finishes them.

    Each :meth:`append` (one sample) or :meth:`extend` (a group in the train-data layout) is
    validated at once with the rules, error types and messages of
    :meth:`RolloutBatch.from_train_data`, the message naming the sample's position in the
    batch; a rejected call leaves the builder exactly as it was, so a loop can log the error,
    drop the sample and go on. :meth:`finish` returns the batch, equal to ``from_train_data`` of
    the same samples and batch-global values, and leaves the builder empty for the next step,
    its buffers' capacity kept.

    Keys. The first call of a step fixes the per-sample keys; a later sample with a key missing
    or added is a :class:`SchemaError`. A per-sample batch-global key (``raw_reward``: one number
    per sample) may come with the samples, one value each, or whole through :meth:`set_global`;
    other batch-global keys through :meth:`set_global`, or with a sample or group (then every
    one that has it must give the same value). Rules on the whole batch (a ``raw_reward`` given
    whole has one value per sample) are checked by :meth:`finish`.

    Values are Python lists, numpy arrays, ``array.array`` or any object that exports the
    buffer protocol, ``__array__`` or DLPack (a CPU torch tensor). They are copied: the batch
    never shares the caller's memory.

    Cost. Each call converts its values once (Python lists through ``struct``, arrays by a
    copy) and copies them into the builder's buffers; besides, each call has a fixed cost of a
    few hundred microseconds, so extending by groups (the ``n_samples_per_prompt`` samples of a
    prompt) is cheaper than appending sample by sample. :meth:`finish` copies nothing: the
    buffers become the batch's, and the next step's buffers start at the same capacity.

    Threads. A builder is not thread-safe: use one per producer thread (and put their batches
    together afterwards), or guard it with a lock. An asyncio loop on one thread needs nothing.

    Parameters
    ----------
    specs
        :class:`ColumnSpec` declarations, as for :meth:`RolloutBatch.from_train_data`.
    allow_nonfinite, exact_floats
        As for :meth:`RolloutBatch.from_train_data`.

    Examples
    --------
    >>> from arrow_split import RolloutBatchBuilder
    >>> builder = RolloutBatchBuilder()
    >>> builder.append({"tokens": [1, 2, 3], "response_lengths": 1, "rewards": 1.0})
    >>> builder.extend({"tokens": [[4, 5]], "response_lengths": [1], "rewards": [0.0]})
    >>> builder.set_global("dynamic_global_batch_size", 2)
    >>> batch = builder.finish()
    >>> len(batch), len(builder)
    (2, 0)
    """

    __slots__ = (
        "_columns",
        "_declared",
        "_globals",
        "_known",
        "_length",
        "_options",
        "_sample_globals",
        "_sample_keys",
        "_specs",
    )

    def __init__(
        self,
        specs: Iterable[ColumnSpec] = (),
        *,
        allow_nonfinite: bool = False,
        exact_floats: bool = False,
    ) -> None:
        self._declared = tuple(specs)
        resolve_specs((), self._declared)  # type and duplicate checks, before any sample
        self._options = EncodeOptions(allow_nonfinite=allow_nonfinite, exact_floats=exact_floats)
        self._known: dict[str, ColumnSpec] = {}  # every key resolved so far (all steps)
        self._columns: dict[str, Growable] = {}  # kept across steps: their capacity is reused
        self._sample_globals: dict[str, Growable] = {}
        self._sample_keys: tuple[str, ...] | None = None
        self._specs: dict[str, ColumnSpec] = {}  # this step's specs as used, in key order
        self._globals: dict[str, object] = {}
        self._length = 0

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        keys = ", ".join(self._specs) or "no keys yet"
        return f"RolloutBatchBuilder({self._length} samples; {keys})"

    def _spec(self, key: str) -> ColumnSpec:
        if key not in self._known:
            self._known[key] = resolve_specs([key], self._declared)[key]
        return self._known[key]

    def _per_sample(self, key: str) -> bool:
        """Whether ``key`` gives one value per sample (unknown keys too: resolving raises)."""
        if key == _DERIVED:
            return True
        declared = any(spec.name == key for spec in self._declared)
        if key not in self._known and key not in KNOWN_COLUMNS and not declared:
            return True
        spec = self._spec(key)
        return spec.is_per_sample or spec.global_shape == "float_per_sample"

    def append(self, sample: Mapping[str, Any]) -> None:
        """Validate one sample (a mapping key -> value) and add it to the batch.

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            As :meth:`RolloutBatch.from_train_data` would, naming the sample's position in the
            batch; the builder is left unchanged.
        """
        if not isinstance(sample, Mapping):
            msg = f"`sample` must be a mapping of key -> value, got {type(sample).__name__}"
            raise SchemaTypeError(msg)
        group = {key: [value] if self._per_sample(key) else value for key, value in sample.items()}
        self._add(group)

    def extend(self, train_data: Mapping[str, Any]) -> None:
        """Validate a group of samples in the train-data layout and add them to the batch.

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            As :meth:`RolloutBatch.from_train_data` would on the group, naming each sample's
            position in the batch; the builder is left unchanged.
        """
        if not isinstance(train_data, Mapping):
            msg = (
                f"`train_data` must be a dict of per-sample lists, got {type(train_data).__name__}"
            )
            raise SchemaTypeError(msg)
        self._add(train_data)

    def set_global(self, key: str, value: object) -> None:
        """Set a batch-global value (checked now; a per-sample one's length at :meth:`finish`).

        Raises
        ------
        SchemaError
            ``key`` is not a batch-global key, is given per sample already, or ``value`` does
            not have the key's documented shape.
        """
        spec = self._spec(key)
        if spec.is_per_sample:
            msg = f"`{key}` is a {spec.kind} key; pass it with `append` or `extend`"
            raise SchemaError(msg)
        if self._sample_keys is not None and key in self._sample_keys:
            msg = (
                f"batch-global key `{key}` is already given per sample by `append`/`extend` in "
                "this step; give it one way only"
            )
            raise SchemaError(msg)
        if spec.global_shape == "float_per_sample":
            value = _copy_value(value)  # its length is checked by `finish`
        else:
            value = check_batch_global(spec, value, 0, self._options.allow_nonfinite)
        self._specs.setdefault(key, spec)
        self._globals[key] = value

    def _add(self, train_data: Mapping[str, Any]) -> None:
        base = self._length
        sample_keys = self._check_keys(train_data, base)
        try:
            resolved = self._resolve(train_data)
            columns, used, batch_globals = encode_columns(train_data, resolved, self._options)
        except ArrowSplitError as error:
            raise _shifted(error, base) from None
        group = _Group(columns, used, batch_globals, sample_keys)
        self._check_group(group)
        self._commit(group)

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

    def _resolve(self, train_data: Mapping[str, Any]) -> dict[str, ColumnSpec]:
        """The specs of a group's keys: as used so far this step, or resolved anew."""
        if self._sample_keys is None:
            resolved = resolve_specs(train_data.keys(), self._declared)  # role checks too
            self._known.update(resolved)
            return {key: self._specs.get(key, spec) for key, spec in resolved.items()}
        return {
            key: self._specs[key] if key in self._specs else self._spec(key)
            for key in train_data
            if key != _DERIVED
        }

    def _check_group(self, group: _Group) -> None:
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

    def _commit(self, group: _Group) -> None:
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
            array = pa.array(np.asarray(values, dtype=np.float64))
            self._growable(self._sample_globals, key, array).append(array)
        for key, value in group.globals.items():
            self._globals.setdefault(key, value)
        self._length += group.count

    @staticmethod
    def _growable(growables: dict[str, Growable], name: str, array: pa.Array) -> Growable:
        """The column's growable; a new one where an empty one holds another Arrow type."""
        growable = growables.get(name)
        reusable = growable is not None and (
            growable.type.equals(array.type)
            or growable.length > 0
            or (pa.types.is_large_list(growable.type) and pa.types.is_large_list(array.type))
        )
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

    def finish(self) -> RolloutBatch:
        """The batch of every sample appended; the builder is then empty, its capacity kept.

        Raises
        ------
        SchemaError, ColumnTypeError, ValueRangeError
            A rule on the whole batch is broken (a batch-global value given whole with the wrong
            number of values); the builder is left unchanged.
        """
        if self._sample_keys is None:
            return self._finish_empty()
        batch_globals = self._checked_globals()
        names = [key for key, spec in self._specs.items() if spec.is_per_sample]
        arrays = [self._columns[name].finish() for name in names]
        for key in self._sample_keys:
            if key in self._sample_globals:
                values = self._sample_globals[key].finish().to_numpy(zero_copy_only=True)
                values.flags.writeable = False
                batch_globals[key] = values
        record_batch = pa.RecordBatch.from_arrays(arrays, names=names)
        record_batch.validate(full=True)
        specs = dict(self._specs)
        self._reset()
        return RolloutBatch(
            record_batch, specs, {k: batch_globals[k] for k in specs if k in batch_globals}
        )

    def _checked_globals(self) -> dict[str, object]:
        return {
            key: check_batch_global(
                self._specs[key], value, self._length, self._options.allow_nonfinite
            )
            for key, value in self._globals.items()
        }

    def _finish_empty(self) -> RolloutBatch:
        declared = {spec.name: spec for spec in self._declared}
        source = role_column(declared, "length_source") or role_column(
            KNOWN_COLUMNS, "length_source"
        )
        train_data: dict[str, object] = {str(source): [], **self._globals}
        record_batch, used, batch_globals = encode_train_data(
            train_data, self._declared, self._options
        )
        self._reset()
        return RolloutBatch(record_batch, used, batch_globals)

    def _reset(self) -> None:
        self._sample_keys = None
        self._specs = {}
        self._globals = {}
        self._length = 0


def _same(left: object, right: object) -> bool:
    """Equal batch-global values (lists of ints or str, or ints)."""
    return type(left) is type(right) and left == right
