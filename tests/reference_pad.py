"""A plain-Python reference of padding to the DP size, restating miles #2694 on the dict.

miles appends ``-len(samples) % dp_size`` deep copies of the last sample with ``index = -1``,
``rollout_id = None`` (so ``rollout_ids`` is -1, the index) and an all-zero loss mask; its
rollout mask sum is then 0. arrow_split adds ``is_padding`` and keeps ``raw_reward`` (a
statistic) to the real samples.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.reference_split import BATCH_GLOBAL_KEYS

__all__ = ["reference_pad_to_dp"]

_PAD_SCALARS = {"sample_indices": -1, "rollout_ids": -1, "rollout_mask_sums": 0}


def reference_pad_to_dp(data: dict[str, Any], dp_size: int) -> dict[str, Any]:
    """``data`` with the padding rows appended (a new dict; ``data`` is not changed)."""
    num_samples = len(data["tokens"])
    deficit = -num_samples % dp_size
    padded: dict[str, Any] = {}
    for key, values in data.items():
        if key in BATCH_GLOBAL_KEYS:
            padded[key] = copy.deepcopy(values)
            continue
        column = [copy.deepcopy(value) for value in values]
        for _ in range(deficit):
            donor = copy.deepcopy(values[num_samples - 1])
            if key == "loss_masks":
                donor = [0] * len(donor)
            elif key in _PAD_SCALARS:
                donor = _PAD_SCALARS[key]
            column.append(donor)
        padded[key] = column
    padded["is_padding"] = [False] * num_samples + [True] * deficit
    return padded
