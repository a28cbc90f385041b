"""The builder's journal: every accepted call on disk as it is accepted, recoverable after a crash.

A journal is a folder. Step ``n`` of a :class:`~arrow_split.RolloutBatchBuilder` writes
``step-<n>.journal`` (``n`` zero-padded to six digits) while it is being built, and
:meth:`~arrow_split.RolloutBatchBuilder.finish` closes it into the step's dump
``step-<n>.arrow`` (``batch.write``), then starts the next step's journal and removes the
finished one. A dump is never overwritten: the next step takes the number after every step
file in the folder, and a ``finish`` whose dump file exists already raises
:class:`~arrow_split.errors.JournalError`. The folder's lock file ``journal.lock`` is held
(``flock``) by the one builder that uses the folder, from its creation (or recovery) until its
``close()``, its garbage collection or the end of its process; it names the holder (pid, host,
time) for the error a second builder gets.

File format (version ``"2"``). A journal file is a sequence of records; each record is a frame
of 44 bytes, ``magic (b"ASJ2") | journal id (8 random bytes, the same in every record of a
file) | sequence number (uint64: 0 for the ``open`` record, then 1, 2, ...) | payload length
(uint64) | XXH3-64 of the payload (uint64) | the low 32 bits of the XXH3-64 of the frame's
first 36 bytes (uint32)`` (all little-endian), followed by its payload, one complete Arrow IPC
*stream* (a schema message, one record batch, the end-of-stream marker). Every record carries its
own schema, so a column whose Arrow type changes during a step (a narrow id column that widens, a
``string`` column that falls back to ``pickle``) needs nothing special: the builder replays the
records in order and re-encodes as it did when they were appended. The schema's metadata key
``arrow_split.journal`` holds the record's JSON: its kind and what the columns (named ``c0``,
``c1``, ...) are.

- ``open`` (first, written to a temporary file and renamed, so a journal file always has it):
  the journal and library versions, the step number, the declared specs, the encode options and
  the identity column.
- ``group``: one accepted ``append``/``extend``: its per-sample columns as encoded, the
  per-sample batch-global values (float64 columns), the specs as used, the group's other
  batch-global values and the step's per-sample keys.
- ``global``: one accepted ``set_global``: the key, its spec and its value.

Specs are stored as in a dump's metadata (:mod:`arrow_split._dump_meta`); batch-global values as
tagged JSON (:mod:`arrow_split._journal_values`), never a pickle. A record is written whole
before the call returns, from the columns' own buffers (gathered writes: the IPC stream is never
copied into one buffer first).

Reading (:func:`arrow_split._journal_records.scan_file`) checks every frame and payload. The
only damage a crash makes is a *torn tail*: the last record cut short (its frame's payload runs
past the end of the file, or the file ends inside a frame that agrees with the record due). A
torn tail is dropped, and the file cut back to its last whole record before appends resume.
Anything else (a checksum that fails with whole records after it, a record of another journal,
a sequence number repeated, missing or out of order) is corruption: recovery raises
:class:`~arrow_split.errors.JournalError` naming the file, the offset and how many whole records
follow, and changes nothing; ``recover(..., salvage=True)`` keeps every whole record of the
journal in sequence order, renames the damaged file ``step-<n>.journal.damaged`` (nothing is
deleted) and writes the records into a fresh journal. A format-1 journal is read the same way
(its records have no sequence numbers) and likewise moved aside (``.v1``) and rewritten in
format 2. A write that fails (a full disk: ``ENOSPC``, a file size limit: ``EFBIG``) cuts the
builder's own unacknowledged bytes back and raises :class:`~arrow_split.errors.JournalError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from arrow_split._journal_records import (
    FRAME,
    JournalDamage,
    Payload,
    Record,
    Scan,
    encode_record,
    scan_file,
    spec_from_json,
    spec_to_json,
    write_record,
)
from arrow_split.batch import RolloutBatch
from arrow_split.errors import JournalError

__all__ = [
    "JOURNAL_VERSION",
    "JournalDamage",
    "JournalSync",
    "OnDuplicate",
    "Record",
    "StepJournal",
    "dump_file",
    "journal_file",
    "spec_from_json",
    "spec_to_json",
]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

JOURNAL_VERSION = "2"
_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")
LOCK_NAME = "journal.lock"

HeaderParser = Callable[[dict[str, Any], str, int], dict[str, Any]]
"""Parses a journal's header (its JSON, the file, the step) into the builder's arguments."""


def journal_file(folder: str, step: int) -> str:
    """The journal file of step ``step``."""
    return os.path.join(folder, f"step-{step:06d}.journal")


def dump_file(folder: str, step: int) -> str:
    """The dump that step ``step``'s :meth:`finish` writes."""
    return os.path.join(folder, f"step-{step:06d}.arrow")


