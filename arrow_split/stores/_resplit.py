"""A rank's own plan of a stored batch, and which stored rows it reads for it.

A batch is put before the trainers' ``dp_size`` is known (miles' store has none; elastic DP
changes it), so a rank plans for itself: from the stored index (every sample's total length,
the stored order, the adapter slots if any) it makes the plan every rank makes (`padded_plan`
of `arrow_split._split`, from the inputs of :func:`arrow_split.shard_for_rank`), then reads
its rows as sorted runs of the stored order and puts them back in plan order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arrow_split._codecs._ranges import runs

__all__ = ["RankRows", "index_parts", "rank_rows"]


def index_parts(
    values: np.ndarray, n: int, slotted: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The stored index (past its header) as total lengths, stored order and adapter slots."""
    lengths, order = values[:n].copy(), values[n : 2 * n].copy()
    keys = values[2 * n : 3 * n].copy() if slotted else None
    for part in (lengths, order, keys):
        if part is not None:
            part.flags.writeable = False
    return lengths, order, keys


@dataclass(frozen=True, slots=True)
class RankRows:
    """What a rank reads of the stored order, and how its rows come back in plan order."""

    starts: np.ndarray
    """The first stored position of each run read (sorted, disjoint)."""
    ends: np.ndarray
    """One past the last stored position of each run."""
    places: np.ndarray
    """Each plan row's place among the rows read; a padding row's is past the last."""
    moved: np.ndarray | None
    """Where padding copies the batch's last row and it is not read last: the rows read in the
    order that puts it last (``places`` count in that order); else ``None``."""


def rank_rows(order: np.ndarray, wanted: np.ndarray) -> RankRows:
    """The runs of stored rows that hold the plan rows ``wanted`` (padding rows at or past n)."""
    num_samples = len(order)
    position_of = np.empty(num_samples, dtype=np.int64)
    position_of[order] = np.arange(num_samples, dtype=np.int64)
    pads = wanted >= num_samples
    positions = position_of[np.minimum(wanted, num_samples - 1)]
    read = np.unique(positions)
    places = np.searchsorted(read, positions)
    moved = None
    if pads.any():
        last = int(np.searchsorted(read, position_of[num_samples - 1]))
        if last != len(read) - 1:  # the last row read last, as the padding rows copy it
            moved = np.concatenate([np.arange(last), np.arange(last + 1, len(read)), [last]])
            place_of = np.empty(len(read), dtype=np.int64)
            place_of[moved] = np.arange(len(read), dtype=np.int64)
            places = place_of[places]
        places[pads] = len(read)
    return RankRows(*runs(read), places, moved)
