"""The builder's journal: every accepted call on disk before it returns, recoverable after a crash.

Files are input: every frame, payload and field is checked; a torn tail is dropped, other damage
is a :class:`JournalError` (or salvaged). Layout and recovery rules: docs/journal.md. It sits
below the builder and trades in plain values (columns, specs, JSON).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from arrow_split._journal_content import parse_header
from arrow_split._journal_scan import FRAME, JournalDamage, Scan, scan_file, write_record
from arrow_split._record import Payload, Record, encode_record
from arrow_split.batch import RolloutBatch
from arrow_split.errors import JournalError

__all__ = ["JournalSync", "OnDuplicate", "StepJournal", "journal_file"]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")
_LOCK_NAME = "journal.lock"


def journal_file(folder: str, step: int, suffix: str = "journal") -> str:
    """The journal file of step ``step`` (``suffix="arrow"``: its dump)."""
    return os.path.join(folder, f"step-{step:06d}.{suffix}")


def _journal_error(what: str, exc: OSError) -> JournalError:
    msg = f"{what}: {exc.strerror or exc}; free space (or raise the file size limit) and retry"
    return JournalError(msg, errno=exc.errno)


class _Lock:
    """The folder's lock file, held with ``flock`` until released (or the process ends).

    A ``flock`` belongs to the open file, which ``os.fork`` shares with the child: the child's
    copy of the descriptor is closed as it starts, so the lock ends with this process, never
    kept by a child of it.
    """

    def __init__(self, folder: str) -> None:
        path = os.path.join(folder, _LOCK_NAME)
        with _FORKING:  # no fork between the open and the lock's registration
            try:
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise _journal_error(f"cannot open the journal's lock file `{path}`", exc) from None
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder, pid = _holder(descriptor)
                os.close(descriptor)
                msg = (
                    f"the journal folder `{folder}` is in use by {holder}; one builder at a time "
                    "writes a journal: close that builder (`close()`) or let its process end, "
                    "then retry"
                )
                raise JournalError(msg, errno=errno.EBUSY, got=pid) from None
            self.release = weakref.finalize(self, os.close, descriptor)  # idempotent
            _HELD[descriptor] = self
        named = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
        with contextlib.suppress(OSError):  # the holder's name is a courtesy
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, json.dumps(named).encode(), 0)


_FORKING = threading.Lock()
_HELD: weakref.WeakValueDictionary[int, _Lock] = weakref.WeakValueDictionary()


def _release_in_child() -> None:
    """In a forked child: close its copies of the locks' descriptors (the parent keeps its own)."""
    _FORKING.release()
    for descriptor, lock in list(_HELD.items()):
        if lock.release.detach() is not None:
            with contextlib.suppress(OSError):
                os.close(descriptor)
    _HELD.clear()


os.register_at_fork(
    before=_FORKING.acquire, after_in_parent=_FORKING.release, after_in_child=_release_in_child
)


def _holder(descriptor: int) -> tuple[str, str | None]:
    """Who holds the lock, in words, and its pid (``None`` if its lock file does not name it)."""
    try:
        holder = json.loads(os.pread(descriptor, 4096, 0))
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        pid, host = int(holder["pid"]), str(holder["host"])
        if pid == os.getpid() and host == socket.gethostname():  # this very process
            return (
                f"another builder of this process (pid {pid}, since {since}), not yet closed",
                str(pid),
            )
        return f"process {pid} on host {host!r} since {since}", str(pid)
    except (OSError, ValueError, TypeError, KeyError, OverflowError):
        return "another process (its lock file does not name it)", None


class _Writer:
    """Appends framed records to an open journal file; a failed write is cut back."""

    def __init__(
        self, path: str, end: int, sync: JournalSync, journal_id: bytes, sequence: int
    ) -> None:
        self.path, self.sync, self.journal_id, self.sequence = path, sync, journal_id, sequence
        self._end = end
        self._broken = False
        try:
            self._descriptor = os.open(path, os.O_WRONLY)
        except OSError as exc:
            raise _journal_error(f"cannot open the journal `{path}`", exc) from None
        self._cut_back()  # a torn tail's bytes, if any
        if self._broken:
            self.close()
            msg = f"cannot cut the torn tail of the journal `{path}`; check it is writable"
            raise JournalError(msg)

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
    """Rename ``path`` to a free ``path.suffix`` (``.suffix.1``, ...); the new name."""
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
        f"the journal is damaged here ({first.size} bytes: {first.reason}); {following} whole "
        f"record(s) follow the damage, {len(scan.damage)} damaged place(s) in all; nothing was "
        "changed"
    )
    fix = (
        f"recover every whole record with `RolloutBatchBuilder.recover({folder!r}, "
        "salvage=True)` (the damaged file is kept beside the new journal), or restore the file "
        "from a copy"
    )
    return JournalError(  # expected, got: the record or journal due there, the one found
        msg, path=scan.path, offset=first.offset, fix=fix, expected=first.expected, got=first.got
    )


