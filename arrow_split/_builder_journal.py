"""The builder's side of its journal: the header a journal opens with, read back at recovery.

A journal's ``open`` record holds what builds the same :class:`~arrow_split.RolloutBatchBuilder`
again (:func:`journal_header`); :func:`recover_journal` opens a folder's unfinished step, parses
the header with the library's rules (a field of the wrong kind is a
:class:`~arrow_split.errors.JournalError`, never coerced: ``"False"`` is not a flag) and gives
the builder's arguments back, with the records to replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arrow_split._codecs import EncodeOptions
from arrow_split._journal import (
    JOURNAL_VERSION,
    JournalSync,
    Record,
    StepJournal,
    spec_from_json,
    spec_to_json,
)
from arrow_split.errors import JournalError
from arrow_split.schema import ColumnSpec

__all__ = ["journal_header", "parse_header", "recover_journal"]

_READABLE = ("1", JOURNAL_VERSION)


def journal_header(
    declared: Sequence[ColumnSpec], options: EncodeOptions, identity: str | None
) -> dict[str, object]:
    """What a journal's ``open`` record holds: enough to build this builder again."""
    from arrow_split import __version__

    return {
        "journal_version": JOURNAL_VERSION,
        "library_version": __version__,
        "declared": [spec_to_json(spec) for spec in declared],
        "allow_nonfinite": options.allow_nonfinite,
        "exact_floats": options.exact_floats,
        "identity": identity,
    }


def _field(header: dict[str, Any], name: str, kinds: tuple[type, ...], path: str) -> Any:
    value = header.get(name, KeyError)
    if (
        value is KeyError
        or not isinstance(value, kinds)
        or (int in kinds and bool not in kinds and isinstance(value, bool))
    ):
        wanted = " or ".join("null" if kind is type(None) else kind.__name__ for kind in kinds)
        got = "nothing" if value is KeyError else f"{type(value).__name__} {value!r:.40}"
        msg = f"`{path}`: the header's `{name}` must be {wanted}, got {got}"
        raise JournalError(msg)
    return value


def parse_header(header: dict[str, Any], path: str, step: int) -> dict[str, Any]:
    """The builder's arguments from a journal's ``open`` record, every field checked.

    Raises
    ------
    JournalError
        A field is missing or of the wrong kind, the version is unknown, or the step number
        is not the file's.
    """
    version = _field(header, "journal_version", (str,), path)
    if version not in _READABLE:
        msg = (
            f"`{path}` is a journal of version {version!r:.20}; this arrow_split reads "
            f"versions {', '.join(map(repr, _READABLE))}"
        )
        raise JournalError(msg)
    _field(header, "library_version", (str,), path)
    declared = _field(header, "declared", (list,), path)
    stored_step = _field(header, "step", (int,), path)
    if stored_step != step:
        msg = f"`{path}`: the header says step {stored_step}, the file's name step {step}"
        raise JournalError(msg)
    return {
        "specs": [spec_from_json(item, path) for item in declared],
        "allow_nonfinite": _field(header, "allow_nonfinite", (bool,), path),
        "exact_floats": _field(header, "exact_floats", (bool,), path),
        "identity": _field(header, "identity", (str, type(None)), path),
    }


def recover_journal(
    folder: str, sync: JournalSync, salvage: bool
) -> tuple[StepJournal, list[Record], dict[str, Any], int]:
    """The unfinished step's journal in ``folder``, its records, arguments and format version.

    Raises
    ------
    JournalError
        As :meth:`arrow_split.RolloutBatchBuilder.recover`.
    """
    return StepJournal.recover(folder, sync, salvage, parse_header)
