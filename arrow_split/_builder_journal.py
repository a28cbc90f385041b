"""The builder's side of its journal: the header a journal opens with, read back at recovery.

A journal's ``open`` record holds what builds the same :class:`~arrow_split.RolloutBatchBuilder`
again (:func:`journal_header`); :func:`recover_journal` opens a folder's unfinished step, checks
the journal's version and gives the builder's arguments back, with the records to replay.
"""

from __future__ import annotations

import os
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

__all__ = ["journal_header", "recover_journal"]


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


def recover_journal(
    journal: str | os.PathLike[str], sync: JournalSync
) -> tuple[StepJournal, list[Record], dict[str, Any]]:
    """The unfinished step's journal in ``journal``, its records, and the builder's arguments.

    Raises
    ------
    JournalError
        As :meth:`arrow_split.RolloutBatchBuilder.recover`.
    """
    step_journal, records = StepJournal.recover(journal, sync)
    header = step_journal.header
    source = os.fspath(journal)
    if header.get("journal_version") != JOURNAL_VERSION:
        step_journal.close()
        msg = (
            f"`{source}` is a journal of version {header.get('journal_version')!r:.20}; "
            f"this arrow_split reads version {JOURNAL_VERSION!r}"
        )
        raise JournalError(msg)
    arguments = {
        "specs": [spec_from_json(item, source) for item in header["declared"]],
        "allow_nonfinite": bool(header["allow_nonfinite"]),
        "exact_floats": bool(header["exact_floats"]),
        "identity": header["identity"],
    }
    return step_journal, records, arguments