def _journal_error(what: str, exc: OSError) -> JournalError:
    msg = f"{what}: {exc.strerror or exc}; free space (or raise the file size limit) and retry"
    return JournalError(msg, errno=exc.errno)


class _Lock:
    """The folder's lock file, held with ``flock`` until :meth:`release` (or the process ends)."""

    def __init__(self, folder: str) -> None:
        path = os.path.join(folder, LOCK_NAME)
        try:
            descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            raise _journal_error(f"cannot open the journal's lock file `{path}`", exc) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(descriptor)
            os.close(descriptor)
            msg = (
                f"the journal folder `{folder}` is in use by {holder}; one builder at a time "
                "writes a journal: close that builder (`close()`) or let its process end, "
                "then retry"
            )
            raise JournalError(msg, errno=errno.EBUSY) from None
        holder_text = json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        ).encode()
        with contextlib.suppress(OSError):  # the holder's name is a courtesy
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, holder_text, 0)
        self._release = weakref.finalize(self, os.close, descriptor)

    def release(self) -> None:
        self._release()


def _holder(descriptor: int) -> str:
    """The lock's holder as its lock file names it."""
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        return f"process {int(holder['pid'])} on host {str(holder['host'])!r} since {since}"
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        return "another process (its lock file does not name it)"


class _Writer:
    """Appends framed records to an open journal file; a failed write is cut back."""

    def __init__(
        self, path: str, end: int, sync: JournalSync, journal_id: bytes, sequence: int
    ) -> None:
        self.path = path
        self.sync = sync
        self.journal_id = journal_id
        self.sequence = sequence
        self._end = end
        self._broken = False
        self._descriptor = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(self._descriptor, end)  # a torn tail's bytes, if any
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
            write_record(self._descriptor, self.journal_id, self.sequence, payload)
            if self.sync == "call":
                os.fsync(self._descriptor)
        except OSError as exc:
            self._cut_back()
            raise _journal_error(f"cannot append to the journal `{self.path}`", exc) from None
        self._end += FRAME.size + payload.size
        self.sequence += 1

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


def _set_aside(path: str, suffix: str) -> str:
    """Rename ``path`` to a free ``path.suffix`` (``.suffix.1``, ...); return the new name."""
    target, number = f"{path}.{suffix}", 0
    while os.path.exists(target):
        number += 1
        target = f"{path}.{suffix}.{number}"
    os.rename(path, target)
    return target


def _damage_error(scan: Scan, folder: str) -> JournalError:
    """The error for a damaged journal: where, what, and how many whole records follow."""
    first = scan.damage[0]
    following = sum(record.offset > first.offset for record in scan.records)
    msg = (
        f"the journal `{scan.path}` is damaged at offset {first.offset} ({first.size} bytes: "
        f"{first.reason}); {following} whole record(s) follow the damage, "
        f"{len(scan.damage)} damaged place(s) in all; nothing was changed. Recover every whole "
        f"record with `RolloutBatchBuilder.recover({folder!r}, salvage=True)` (the damaged file "
        "is kept beside the new journal), or restore the file from a copy"
    )
    return JournalError(msg)


