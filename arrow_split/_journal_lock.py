"""A journal folder's lock: one builder at a time, held with ``flock``, never kept by a child.

The lock file names its holder as JSON (``pid``, ``host``, ``since``), a courtesy for the
messages (docs/journal.md, "Damage is reported, never repaired by deletion").
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import threading
import time
import weakref
from typing import NamedTuple

from arrow_split.errors import JournalError

__all__ = ["FolderLock", "Holder", "LOCK_NAME", "journal_error", "named_holder"]

LOCK_NAME = "journal.lock"


def journal_error(what: str, exc: OSError) -> JournalError:
    """The error of a failed write or open in a journal folder (a full disk, most often)."""
    msg = f"{what}: {exc.strerror or exc}; free space (or raise the file size limit) and retry"
    return JournalError(msg, errno=exc.errno)


class Holder(NamedTuple):
    """Who a lock file names."""

    pid: int
    host: str
    since: str  # UTC, in words


def named_holder(text: bytes) -> Holder | None:
    """The holder a lock file's bytes name, or ``None`` if they name none (a damaged file)."""
    try:
        holder = json.loads(text)
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(holder["since"])))
        return Holder(int(holder["pid"]), str(holder["host"]), since)
    except (ValueError, TypeError, KeyError, OverflowError, OSError):
        return None


class FolderLock:
    """The folder's lock file, held with ``flock`` until released (or the process ends).

    A ``flock`` belongs to the open file, which ``os.fork`` shares with the child: the child's
    copy of the descriptor is closed as it starts, so the lock ends with this process, never
    kept by a child of it.
    """

    def __init__(self, folder: str) -> None:
        path = os.path.join(folder, LOCK_NAME)
        with _FORKING:  # no fork between the open and the lock's registration
            try:
                descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            except OSError as exc:
                raise journal_error(f"cannot open the journal's lock file `{path}`", exc) from None
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
_HELD: weakref.WeakValueDictionary[int, FolderLock] = weakref.WeakValueDictionary()


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
        holder = named_holder(os.pread(descriptor, 4096, 0))
    except OSError:
        holder = None
    if holder is None:
        return "another process (its lock file does not name it)", None
    if holder.pid == os.getpid() and holder.host == socket.gethostname():  # this very process
        return (
            f"another builder of this process (pid {holder.pid}, since {holder.since}), not yet "
            "closed",
            str(holder.pid),
        )
    return f"process {holder.pid} on host {holder.host!r} since {holder.since}", str(holder.pid)