class StepJournal:
    """The journal of the step being built: its folder, number, header, lock and open file."""

    def __init__(
        self, folder: str, step: int, header: dict[str, Any], sync: JournalSync, lock: _Lock
    ) -> None:
        self.folder = folder
        self.step = step
        self.header = header
        self.sync = sync
        self._lock = lock
        self._writer: _Writer | None = None
        self._failure = ""  # why the writer is missing after a failed start of a step
        self.damage: list[JournalDamage] = []  # what a salvage skipped
        self.source = ""  # the file the recovered records were read from (its name now)

    @classmethod
    def create(cls, folder: str, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``folder`` for the step after its last dump (a JournalError if not)."""
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise _journal_error(f"cannot use `{folder}` as a journal folder", exc) from None
        lock = _Lock(folder)
        try:
            journals, dumps = _steps(folder)
            for step in sorted(journals - dumps):
                path = journal_file(folder, step)
                scan = scan_file(path)
                if len(scan.records) > 1 or scan.damage:
                    fix = (
                        f"resume it with `RolloutBatchBuilder.recover({folder!r})`, or move the "
                        "file away"
                    )
                    raise JournalError("it holds an unfinished step", path=path, fix=fix)
            step_journal = cls(folder, max(dumps, default=-1) + 1, header, sync, lock)
            step_journal._start(journals)
        except BaseException:
            lock.release()
            raise
        return step_journal

    @classmethod
    def recover(
        cls, folder: str, sync: JournalSync, salvage: bool
    ) -> tuple[StepJournal, list[Record], dict[str, Any]]:
        """The unfinished step's journal in ``folder``, its records, its header's arguments."""
        journals = _steps(folder)[0] if os.path.isdir(folder) else set()
        if not journals:
            fix = f"start one with `journal={folder!r}`"
            msg = "no rollout journal in this folder"
            raise JournalError(msg, errno=errno.ENOENT, path=folder, fix=fix)
        lock = _Lock(folder)
        try:
            journals, dumps = _steps(folder)
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
            arguments = parse_header(header, path, latest)
            if not pending:  # the last step was finished: its dump is whole; start the next
                step_journal = cls(folder, _next_step(folder, latest), header, sync, lock)
                step_journal._start(journals)
                return step_journal, [], arguments
            step_journal = cls(folder, latest, header, sync, lock)
            step_journal.source = path
            if scan.damage or scan.version != 2:  # kept aside, its records written anew
                step_journal.damage = list(scan.damage)
                step_journal.source = _set_aside(path, "damaged" if scan.damage else "v1")
            else:
                end = scan.size if scan.torn_at is None else scan.torn_at  # a torn tail dropped
                sequence = scan.records[-1].sequence + 1
                step_journal._writer = _Writer(path, end, sync, scan.journal_id, sequence)
            for step in journals - {latest}:
                _remove(journal_file(folder, step))  # finished steps' journals
        except BaseException:
            lock.release()
            raise
        return step_journal, scan.records[1:], arguments

    @property
    def rewriting(self) -> bool:
        """Whether the recovered records are written to a new journal (no file is open)."""
        return self._writer is None

    def salvage(self, skipped: Sequence[JournalDamage]) -> None:
        """Skip whole records that break a rule: the file is set aside, the rest rewritten."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self.source = _set_aside(self.source, "damaged")
        self.damage.extend(skipped)

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
        """Write the step's dump (never overwritten), start the next journal, remove this one.

        Once the dump is written the step is done: a next journal that cannot start is reported
        by the next write.
        """
        writer = self._file()
        target = journal_file(self.folder, self.step, "arrow")
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
        self._lock.release()  # idempotent


def _next_step(folder: str, finished: int) -> int:
    """The step after ``finished``, past every step file in the folder (no dump overwritten)."""
    try:
        journals, dumps = _steps(folder)
    except OSError:
        journals, dumps = set(), set()
    return max({finished, *journals, *dumps}) + 1
