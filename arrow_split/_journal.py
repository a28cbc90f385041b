"""The builder's journal: every accepted call on disk as it is accepted, recoverable after a crash.

A journal is a folder. Step ``n`` of a :class:`~arrow_split.RolloutBatchBuilder` writes
``step-<n>.journal`` (``n`` zero-padded to six digits) while it is being built, and
:meth:`~arrow_split.RolloutBatchBuilder.finish` closes it into the step's dump
``step-<n>.arrow`` (``batch.write``), then starts ``step-<n+1>.journal`` and removes the
finished journal.

File format (version ``"1"``). A journal file is a sequence of records; each record is a frame
``magic (b"ASJ1") | payload length (uint64, little-endian) | CRC-32 of the payload (uint32)``
followed by its payload, one complete Arrow IPC *stream* (a schema message, one record batch,
the end-of-stream marker). Every record carries its own schema, so a column whose Arrow type
changes during a step (a narrow id column that widens, a ``string`` column that falls back to
``pickle``) needs nothing special: the builder replays the records in order and re-encodes as it
did when they were appended. The schema's metadata key ``arrow_split.journal`` holds the record's
JSON: its kind and what the columns (named ``c0``, ``c1``, ...) are.

- ``open`` (first, written to a temporary file and renamed, so a journal file always has it):
  the journal and library versions, the step number, the declared specs, the encode options and
  the identity column.
- ``group``: one accepted ``append``/``extend``: its per-sample columns as encoded, the
  per-sample batch-global values (float64 columns), the specs as used, the group's other
  batch-global values and the step's per-sample keys.
- ``global``: one accepted ``set_global``: the key, its spec and its value.

Specs are stored as in a dump's metadata (:mod:`arrow_split._dump_meta`); batch-global values as
a base64 pickle (protocol 5). A record is written whole before the call returns, from the
columns' own buffers (gathered writes: the IPC stream is never copied into one buffer first).
Reading stops at the first frame that is short, has a wrong magic or CRC, or does not
parse: a record torn by a crash is dropped whole, and the file is cut back to its last whole
record before appends resume (:mod:`arrow_split._journal_records` reads and writes records).
A write that fails (a full disk: ``ENOSPC``, a file size limit: ``EFBIG``) cuts the file back in
the same way and raises :class:`~arrow_split.errors.JournalError`.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from arrow_split._journal_records import (
    FRAME,
    Payload,
    Record,
    encode_record,
    pack_value,
    read_records,
    spec_from_json,
    spec_to_json,
    unpack_value,
    write_record,
)
from arrow_split.batch import RolloutBatch
from arrow_split.errors import JournalError

__all__ = [
    "JOURNAL_VERSION",
    "JournalSync",
    "OnDuplicate",
    "Record",
    "StepJournal",
    "dump_file",
    "journal_file",
    "pack_value",
    "read_records",
    "spec_from_json",
    "spec_to_json",
    "unpack_value",
]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

JOURNAL_VERSION = "1"
_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")

PathLike = str | os.PathLike[str]


def journal_file(folder: str, step: int) -> str:
    """The journal file of step ``step``."""
    return os.path.join(folder, f"step-{step:06d}.journal")


def dump_file(folder: str, step: int) -> str:
    """The dump that step ``step``'s :meth:`finish` writes."""
    return os.path.join(folder, f"step-{step:06d}.arrow")


def _journal_error(what: str, exc: OSError) -> JournalError:
    msg = f"{what}: {exc.strerror or exc}; free space (or raise the file size limit) and retry"
    return JournalError(msg, errno=exc.errno)


class _Writer:
    """Appends framed records to an open journal file; a failed write is cut back."""

    def __init__(self, path: str, end: int, sync: JournalSync) -> None:
        self.path = path
        self.sync = sync
        self._end = end
        self._broken = False
        self._descriptor = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(self._descriptor, end)  # a torn record's bytes, if any
            os.lseek(self._descriptor, end, os.SEEK_SET)
        except OSError:
            os.close(self._descriptor)
            raise

    def write(self, payload: Payload) -> None:
        if self._broken:
            msg = (
                f"`{self.path}` could not be cut back after a failed write; recover the "
                "builder with `RolloutBatchBuilder.recover`"
            )
            raise JournalError(msg)
        try:
            write_record(self._descriptor, payload)
            if self.sync == "call":
                os.fsync(self._descriptor)
        except OSError as exc:
            self._cut_back()
            raise _journal_error(f"cannot append to the journal `{self.path}`", exc) from None
        self._end += FRAME.size + payload.size

    def _cut_back(self) -> None:
        try:
            os.ftruncate(self._descriptor, self._end)
            os.lseek(self._descriptor, self._end, os.SEEK_SET)
        except OSError:
            self._broken = True  # recovery still drops the torn record

    def close(self) -> None:
        if self._descriptor >= 0:
            os.close(self._descriptor)
            self._descriptor = -1


