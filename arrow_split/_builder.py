"""The streaming builder: samples become columnar as they finish, not at the step's end.

:class:`RolloutBatchBuilder` encodes each appended sample (or group of samples) at once, through
the same path as :meth:`RolloutBatch.from_train_data` (:func:`arrow_split._convert.encode_columns`
and the codecs), so every check and message is the same; the encoded values are appended to
growable Arrow columns (:mod:`arrow_split._codecs._growable`), which
:meth:`RolloutBatchBuilder.finish` hands over to the batch without a copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._args import as_choice, as_flag, as_path, describe
from arrow_split._builder_group import Group, group_record, shifted
from arrow_split._builder_journal import journal_header, recover_journal
from arrow_split._builder_specs import KeySpecs
from arrow_split._builder_step import StepState
from arrow_split._codecs import (
    EncodeOptions,
    ScalarCodec,
    check_batch_global,
    check_per_sample_values,
    codec_for,
)
from arrow_split._codecs._growable import Growable
from arrow_split._convert import encode_columns, encode_train_data
from arrow_split._journal import (
    JournalDamage,
    JournalSync,
    OnDuplicate,
    Record,
    StepJournal,
    spec_to_json,
)
from arrow_split._journal_values import pack_value
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
    role_column,
)

__all__ = ["RolloutBatchBuilder"]


def _copy_value(value: object) -> object:
    """A private copy of a list or array given to :meth:`RolloutBatchBuilder.set_global`."""
    if isinstance(value, np.ndarray):
        return value.copy()
    return list(value) if isinstance(value, (list, tuple)) else value


class RolloutBatchBuilder(StepState):
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

    Journal. With ``journal=folder`` every accepted call is written to the step's journal file in
    ``folder`` before it returns (:mod:`arrow_split._journal` describes the files), so the
    samples of a call that returned survive a crash of the process: :meth:`recover` rebuilds the
    builder from the folder and appends go on. :meth:`finish` writes the step's dump
    ``step-<n>.arrow`` (the bytes of ``batch.write``) and starts step ``n + 1``'s journal.
    ``sync`` says when the OS is asked to write the journal through to the disk (which matters
    for a crash of the machine, not of the process): ``"call"`` after every call, ``"step"``
    at :meth:`finish` (the dump is synced), ``"os"`` never (the OS writes when it likes; the
    dump is still synced). A write that fails (a full disk) raises :class:`JournalError` and
    leaves the builder and the journal as they were.

    Identity. With ``identity=key`` (a per-sample key such as ``"sample_indices"``), a sample
    whose ``key`` value the builder holds already this step is a replay: ``on_duplicate="skip"``
    (the default) drops it (the call adds the other samples and returns how many it added),
    ``"error"`` raises :class:`DuplicateSampleError` and adds nothing. A loop that replays its
    last group after :meth:`recover` cannot duplicate samples.

    Parameters
    ----------
    specs
        :class:`ColumnSpec` declarations, as for :meth:`RolloutBatch.from_train_data`.
    allow_nonfinite, exact_floats
        As for :meth:`RolloutBatch.from_train_data`.
    journal
        A folder for the journal and the steps' dumps (created if missing), or ``None``.
    sync
        ``"call"``, ``"step"`` (the default) or ``"os"``: see Journal above.
    identity
        The per-sample key that identifies a sample, or ``None`` (no replay check).
    on_duplicate
        ``"skip"`` (the default) or ``"error"``: see Identity above.

    Raises
    ------
    JournalError
        ``journal`` holds an unfinished step with samples (resume it with :meth:`recover`), or
        cannot be written.

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

    __slots__ = ("_journal", "_keys", "_trust_objects")

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
        self._keys = KeySpecs(specs)
        self._options = EncodeOptions(
            allow_nonfinite=as_flag("allow_nonfinite", allow_nonfinite),
            exact_floats=as_flag("exact_floats", exact_floats),
        )
        self._identity = self._checked_identity(identity)
        self._on_duplicate = as_choice("on_duplicate", on_duplicate, OnDuplicate)
        self._seen: dict[object, int] = {}  # identity -> the sample that has it, this step
        self._trust_objects = True  # False while a step holds samples recovered untrusted
        sync = as_choice("sync", sync, JournalSync)  # type: ignore[assignment]
        folder = None if journal is None else as_path("journal", journal)
        self._journal = (
            None
            if folder is None
            else StepJournal.create(
                folder, journal_header(self._keys.declared, self._options, self._identity), sync
            )
        )
        self._columns: dict[str, Growable] = {}  # kept across steps: their capacity is reused
        self._sample_globals: dict[str, Growable] = {}
        self._sample_keys: tuple[str, ...] | None = None
        self._specs: dict[str, ColumnSpec] = {}  # this step's specs as used, in key order
        self._globals: dict[str, object] = {}
        self._length = 0

    def _checked_identity(self, identity: object) -> str | None:
        """The identity key, if it names a per-sample scalar column of ints or strings."""
        if identity is None:
            return None
        if not isinstance(identity, str):
            msg = f"`identity` must be a per-sample key (a str) or None, got {describe(identity)}"
            raise SchemaTypeError(msg)
        fix = (
            "pass a per-sample scalar key of ints or strings (such as `sample_indices`), "
            "declared with a ColumnSpec if it is not a known key, or `identity=None`"
        )
        try:
            spec = self._keys.spec(identity)
        except SchemaError as exc:
            msg = f"`identity` {identity!r:.40} is not a key the builder knows ({exc}); {fix}"
            raise SchemaError(msg) from None
        value_type = spec.value_type
        hashable = value_type is not None and (
            pa.types.is_integer(value_type)
            or pa.types.is_string(value_type)
            or pa.types.is_large_string(value_type)
        )
        one_value = spec.is_per_sample and isinstance(codec_for(spec), ScalarCodec)
        if not one_value or not hashable:
            msg = (
                f"`identity` {identity!r:.40} is a {spec.kind} key of {value_type}, which cannot "
                f"identify a sample; {fix}"
            )
            raise SchemaError(msg)
        return identity

    @property
    def salvaged(self) -> tuple[JournalDamage, ...]:
        """What ``recover(..., salvage=True)`` skipped: the damaged places of the journal."""
        return () if self._journal is None else tuple(self._journal.damage)

    def __len__(self) -> int:
        return self._length

    def __repr__(self) -> str:
        keys = ", ".join(self._specs) or "no keys yet"
        return f"RolloutBatchBuilder({self._length} samples; {keys})"

    def _per_sample(self, key: str) -> bool:
        return self._keys.per_sample(key)

    def append(self, sample: Mapping[str, Any]) -> int:
        """Validate one sample (a mapping key -> value) and add it to the batch.

        Returns
        -------
        int
            1, or 0 for a replayed sample skipped (see Identity in the class docstring).

        Raises
        ------
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            As :meth:`RolloutBatch.from_train_data` would, naming the sample's position in the
            batch; the builder is left unchanged.
        DuplicateSampleError
            With ``on_duplicate="error"``, a replayed sample.
        JournalError
            The journal cannot be written; the builder is left unchanged.
        """
        if not isinstance(sample, Mapping):
            msg = f"`sample` must be a mapping of key -> value, got {type(sample).__name__}"
            raise SchemaTypeError(msg)
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
        SchemaError, ColumnTypeError, RaggedLengthError, ValueRangeError
            As :meth:`RolloutBatch.from_train_data` would on the group, naming each sample's
            position in the batch; the builder is left unchanged.
        DuplicateSampleError, JournalError
            As :meth:`append`.
        """
        if not isinstance(train_data, Mapping):
            msg = (
                f"`train_data` must be a dict of per-sample lists, got {type(train_data).__name__}"
            )
            raise SchemaTypeError(msg)
        return self._add(train_data)

    def set_global(self, key: str, value: object) -> None:
        """Set a batch-global value (checked now; a per-sample one's length at :meth:`finish`).

        Raises
        ------
        SchemaError
            ``key`` is not a batch-global key, is given per sample already, or ``value`` does
            not have the key's documented shape.
        """
        spec = self._keys.spec(key)
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
            check_per_sample_values(spec, value, self._options.allow_nonfinite)
            value = _copy_value(value)  # its length is checked by `finish`
        else:
            value = check_batch_global(spec, value, 0, self._options.allow_nonfinite)
        self._journal_global(key, spec, value)
        self._set_global(key, spec, value)

    def _journal_global(self, key: str, spec: ColumnSpec, value: object) -> None:
        if self._journal is not None:
            meta = {"key": key, "spec": spec_to_json(spec), "value": pack_value(spec, value)}
            self._journal.write("global", meta, [])

    def _add(self, train_data: Mapping[str, Any]) -> int:
        base = self._length
        sample_keys = self._check_keys(train_data, base)
        try:
            first = self._sample_keys is None
            resolved = self._keys.resolve(train_data.keys(), self._specs, first)
            columns, used, batch_globals = encode_columns(train_data, resolved, self._options)
        except ArrowSplitError as error:
            raise shifted(error, base) from None
        checked = Group(columns, used, batch_globals, sample_keys)
        self._check_group(checked)
        self._check_identity(checked, base)
        group = self._first_seen(checked)
        if group is None:
            return 0
        if self._journal is not None:
            self._journal.write("group", *group_record(group))
        self._commit(group)
        return group.count

    def finish(self) -> RolloutBatch:
        """The batch of every sample appended; the builder is then empty, its capacity kept.

        With a journal, the batch is first written as the step's dump and the next step's
        journal is started (see Journal in the class docstring).

        Raises
        ------
        SchemaError, ColumnTypeError, ValueRangeError
            A rule on the whole batch is broken (a batch-global value given whole with the wrong
            number of values); the builder is left unchanged.
        JournalError
            The step's dump cannot be written; the builder and its journal are left unchanged.
        """
        if self._sample_keys is None:
            return self._finish_empty()
        batch_globals = self._checked_globals()
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
        record_batch = pa.RecordBatch.from_arrays(arrays, names=names)
        record_batch.validate(full=True)
        specs = dict(self._specs)
        batch = RolloutBatch(
            record_batch,
            specs,
            {k: batch_globals[k] for k in specs if k in batch_globals},
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
        declared = {spec.name: spec for spec in self._keys.declared}
        source = role_column(declared, "length_source") or role_column(
            KNOWN_COLUMNS, "length_source"
        )
        train_data: dict[str, object] = {str(source): [], **self._globals}
        record_batch, used, batch_globals = encode_train_data(
            train_data, self._keys.declared, self._options
        )
        batch = RolloutBatch(record_batch, used, batch_globals)
        self._close_step(batch)
        return batch

    def close(self) -> None:
        """Close the journal file and release the folder's lock, if any; the journal stays on disk.

        A closed builder with a journal refuses further calls with :class:`JournalError`.
        """
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
        """The builder of the unfinished step in the journal folder ``journal``, as it was.

        It holds exactly the samples (and batch-global values) of the calls that were written
        whole to the journal: every call that returned before a crash, and possibly the one
        the crash interrupted, whole or not at all (a torn tail is dropped). Its specs,
        options and identity key are the journal's; appends go on into the same journal.
        A folder whose last step was finished gives an empty builder for the next step.
        Every field of every record is checked with the library's rules; a record whose
        samples the builder holds already (by the identity key) adds nothing.

        Parameters
        ----------
        journal
            The journal folder.
        sync, on_duplicate
            As for the builder.
        salvage
            Damage other than a torn tail (a flipped byte, a record of another journal, a
            record repeated or out of order) is a :class:`JournalError` by default, and nothing
            is changed. With ``salvage=True`` every whole record of the journal is kept, in
            order; the damaged file is renamed ``step-<n>.journal.damaged`` (kept, never
            deleted), the records are written into a new journal, and :attr:`salvaged` lists
            the damaged places skipped.
        trust_objects
            Whether the recovered step's pickled per-sample objects may decode as any object
            (``True``) or as plain data only (``False``, the default: a journal is a file, read
            like a dump). It becomes the :attr:`RolloutBatch.trust_objects` of the batch this
            step's :meth:`finish` returns; later steps hold only this process's samples and
            are trusted.

        Raises
        ------
        JournalError
            ``journal`` is in use by another builder (the message names its process, host and
            since when), holds no journal (``errno.ENOENT``), a file that is not a journal, a
            journal of an unknown version, several unfinished steps, a damaged journal (without
            ``salvage``) or a record that breaks a rule of the library (naming the file, the
            record and its offset).
        OptionTypeError, OptionError
            An argument is of the wrong kind.
        """
        folder = as_path("journal", journal)
        sync = as_choice("sync", sync, JournalSync)  # type: ignore[assignment]
        salvage = as_flag("salvage", salvage)
        trust = as_flag("trust_objects", trust_objects)
        on_duplicate = as_choice("on_duplicate", on_duplicate, OnDuplicate)  # type: ignore[assignment]
        step_journal, records, arguments, _ = recover_journal(folder, sync, salvage)
        try:
            try:
                builder = cls(**arguments, on_duplicate=on_duplicate)
            except ArrowSplitError as exc:
                msg = f"`{folder}`: the journal's header does not build a builder: {exc}"
                raise JournalError(msg) from None
            builder._trust_objects = trust
            if step_journal.rewriting:
                step_journal.restart(
                    journal_header(builder._keys.declared, builder._options, builder._identity)
                )
                builder._journal = step_journal
            for record in records:
                builder._replay(record, folder)
        except BaseException:
            step_journal.close()
            raise
        builder._journal = step_journal
        return builder

    def _replay(self, record: Record, source: str) -> None:
        """Add what a journal record holds (written again when the journal is rewritten)."""
        replayed = self._replayed(record, source)
        if replayed is None:
            return
        if isinstance(replayed, Group):
            if self._journal is not None:
                self._journal.write("group", *group_record(replayed))
            self._commit(replayed)
        else:
            self._journal_global(*replayed)
            self._set_global(*replayed)
