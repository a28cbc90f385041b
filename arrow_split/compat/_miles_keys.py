"""miles' sampling masks: two flat per-sample keys in miles, one column here.

miles (#2595, "transport rollout sampling support") ships the ids the sampler could pick at each
response token as two per-sample int32 lists: ``rollout_sampling_mask_ids`` (flat) and
``rollout_sampling_mask_offsets`` (``response_length + 1`` entries from 0, strictly increasing,
the last one ``len(ids)``). arrow_split stores them as one ``per_token_list`` column,
``rollout_sampling_masks`` (one list of ids per response token), which the core validates with
miles' rules (:class:`arrow_split.TokenLists`). :func:`from_miles_keys` makes that column of
miles' two keys; :func:`to_miles_keys` gives the two keys back, with miles' types (lists of ints).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import numpy as np

from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    RaggedLengthError,
    RolloutBatch,
    SchemaError,
    TokenLists,
)
from arrow_split.schema import role_column

__all__ = ["SAMPLING_MASK_KEYS", "from_miles_keys", "miles_key_note", "to_miles_keys"]

_IDS = "rollout_sampling_mask_ids"
_OFFSETS = "rollout_sampling_mask_offsets"
_COLUMN = str(role_column(KNOWN_COLUMNS, "sampling_mask"))
SAMPLING_MASK_KEYS = (_IDS, _OFFSETS)
"""miles' two per-sample keys of the sampling masks."""


def from_miles_keys(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """``data`` with miles' two sampling-mask keys as one ``rollout_sampling_masks`` column.

    The column takes the place of ``rollout_sampling_mask_ids``; ``data`` itself is not changed
    (a new dict is returned when it holds the keys).

    Raises
    ------
    SchemaError
        One of the two keys without the other, or both beside ``rollout_sampling_masks``.
    RaggedLengthError
        The two keys do not have one value per sample each.
    """
    present = [key for key in SAMPLING_MASK_KEYS if key in data]
    if not present:
        return data
    if len(present) == 1:
        missing = _OFFSETS if present[0] == _IDS else _IDS
        msg = (
            f"`{present[0]}` is given without `{missing}`; miles' sampling masks need both "
            "(flat ids and per-token offsets per sample), or neither"
        )
        raise SchemaError(msg)
    if _COLUMN in data:
        msg = f"give the sampling masks once: `{_COLUMN}`, or miles' `{_IDS}` and `{_OFFSETS}`"
        raise SchemaError(msg)
    ids, offsets = data[_IDS], data[_OFFSETS]
    for key, value in ((_IDS, ids), (_OFFSETS, offsets)):
        if not isinstance(value, (list, tuple)):
            msg = f"`{key}` must be a list with one list per sample, got {type(value).__name__}"
            raise SchemaError(msg)
    if len(ids) != len(offsets):
        msg = (
            f"`{_IDS}` has {len(ids)} samples but `{_OFFSETS}` has {len(offsets)}; both have one "
            "list per sample"
        )
        raise RaggedLengthError(msg)
    masks = [TokenLists(i, o) for i, o in zip(ids, offsets, strict=True)]
    converted: dict[str, Any] = {}
    for key, value in data.items():
        if key == _IDS:
            converted[_COLUMN] = masks
        elif key != _OFFSETS:
            converted[key] = value
    return converted


def miles_key_note(error: ArrowSplitError) -> ArrowSplitError:
    """``error`` saying which of miles' keys ``rollout_sampling_masks`` came from."""
    if f"`{_COLUMN}`" not in str(error):
        return error
    return type(error)(f"{error} (`{_COLUMN}` holds miles' `{_IDS}` and `{_OFFSETS}`)")


def to_miles_keys(shard: RolloutBatch, train_data: dict[str, Any]) -> dict[str, Any]:
    """``train_data`` with ``rollout_sampling_masks`` given back as miles' two keys, in place."""
    if _COLUMN not in train_data:
        return train_data
    (column,) = [c for c in shard.numeric_columns() if c.spec.name == _COLUMN]
    values = column.values
    sample_offsets = np.asarray(column.offsets, dtype=np.int64)
    token_offsets = np.asarray(column.token_offsets, dtype=np.int64)
    ids: list[list[int]] = []
    offsets: list[list[int]] = []
    for begin, end in itertools.pairwise(sample_offsets.tolist()):
        start = int(token_offsets[begin])
        ids.append(values[start : int(token_offsets[end])].tolist())
        offsets.append((token_offsets[begin : end + 1] - start).tolist())
    converted: dict[str, Any] = {}
    for key, value in train_data.items():
        if key == _COLUMN:
            converted[_IDS], converted[_OFFSETS] = ids, offsets
        else:
            converted[key] = value
    train_data.clear()
    train_data.update(converted)
    return train_data