def _steps(folder: str) -> tuple[set[int], set[int]]:
    """The step numbers of the folder's journals and of its dumps."""
    journals: set[int] = set()
    dumps: set[int] = set()
    for name in os.listdir(folder):
        match = _NAME.match(name)
        if match:
            (journals if match.group(2) == "journal" else dumps).add(int(match.group(1)))
    return journals, dumps


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class StepJournal:
    """The journal of the step being built: its folder, number, header and open file."""

    def __init__(self, folder: str, step: int, header: dict[str, Any], sync: JournalSync) -> None:
        self.folder = folder
        self.step = step
        self.header = header
        self.sync = sync
        self._writer: _Writer | None = None
        self._failure = ""  # why the writer is missing after a failed start of a step

    @classmethod
    def create(cls, journal: PathLike, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``journal`` (created if missing), for the step after its last dump.

        Raises
        ------
        JournalError
            The folder holds a step's journal with samples and no dump: recover it instead.
        """
        folder = os.fspath(journal)
        try:
            os.makedirs(folder, exist_ok=True)
            journals, dumps = _steps(folder)
        except OSError as exc:
            raise _journal_error(f"cannot use `{folder}` as a journal folder", exc) from None
        for step in sorted(journals - dumps):
            records, _ = read_records(journal_file(folder, step))
            if len(records) > 1:
                msg = (
                    f"`{journal_file(folder, step)}` holds an unfinished step; resume it with "
                    f"`RolloutBatchBuilder.recover({folder!r})`, or remove the file"
                )
                raise JournalError(msg)
        step_journal = cls(folder, max(dumps, default=-1) + 1, header, sync)
        step_journal._start(journals)
        return step_journal

    @classmethod
    def recover(cls, journal: PathLike, sync: JournalSync) -> tuple[StepJournal, list[Record]]:
        """The unfinished step's journal in ``journal`` and its records after the header.

        Raises
        ------
        JournalError
            The folder holds no journal (``errno.ENOENT``), several unfinished journals, or a
            file that is not a journal.
        """
        folder = os.fspath(journal)
        journals, dumps = _steps(folder) if os.path.isdir(folder) else (set(), set())
        if not journals:
            msg = f"no rollout journal in `{folder}`; start one with `journal={folder!r}`"
            raise JournalError(msg, errno=errno.ENOENT)
        pending = sorted(journals - dumps)
        if len(pending) > 1:
            msg = f"`{folder}` holds the unfinished journals of steps {pending}; keep one"
            raise JournalError(msg)
        latest = pending[0] if pending else max(journals)
        records, end = read_records(journal_file(folder, latest))
        header = records[0].meta
        if not pending:  # the last step was finished: its dump is whole; start the next
            step_journal = cls(folder, max(dumps) + 1, header, sync)
            step_journal._start(journals)
            return step_journal, []
        step_journal = cls(folder, latest, header, sync)
        step_journal._writer = _Writer(journal_file(folder, latest), end, sync)
        for step in journals - {latest}:
            _remove(journal_file(folder, step))  # finished steps' journals
        return step_journal, records[1:]

    def _start(self, old: set[int]) -> None:
        """Write this step's header (atomically) and remove the journals in ``old``."""
        path = journal_file(self.folder, self.step)
        temporary = f"{path}.tmp"
        payload = encode_record("open", {**self.header, "step": self.step}, [])
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                write_record(descriptor, payload)
                if self.sync != "os":
                    os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(temporary, path)
            self._writer = _Writer(path, FRAME.size + payload.size, self.sync)
        except OSError as exc:
            _remove(temporary)
            raise _journal_error(f"cannot start the journal `{path}`", exc) from None
        for step in old - {self.step}:
            _remove(journal_file(self.folder, step))

    def _file(self) -> _Writer:
        if self._writer is None:
            msg = (
                f"the journal of step {self.step} in `{self.folder}` is not open "
                f"({self._failure or 'closed'}); resume with "
                f"`RolloutBatchBuilder.recover({self.folder!r})`"
            )
            raise JournalError(msg)
        return self._writer

    def write(self, kind: str, meta: Mapping[str, object], arrays: Sequence[pa.Array]) -> None:
        """Append one record; on return it is in the file (synced if ``sync="call"``)."""
        self._file().write(encode_record(kind, meta, arrays))

    def finish_step(self, batch: RolloutBatch) -> None:
        """Write the step's dump, start the next step's journal, remove this one's.

        Once the dump is written the step is done: if the next step's journal cannot be started,
        the next call that writes to the journal raises :class:`JournalError` saying so, and
        :meth:`~arrow_split.RolloutBatchBuilder.recover` starts it.

        Raises
        ------
        JournalError
            The dump cannot be written; this step's journal is kept whole.
        """
        writer = self._file()
        try:
            batch.write(dump_file(self.folder, self.step))
        except OSError as exc:
            raise _journal_error(f"cannot write the step's dump in `{self.folder}`", exc) from None
        writer.close()
        self._writer = None
        finished = self.step
        self.step += 1
        try:
            self._start({finished})
        except JournalError as error:
            self._failure = str(error)

    def close(self) -> None:
        """Close the file (the journal stays on disk, recoverable)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._failure = "closed by `close()`"
