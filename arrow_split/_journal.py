"""The builder's journal: every accepted call on disk before it returns, recoverable after a crash.

Files are input: every frame, payload and field is checked; a torn tail is dropped, other damage
is a :class:`JournalError` (or salvaged). Layout and recovery rules: docs/journal.md. It sits
below the builder and trades in plain values (columns, specs, JSON).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from arrow_split._journal_content import parse_header
from arrow_split._journal_lock import FolderLock, journal_error
from arrow_split._journal_scan import FRAME, JournalDamage, Scan, scan_file, write_record
from arrow_split._record import Payload, Record, encode_record
from arrow_split.batch import RolloutBatch
from arrow_split.batch._dump import dump_rows
from arrow_split.errors import DumpError, JournalError

__all__ = ["JournalSync", "OnDuplicate", "StepJournal", "check_dumps", "journal_file"]

JournalSync = Literal["call", "step", "os"]
"""When a journal asks the OS to write through: each call, each step's ``finish``, or never."""

OnDuplicate = Literal["skip", "error"]
"""What an append of a sample whose identity the builder holds already does."""

_NAME = re.compile(r"^step-(\d{6,})\.(journal|arrow)$")


def journal_file(folder: str, step: int, suffix: str = "journal") -> str:
    """The journal file of step ``step`` (``suffix="arrow"``: its dump)."""
    return os.path.join(folder, f"step-{step:06d}.{suffix}")


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
            raise journal_error(f"cannot open the journal `{path}`", exc) from None
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
            raise journal_error(f"cannot append to the journal `{self.path}`", exc) from None
        self._end += FRAME.size + payload.size
        self.sequence += 1

    def flush(self) -> None:
        """Ask the OS to write the file through (an OSError passes)."""
        os.fsync(self._descriptor)

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


def _keep_aside(path: str, suffix: str) -> str:
    """A free name ``path.suffix`` (``.suffix.1``, ...) for ``path``'s file too; the name.

    A hard link (no byte copied), or a copy on a file system without them: ``path`` itself is
    left in place, so that no moment passes without the journal at its name.
    """
    target, number = f"{path}.{suffix}", 0
    while os.path.lexists(target):
        number += 1
        target = f"{path}.{suffix}.{number}"
    try:
        os.link(path, target)
    except OSError:
        try:
            shutil.copyfile(path, target)
        except OSError:
            _remove(target)
            raise
    return target


