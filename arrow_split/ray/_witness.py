"""The witness ids a rank attaches to its rows: one per sample of the whole batch, checked.

:func:`with_witness_ids` adds them as the column with the ``witness`` role, to the whole batch
(delayed, before the take) or to a shard's rows (through the shard's ``partition``), after
checking that they count the samples of the whole batch, not of the rank's shard.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from arrow_split import KNOWN_COLUMNS, RaggedLengthError, RolloutBatch
from arrow_split.schema import role_column

__all__ = ["with_witness_ids"]


def with_witness_ids(
    batch: RolloutBatch,
    witness_ids: Sequence[int] | np.ndarray,
    partition: np.ndarray | None,
    who: str,
    num_samples: int | None = None,
) -> RolloutBatch:
    """``batch`` with its witness ids, after checking their count against the whole batch.

    ``batch`` is the whole batch (``partition`` None), or a shard's rows: ``partition`` maps
    them to the whole batch of ``num_samples`` samples, which ``witness_ids`` must cover.
    """
    key = role_column(KNOWN_COLUMNS, "witness")
    assert key is not None  # the known columns declare a witness column
    whole = batch.num_samples if num_samples is None else num_samples
    listed = isinstance(witness_ids, (list, tuple)) or np.ndim(witness_ids) == 1  # not a 0-d array
    count = (
        len(witness_ids) if listed and isinstance(witness_ids, (list, tuple, np.ndarray)) else None
    )
    if count != whole:
        got = "not a list" if count is None else f"{count} values"
        msg = (
            f"{who}: `witness_ids` has {got} but the whole batch has {whole} samples; "
            "pass one witness id per sample of the WHOLE batch, not of this rank's shard"
        )
        raise RaggedLengthError(msg)
    if partition is None:
        return batch.add_train_data({key: witness_ids})
    source = role_column(KNOWN_COLUMNS, "length_source")
    assert source is not None  # the known columns declare a length source
    checked = RolloutBatch.from_train_data({source: [[]] * whole, key: witness_ids})
    values = checked.record_batch.column(key).to_numpy()
    return batch.add_train_data({key: values[partition]})
