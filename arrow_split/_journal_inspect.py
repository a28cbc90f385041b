"""What a builder's journal holds, read without recovering it (``arrow-split inspect``).

After a crash the person on call wants to see a journal before ``recover()`` changes anything:
its steps, and for the unfinished one its groups, samples, columns, batch-global values and any
damage. Reading takes no lock and writes nothing; every record is checked as recovery checks it.
"""

from __future__ import annotations

import os
from collections import Counter

from arrow_split._args import as_path
from arrow_split._journal import _steps, check_dumps, journal_file
from arrow_split._journal_lock import LOCK_NAME, named_holder
from arrow_split._journal_scan import scan_file
from arrow_split.errors import JournalError

__all__ = ["describe_journal"]


def describe_journal(path: str | os.PathLike[str]) -> str:
    """A text report of a journal folder (every step file, the lock) or of one journal file.

    Nothing is locked or written: a journal a builder still writes can be read too.

    Raises
    ------
    OptionTypeError, OptionError
        ``path`` is not a path (a str or an os.PathLike), or is empty or holds a NUL.
    JournalError
        A file that is no journal, or cannot be read (a missing path too); a folder that holds
        no journal (no step file, no lock).
    """
    text = as_path("path", path)
    if not os.path.isdir(text):
        return _describe_file(text)
    try:
        journals, dumps = _steps(text)
    except OSError as exc:
        msg = f"cannot list the journal folder `{text}`: {exc}"
        raise JournalError(msg) from None
    if not journals and not dumps and not os.path.exists(os.path.join(text, LOCK_NAME)):
        msg = "a folder that holds no journal (no step file, no lock of a builder)"
        raise JournalError(msg, path=text, got="a folder without a journal")
    refused = {step: _refused_dump(text, step) for step in sorted(journals & dumps)}
    refused = {step: why for step, why in refused.items() if why}
    lines = [f"journal folder: {text}"]
    lines += [
        f"  step {step}: finished, dump {journal_file(text, step, 'arrow')}"
        for step in sorted(dumps)
        if step not in refused
    ]
    pending = sorted(journals - dumps)
    lines += [f"  step {step}: unfinished, journal {journal_file(text, step)}" for step in pending]
    lines += [f"  step {step}: {why}" for step, why in refused.items()]
    lines.append(f"  lock: {_lock_holder(os.path.join(text, LOCK_NAME))}")
    reports = [_describe_file(journal_file(text, step)) for step in pending]
    if refused:
        advice = "recover() refuses the folder: move away the dump (or the journal) named above"
    elif pending:
        advice = f'recover it with `RolloutBatchBuilder.recover("{text}")`'
    else:
        advice = "nothing to recover: every step has its dump"
    return "\n\n".join(["\n".join(lines), *reports, advice])


def _refused_dump(folder: str, step: int) -> str:
    """Why ``recover()`` refuses a step's journal left beside its dump (``""``: it does not)."""
    try:
        check_dumps(folder, {step})
    except JournalError as exc:
        return f"a journal beside a dump that recover() refuses: {exc}"
    return ""


def _lock_holder(path: str) -> str:
    """Who the lock file names (a courtesy: the lock itself is a ``flock``)."""
    try:
        with open(path, "rb") as file:
            holder = named_holder(file.read(4096))
    except FileNotFoundError:
        return "none (no lock file)"
    except OSError:
        holder = None
    if holder is None:
        return "a lock file that names no holder"
    return f"last taken by process {holder.pid} on host {holder.host!r}"


def _describe_file(path: str) -> str:
    scan = scan_file(path)
    kinds = Counter(record.kind for record in scan.records)
    columns: list[str] = []
    global_keys: list[str] = []
    samples = 0
    for record in scan.records:
        if record.kind == "group":
            samples += len(record.arrays[0]) if record.arrays else 0
            names = record.meta.get("names")
            if isinstance(names, list):
                columns += [n for n in names if isinstance(n, str) and n not in columns]
        elif record.kind == "global" and isinstance(record.meta.get("key"), str):
            global_keys.append(record.meta["key"])
    counted = ", ".join(f"{count} {kind}" for kind, count in kinds.items())
    lines = [
        f"journal: {path}",
        f"  format {scan.records[0].meta.get('journal_version')}, {scan.size} bytes, "
        f"{len(scan.records)} records ({counted})",
        f"  {kinds['group']} groups, {samples} samples",
        f"  columns: {', '.join(columns) or 'none'}",
        f"  batch-global values set: {', '.join(dict.fromkeys(global_keys)) or 'none'}",
    ]
    if scan.torn_at is not None:
        lines.append(
            f"  torn tail from byte {scan.torn_at} (a record cut by the crash: recover() drops it)"
        )
    if scan.damage:
        lines.append(f"  damage ({len(scan.damage)}; recover() refuses, salvage=True skips it):")
        lines += [f"    {damage}" for damage in scan.damage]
    else:
        lines.append("  damage: none")
    return "\n".join(lines)