def check_dumps(folder: str, steps: set[int]) -> None:
    """Raise unless each step's dump reads as a dump holding as many samples as its journal.

    Its footer, schema and metadata are read, no column: a step is finished (its journal may
    go) only when its dump is one; any other file of its name is reported, nothing removed.
    """
    for step in sorted(steps):
        path, dump = journal_file(folder, step), journal_file(folder, step, "arrow")
        groups = [record for record in scan_file(path).records if record.kind == "group"]
        samples = sum(len(record.arrays[0]) for record in groups if record.arrays)
        try:
            rows = dump_rows(dump)
        except (DumpError, OSError) as exc:
            reason = f"it is no readable dump ({exc})"
        else:
            if rows == samples:
                continue
            reason = f"it holds {rows} samples, the journal {samples}"
        msg = f"step {step} has a journal and a dump that is not its batch: {reason}"
        fix = (
            f"if the dump is damaged, move it away to recover the step from its journal `{path}` "
            "with `RolloutBatchBuilder.recover`; if the dump is the step's batch, move the journal "
            "away"
        )
        raise JournalError(msg, path=dump, fix=fix)


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
        self, folder: str, step: int, header: dict[str, Any], sync: JournalSync, lock: FolderLock
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
        self._resume: tuple[int, bytes, int] | None = None  # its end, id, next sequence
        self._aside = ""  # the suffix it is kept with when its records are written anew
        self._finished: set[int] = set()  # finished steps' journals, removed once recovered

    @classmethod
    def create(cls, folder: str, header: dict[str, Any], sync: JournalSync) -> StepJournal:
        """A new journal in ``folder`` for the step after its last dump (a JournalError if not)."""
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError as exc:
            raise journal_error(f"cannot use `{folder}` as a journal folder", exc) from None
        lock = FolderLock(folder)
        try:
            journals, dumps = _steps(folder)
            check_dumps(folder, journals & dumps)
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
        """The unfinished step's journal in ``folder``, its records, its header's arguments.

        The folder is locked and read, nothing in it changed: :meth:`begin_recovery` and
        :meth:`end_recovery` write, once every record is replayed.
        """
        journals = _steps(folder)[0] if os.path.isdir(folder) else set()
        if not journals:
            fix = f"start one with `journal={folder!r}`"
            msg = "no rollout journal in this folder"
            raise JournalError(msg, errno=errno.ENOENT, path=folder, fix=fix)
        lock = FolderLock(folder)
        try:
            journals, dumps = _steps(folder)
            check_dumps(folder, journals & dumps)
            pending = sorted(journals - dumps)
            if len(pending) > 1:
                msg = f"`{folder}` holds the unfinished journals of steps {pending}; keep one"
                raise JournalError(msg)
            latest = pending[0] if pending else max(journals)
            path = journal_file(folder, latest)
            scan = scan_file(path)
            if scan.damage and not salvage:
                raise _damage_error(scan, folder)
            arguments = parse_header(scan.records[0].meta, path, latest)
            step = latest if pending else _next_step(folder, latest)  # finished: the next one
            step_journal = cls(folder, step, scan.records[0].meta, sync, lock)
            step_journal._finished = journals - {step}
            if pending:
                step_journal.source = path
                step_journal.damage = list(scan.damage)
                if scan.damage or scan.version != 2:  # its records written anew, the file kept
                    step_journal._aside = "damaged" if scan.damage else "v1"
                end = scan.size if scan.torn_at is None else scan.torn_at  # a torn tail dropped
                step_journal._resume = (end, scan.journal_id, scan.records[-1].sequence + 1)
        except BaseException:
            lock.release()
            raise
        return step_journal, scan.records[1:] if pending else [], arguments

    @property
    def rewriting(self) -> bool:
        """Whether the recovered records are written to a new journal (the old one kept aside)."""
        return bool(self._aside)

    def salvage(self, skipped: Sequence[JournalDamage]) -> None:
        """Skip whole records that break a rule: the journal is written anew without them."""
        self.damage.extend(skipped)
        self._aside = "damaged"

    def begin_recovery(self, header: dict[str, Any]) -> None:
        """Take the builder's header; a journal written anew starts as a new file beside it."""
        self.header = header
        if self._aside:
            self._begin()

    def end_recovery(self) -> None:
        """Go on with the recovered journal; remove the finished steps' journals.

        A journal written anew takes the old one's name (kept aside); else appends go on in the
        file (a torn tail cut), or in the next step's new journal if the last step was finished.
        """
        if self._aside:
            self.source = self._place(self._aside)
            self.damage = [dataclasses.replace(place, path=self.source) for place in self.damage]
        elif self._resume is not None:
            end, journal_id, sequence = self._resume
            self._writer = _Writer(self.source, end, self.sync, journal_id, sequence)
        else:
            self._start(self._finished)
        for step in self._finished:
            _remove(journal_file(self.folder, step))

    def _start(self, old: set[int]) -> None:
        """Write this step's journal, its header only (atomically); remove those of ``old``."""
        self._begin()
        try:
            self._place()
        except JournalError:
            self._discard()
            raise
        for step in old - {self.step}:
            _remove(journal_file(self.folder, step))

    def _begin(self) -> None:
        """Write this step's header to a new file beside its journal; appends go there."""
        path = journal_file(self.folder, self.step)
        temporary = f"{path}.tmp"
        journal_id = os.urandom(8)
        payload = encode_record("open", {**self.header, "step": self.step}, [])
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
            try:
                write_record(descriptor, journal_id, 0, payload)
            finally:
                os.close(descriptor)
        except OSError as exc:
            _remove(temporary)
            raise journal_error(f"cannot start the journal `{path}`", exc) from None
        try:
            self._writer = _Writer(temporary, FRAME.size + payload.size, self.sync, journal_id, 1)
        except JournalError:
            _remove(temporary)
            raise

    def _place(self, aside: str = "") -> str:
        """Sync the new file and rename it to the step's journal; the old one's name now.

        The old journal (kept as ``.<aside>`` first, if asked) stays whole at its name until
        the rename, atomic on POSIX: a failure or a crash before it leaves the folder's journal
        as it was (a ``.tmp`` file is never read as a journal).
        """
        writer = self._file()
        path = kept = journal_file(self.folder, self.step)
        try:
            if self.sync != "os":
                writer.flush()
            if aside:
                kept = _keep_aside(path, aside)
            os.replace(writer.path, path)
        except OSError as exc:
            if kept != path:
                _remove(kept)
            raise journal_error(f"cannot put the journal `{path}` in place", exc) from None
        writer.path = path
        return kept

    def _discard(self) -> None:
        """Close the file; a new one not yet in place is removed (the journal as it was)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            if writer.path != journal_file(self.folder, self.step):
                _remove(writer.path)

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
            raise journal_error(f"cannot write the step's dump in `{self.folder}`", exc) from None
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
            self._discard()
            self._failure = "closed by `close()`"
        self._lock.release()  # idempotent


def _next_step(folder: str, finished: int) -> int:
    """The step after ``finished``, past every step file in the folder (no dump overwritten)."""
    try:
        journals, dumps = _steps(folder)
    except OSError:
        journals, dumps = set(), set()
    return max({finished, *journals, *dumps}) + 1
