"""The streaming builder: each call encoded and checked once, appended to growable columns.

:meth:`finish` hands the columns to the batch without a copy or a second check; with a journal,
each accepted call is on disk before it returns (docs/builder.md, docs/journal.md).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

import pyarrow as pa

from arrow_split._args import as_choice, as_flag, as_path
from arrow_split._builder_step import Group, StepState, copy_value
from arrow_split._codecs._base import EncodeOptions
from arrow_split._codecs._convert import encode_columns
from arrow_split._codecs.batch_global import check_batch_global, check_per_sample_values
from arrow_split._journal import JournalSync, OnDuplicate, StepJournal
from arrow_split._journal_content import (
    global_from_record,
    global_record,
    group_from_record,
    journal_header,
    pack_value,
    spec_json,
)
from arrow_split._journal_scan import JournalDamage
from arrow_split._record import Record
from arrow_split.batch import RolloutBatch
from arrow_split.errors import (
    ArrowSplitError,
    JournalError,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.schema import (
    KNOWN_COLUMNS,
    ColumnSpec,
    resolve_specs,
    role_column,
)

__all__ = ["RolloutBatchBuilder", "group_record"]


class RolloutBatchBuilder(StepState):
    """Build a :class:`RolloutBatch` sample by sample, as the rollout loop finishes them.

    Each call is checked at once as :meth:`RolloutBatch.from_train_data` checks (a rejected
    call changes nothing); :meth:`finish` returns the batch and empties the builder
    (docs/builder.md, docs/journal.md).

    Parameters
    ----------
    specs
        :class:`ColumnSpec` declarations, as for :meth:`RolloutBatch.from_train_data`.
    allow_nonfinite, exact_floats
        As for :meth:`RolloutBatch.from_train_data`.
    journal, sync
        A folder for the journal and the dumps, or ``None``; when to sync (``"call"``,
        ``"step"``, ``"os"``).
    identity, on_duplicate
        The per-sample key that identifies a replay, or ``None``; ``"skip"`` or ``"error"``.

    Raises
    ------
    JournalError
        ``journal`` holds an unfinished step (resume it with :meth:`recover`), or is unwritable.

    Examples
    --------
    >>> from arrow_split import RolloutBatchBuilder
    >>> builder = RolloutBatchBuilder()
    >>> builder.append({"tokens": [1, 2, 3], "response_lengths": 1, "rewards": 1.0})
    1
    >>> builder.extend({"tokens": [[4, 5]], "response_lengths": [1], "rewards": [0.0]})
    1
    >>> builder.set_global("dynamic_global_batch_size", 2)
    >>> batch = builder.finish()
    >>> len(batch), len(builder)
    (2, 0)
    """

    __slots__ = ("_journal", "_on_duplicate", "_trust_objects")

    def __init__(
        self,
        specs: Iterable[ColumnSpec] = (),
        *,
        allow_nonfinite: bool = False,
        exact_floats: bool = False,
        journal: str | os.PathLike[str] | None = None,
        sync: JournalSync = "step",
        identity: str | None = None,
        on_duplicate: OnDuplicate = "skip",
    ) -> None:
        declared = tuple(specs)
        resolve_specs((), declared)  # type and duplicate checks, before any sample
        options = EncodeOptions(
            allow_nonfinite=as_flag("allow_nonfinite", allow_nonfinite),
            exact_floats=as_flag("exact_floats", exact_floats),
        )
        super().__init__(declared, options, identity)
        self._on_duplicate = as_choice("on_duplicate", on_duplicate, OnDuplicate)
        self._trust_objects = True  # False while a step holds samples recovered untrusted
        sync = as_choice("sync", sync, JournalSync)  # type: ignore[assignment]
        folder = None if journal is None else as_path("journal", journal)
        self._journal = None if folder is None else StepJournal.create(folder, self._header(), sync)

    def _header(self) -> dict[str, object]:  # what the journal's `open` record holds
        return journal_header(self._declared, self._options, self._identity)

    @property
    def salvaged(self) -> tuple[JournalDamage, ...]:
        """What ``recover(..., salvage=True)`` skipped: places of the file kept aside (its name)."""
        return () if self._journal is None else tuple(self._journal.damage)

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        keys = ", ".join(self._specs) or "no keys yet"
        return f"RolloutBatchBuilder({self._length} samples; {keys})"

    def append(self, sample: Mapping[str, Any]) -> int:
        """Validate one sample (a mapping key -> value) and add it to the batch.

        Returns
        -------
        int
            1, or 0 for a replayed sample skipped.

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            As :meth:`RolloutBatch.from_train_data` would; the builder is left unchanged.
        DuplicateSampleError
            With ``on_duplicate="error"``, a replayed sample.
        JournalError
            The journal cannot be written; the builder is left unchanged.
        """
        if not isinstance(sample, Mapping):
            msg = f"`sample` must be a mapping of key -> value, got {type(sample).__name__}"
            raise SchemaTypeError(msg, key="sample")
        group = {key: [value] if self._per_sample(key) else value for key, value in sample.items()}
        return self._add(group)

    def extend(self, train_data: Mapping[str, Any]) -> int:
        """Validate a group of samples in the train-data layout and add them to the batch.

        Returns
        -------
        int
            The number of samples added (replayed samples skipped are not counted).

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError, DuplicateSampleError
            As :meth:`append`.
        JournalError
            As :meth:`append`.
        """
        if not isinstance(train_data, Mapping):
            msg = (
                f"`train_data` must be a dict of per-sample lists, got {type(train_data).__name__}"
            )
            raise SchemaTypeError(msg, key="train_data")
        return self._add(train_data)

    def set_global(self, key: str, value: object) -> None:
        """Set a batch-global value (checked now; a per-sample one's length at :meth:`finish`).

        Raises
        ------
        SchemaError
            ``key`` is not batch-global, is given per sample already, or ``value`` is misshapen.
        """
        spec = self._spec(key)
        if spec.is_per_sample:
            msg = f"`{key}` is a {spec.kind} key; pass it with `append` or `extend`"
            raise SchemaError(msg, key=key)
        if self._sample_keys is not None and key in self._sample_keys:
            msg = (
                f"batch-global key `{key}` is already given per sample by `append`/`extend` in "
                "this step; give it one way only"
            )
            raise SchemaError(msg, key=key)
        if spec.global_shape == "float_per_sample":
            check_per_sample_values(spec, value, self._options.allow_nonfinite)
            value = copy_value(value)  # its length is checked by `finish`
        else:
            value = check_batch_global(spec, value, 0, self._options.allow_nonfinite)
        self._commit_global(key, spec, value)

    def _add(self, train_data: Mapping[str, Any]) -> int:
        base = self._length
        sample_keys = self._check_keys(train_data, base)
        options = dataclasses.replace(self._options, first_sample=base)  # a warning's sample
        try:
            resolved = self._resolve(train_data.keys())
            columns, used, batch_globals = encode_columns(train_data, resolved, options)
        except ArrowSplitError as error:
            raise error.shifted(base) from None
        checked = Group(columns, used, batch_globals, sample_keys)
        self._check_group(checked)
        self._check_identity(checked, base)
        group = self._first_seen(checked, self._on_duplicate)
        if group is None:
            return 0
        self._commit(group)
        return group.count

    # -- commit: journal first, then the step's state; nothing here checks the values again

    def _commit(self, group: Group) -> None:
        """Journal a checked group, then add it (nothing after the journal write raises)."""
        if self._journal is not None:
            self._journal.write("group", *group_record(group))
        self._join(group)

    def _commit_global(self, key: str, spec: ColumnSpec, value: object) -> None:
        if self._journal is not None:
            self._journal.write("global", global_record(key, spec, value), [])
        self._specs.setdefault(key, spec)
        self._globals[key] = value

    def finish(self) -> RolloutBatch:
        """The batch of every sample appended (with a journal, first written as the step's dump).

        Raises
        ------
        SchemaError, ColumnTypeError, ValueRangeError
            A rule on the whole batch is broken; the builder is left unchanged.
        JournalError
            The step's dump cannot be written; the builder and its journal are left unchanged.
        """
        if self._sample_keys is None:
            return self._finish_empty()
        batch_globals = {
            key: check_batch_global(
                self._specs[key], value, self._length, self._options.allow_nonfinite
            )
            for key, value in self._globals.items()
        }
        names = [key for key, spec in self._specs.items() if spec.is_per_sample]
        arrays = [self._columns[name].finish() for name in names]
        sample_globals = {
            key: self._sample_globals[key].finish()
            for key in self._sample_keys
            if key in self._sample_globals
        }
        for key, array in sample_globals.items():
            values = array.to_numpy(zero_copy_only=True)
            values.flags.writeable = False
            batch_globals[key] = values
        specs = dict(self._specs)
        batch = RolloutBatch._make(  # the builder built and checked every part: trusted
            pa.RecordBatch.from_arrays(arrays, names=names),
            MappingProxyType(specs),
            MappingProxyType({k: batch_globals[k] for k in specs if k in batch_globals}),
            trust_objects=self._trust_objects,
        )
        try:
            self._close_step(batch)
        except JournalError:
            for name, array in zip(names, arrays, strict=True):
                self._columns[name].append(array)
            for key, array in sample_globals.items():
                self._sample_globals[key].append(array)
            raise
        return batch

    def _close_step(self, batch: RolloutBatch) -> None:
        """Write the step's dump (with a journal) and empty the builder for the next step."""
        if self._journal is not None:
            self._journal.finish_step(batch)
        self._reset()
        self._trust_objects = True  # the next step holds only this process's samples

    def _finish_empty(self) -> RolloutBatch:
        specs = {spec.name: spec for spec in self._declared}
        source = role_column(specs, "length_source") or role_column(KNOWN_COLUMNS, "length_source")
        train_data: dict[str, object] = {str(source): [], **self._globals}
        batch = RolloutBatch._encode(train_data, self._declared, self._options)
        self._close_step(batch)
        return batch

    def close(self) -> None:
        """Close the journal (kept on disk) and free its folder; later calls raise JournalError."""
        if self._journal is not None:
            self._journal.close()

    @classmethod
    def recover(
        cls,
        journal: str | os.PathLike[str],
        *,
        sync: JournalSync = "step",
        on_duplicate: OnDuplicate = "skip",
        salvage: bool = False,
        trust_objects: bool = False,
    ) -> RolloutBatchBuilder:
        """The builder of the unfinished step in the folder ``journal``, every record checked.

        Parameters
        ----------
        journal, sync, on_duplicate
            The journal folder; as for the builder.
        salvage
            Keep every whole record of a damaged journal instead of raising: they are written
            to a new journal, which then takes the old one's name (kept as ``.damaged``).
        trust_objects
            Whether the step's pickled objects may decode as any object, not plain data only.

        Raises
        ------
        JournalError
            The folder is in use, holds no journal (``errno.ENOENT``), a file that is not one,
            several unfinished steps, a dump that is not its step's, damage (without
            ``salvage``), a record breaking a rule, or a full disk: the folder is left as it was.
        OptionTypeError, OptionError
            An argument is of the wrong kind.
        """
        folder = as_path("journal", journal)
        sync = as_choice("sync", sync, JournalSync)  # type: ignore[assignment]
        salvage = as_flag("salvage", salvage)
        trust = as_flag("trust_objects", trust_objects)
        on_duplicate = as_choice("on_duplicate", on_duplicate, OnDuplicate)  # type: ignore[assignment]
        step_journal, records, arguments = StepJournal.recover(folder, sync, salvage)
        try:
            try:
                builder = cls(**arguments, on_duplicate=on_duplicate)
            except ArrowSplitError as exc:
                msg = f"`{folder}`: the journal's header does not build a builder: {exc}"
                raise JournalError(msg) from None
            builder._trust_objects = trust
            if salvage:
                records = builder._sound_records(records, step_journal)
            step_journal.begin_recovery(builder._header())
            if step_journal.rewriting:  # each record written anew by its replay
                builder._journal = step_journal
            for record in records:
                builder._replay(record, step_journal.source)
            step_journal.end_recovery()  # nothing in the folder changed before this
        except BaseException:
            step_journal.close()
            raise
        builder._journal = step_journal
        return builder

    def _sound_records(self, records: list[Record], step_journal: StepJournal) -> list[Record]:
        """The records that keep every rule, replayed on a copy; the others salvaged (skipped)."""
        trial = type(self)(  # no journal: a new builder of the same arguments
            self._declared,
            allow_nonfinite=self._options.allow_nonfinite,
            exact_floats=self._options.exact_floats,
            identity=self._identity,
        )
        kept: list[Record] = []
        skipped: list[JournalDamage] = []
        for record in records:
            broken = trial._broken_rule(record, step_journal.source)
            if broken is None:
                kept.append(record)
                continue
            reason = f"record {record.sequence} breaks a rule: {broken}"
            skipped.append(JournalDamage(step_journal.source, record.offset, record.size, reason))
        if skipped:
            step_journal.salvage(skipped)
        return kept

    def _broken_rule(self, record: Record, source: str) -> str | None:
        """Replay ``record``; what it breaks if it is refused (the builder then unchanged)."""
        try:
            self._replay(record, source)
        except JournalError as exc:
            return exc.what()
        return None

    def _replay(self, record: Record, source: str) -> None:
        """Add a journal record's content, every field checked (a JournalError naming it)."""
        where = f"record {record.sequence}"
        allow_nonfinite = self._options.allow_nonfinite
        try:
            if record.kind == "global":
                key, spec, value = global_from_record(record, source, allow_nonfinite)
                if self._sample_keys is not None and key in self._sample_keys:
                    msg = f"batch-global key `{key}` is given per sample already in this step"
                    raise JournalError(msg, key=key)
                self._commit_global(key, spec, value)
                return
            if record.kind != "group":
                msg = f"an unknown kind of record {record.kind!r:.40}"
                raise JournalError(msg)
            group = Group(*group_from_record(record, source, allow_nonfinite))
            self._check_keys(dict.fromkeys(group.sample_keys), self._length)
            self._check_identity(group, self._length)
            self._check_group(group)
            replayed = self._first_seen(group, "skip")
        except JournalError as exc:
            msg = f"{where}: {exc}; the record was not written by this library as it stands"
            raise JournalError(msg, path=source, offset=record.offset, key=exc.key) from None
        except ArrowSplitError as exc:
            msg = f"{where}: {type(exc).__name__}: {exc}; the record breaks a rule of the library"
            raise JournalError(msg, path=source, offset=record.offset, key=exc.key) from None
        if replayed is not None:
            self._commit(replayed)


def group_record(group: Group) -> tuple[dict[str, object], list[pa.Array]]:
    """The JSON and the columns of the ``group`` record of ``group`` (docs/journal.md)."""
    names, sample_globals = list(group.columns), list(group.sample_globals)
    meta: dict[str, object] = {
        "names": names,
        "sample_globals": sample_globals,
        "sample_keys": list(group.sample_keys),
        "specs": [spec_json(spec) for spec in group.used.values()],
        "globals": {key: pack_value(group.used[key], v) for key, v in group.globals.items()},
    }
    arrays = [group.columns[name] for name in names]
    return meta, arrays + [pa.array(group.sample_globals[key]) for key in sample_globals]