class StepJournal:
    """The journal of the step being built: its folder, number, header, lock and open file."""

    def __init__(
        self, folder: str, step: int, header: dict[str, Any], sync: JournalSync, lock: _Lock
    ) -> None:
        self.folder = folder
        self.step = step
        self.header = header
        self.sync = sync
        self._lock: _Lock | None = lock
        self._writer: _Writer | None = None
        self._failure = ""  # why the writer is missing after a failed start of a step
        self.damage: list[JournalDamage] = []  # what a salvage skipped
        self.rewriting = False  # records replayed are written again (a salvage, a format 1)

    @classmethod
    def create(cls, folder: str, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``folder`` (created if missing), for the step after its last dump.

        Raises
        ------
        JournalError
            The folder is in use by another builder, holds a step's journal with samples and no
            dump (recover it instead), a damaged journal, or cannot be written.
        """
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _journal_error(f"cannot use `{folder}` as a journal folder", exc) from None
        lock = _Lock(folder)
        try:
            journals, dumps = _steps(folder)
            for step in sorted(journals - dumps):
                scan = scan_file(journal_file(folder, step))
                if len(scan.records) > 1 or scan.damage:
                    msg = (
                        f"`{journal_file(folder, step)}` holds an unfinished step; resume it with "
                        f"`RolloutBatchBuilder.recover({folder!r})`, or move the file away"
                    )
                    raise JournalError(msg)
            step_journal = cls(folder, max(dumps, default=-1) + 1, header, sync, lock)
            step_journal._start(journals)
        except BaseException:
            lock.release()
            raise
        return step_journal

    @classmethod
    def recover(
        cls, folder: str, sync: JournalSync, salvage: bool, parse: HeaderParser
    ) -> tuple[StepJournal, list[Record], dict[str, Any], int]:
        """The unfinished step's journal in ``folder`` and its records after the header.

        Raises
        ------
        JournalError
            The folder is in use, holds no journal (``errno.ENOENT``), several unfinished
            journals, a file that is not a journal, or a damaged journal (without ``salvage``).
        """
        journals = _steps(folder)[0] if os.path.isdir(folder) else set()
        if not journals:
            msg = f"no rollout journal in `{folder}`; start one with `journal={folder!r}`"
            raise JournalError(msg, errno=errno.ENOENT)
        lock = _Lock(folder)
        try:
            return cls._recover(folder, (sync, salvage, parse), lock, *_steps(folder))
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _recover(
        cls,
        folder: str,
        options: tuple[JournalSync, bool, HeaderParser],
        lock: _Lock,
        journals: set[int],
        dumps: set[int],
    ) -> tuple[StepJournal, list[Record], dict[str, Any], int]:
        sync, salvage, parse = options
        pending = sorted(journals - dumps)
        if len(pending) > 1:
            msg = f"`{folder}` holds the unfinished journals of steps {pending}; keep one"
            raise JournalError(msg)
        latest = pending[0] if pending else max(journals)
        path = journal_file(folder, latest)
        scan = scan_file(path)
        if scan.damage and not salvage:
            raise _damage_error(scan, folder)
        header = scan.records[0].meta
        arguments = parse(header, path, latest)
        if not pending:  # the last step was finished: its dump is whole; start the next
            step_journal = cls(folder, _next_step(folder, latest), header, sync, lock)
            step_journal._start(journals)
            return step_journal, [], arguments, scan.version
        step_journal = cls(folder, latest, header, sync, lock)
        if scan.damage or scan.version != 2:
            step_journal.damage = list(scan.damage)
            step_journal.rewriting = True
            step_journal.header = {}  # the builder writes its own header (format 2)
            _set_aside(path, "damaged" if scan.damage else f"v{scan.version}")
        else:
            last = scan.records[-1].sequence
            step_journal._writer = _Writer(path, scan.end, sync, scan.journal_id, last + 1)
        for step in journals - {latest}:
            _remove(journal_file(folder, step))  # finished steps' journals
        return step_journal, scan.records[1:], arguments, scan.version

    def restart(self, header: dict[str, Any]) -> None:
        """Write the header of a journal being rewritten (a salvage, a format-1 journal)."""
        self.header = header
        self._start(set())

    def _start(self, old: set[int]) -> None:
        """Write this step's header (atomically) and remove the journals in ``old``."""
        path = journal_file(self.folder, self.step)
        temporary = f"{path}.tmp"
        journal_id = os.urandom(8)
        payload = encode_record("open", {**self.header, "step": self.step}, [])
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                write_record(descriptor, journal_id, 0, payload)
                if self.sync != "os":
                    os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(temporary, path)
            self._writer = _Writer(path, FRAME.size + payload.size, self.sync, journal_id, 1)
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
            The dump exists already (it is never overwritten) or cannot be written; this step's
            journal is kept whole.
        """
        writer = self._file()
        target = dump_file(self.folder, self.step)
        if os.path.lexists(target):
            msg = (
                f"the step's dump `{target}` exists already; a dump is never overwritten: move "
                f"it away and call `finish()` again (this step's journal `{writer.path}` is kept)"
            )
            raise JournalError(msg, errno=errno.EEXIST)
        try:
            batch.write(target)
        except OSError as exc:
            raise _journal_error(f"cannot write the step's dump in `{self.folder}`", exc) from None
        writer.close()
        self._writer = None
        finished = self.step
        self.step = _next_step(self.folder, finished)
        try:
            self._start({finished})
        except JournalError as error:
            self._failure = str(error)

    def close(self) -> None:
        """Close the file and release the folder (the journal stays on disk, recoverable)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._failure = "closed by `close()`"
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def _next_step(folder: str, finished: int) -> int:
    """The step after ``finished``, past every step file in the folder (no dump overwritten)."""
    try:
        journals, dumps = _steps(folder)
    except OSError:
        journals, dumps = set(), set()
    return max({finished, *journals, *dumps}) + 1
