"""Hypothesis strategies for rollout batches, built bottom-up: values -> samples -> train data.

Every column kind, empty and one-sample batches, ties and capped lengths; each column as Python
lists or numpy arrays. Needs hypothesis: ``pip install arrow-split[test]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from hypothesis import strategies as st
except ImportError:
    msg = (
        "arrow_split.testing.strategies needs hypothesis; install it with "
        "`pip install arrow-split[test]`"
    )
    raise ImportError(msg) from None

from arrow_split import RolloutBatch

__all__ = [
    "MOE_SHAPE",
    "float32s",
    "lengths_lists",
    "rollout_batches",
    "token_ids",
    "train_data",
]

float32s: st.SearchStrategy[float] = st.floats(width=32, allow_nan=False, allow_infinity=False)
"""Finite floats that are exactly float32 values."""

token_ids: st.SearchStrategy[int] = st.integers(min_value=0, max_value=2**31 - 1)
"""Token ids (non-negative int32)."""

MOE_SHAPE = (2, 3)
"""``(layers, top_k)`` of the generated ``rollout_routed_experts``."""

_SAMPLE_KEYS = (
    "tokens",
    "response_lengths",
    "loss_masks",
    "rollout_log_probs",
    "rewards",
    "truncated",
    "sample_indices",
    "prompt",
    "metadata",
    "weight_versions",
)


def lengths_lists(max_samples: int = 24, cap: int = 12) -> st.SearchStrategy[list[int]]:
    """Up to ``max_samples`` token counts in ``[1, cap]``: many ties and values at the cap."""
    length = st.one_of(st.integers(1, cap), st.just(cap), st.sampled_from([1, 2, cap]))
    return st.lists(length, min_size=0, max_size=max_samples)


@st.composite
def _sample(draw: st.DrawFn, total: int, *, tensors: bool) -> dict[str, Any]:
    response = draw(st.integers(0, total))
    sample: dict[str, Any] = {
        "tokens": draw(st.lists(token_ids, min_size=total, max_size=total)),
        "response_lengths": response,
        "loss_masks": draw(st.lists(st.integers(0, 1), min_size=response, max_size=response)),
        "rollout_log_probs": draw(st.lists(float32s, min_size=response, max_size=response)),
        "rewards": draw(st.floats(allow_nan=False, allow_infinity=False)),
        "truncated": draw(st.booleans()),
        "sample_indices": draw(st.integers(-(2**63), 2**63 - 1)),
        "prompt": draw(st.text(max_size=8)),
        "metadata": draw(st.one_of(st.none(), st.dictionaries(st.text(max_size=3), st.integers()))),
        "weight_versions": draw(st.lists(st.text(max_size=3), max_size=2)),
    }
    if tensors:
        shape = (total - 1, *MOE_SHAPE)
        size = int(np.prod(shape))
        flat = draw(st.lists(st.integers(0, 255), min_size=size, max_size=size))
        sample["rollout_routed_experts"] = np.asarray(flat, dtype=np.int32).reshape(shape)
    return sample


def _as_numpy(key: str, values: list[Any]) -> Any:
    """The same column as numpy: one array per sample, or one array for scalars."""
    if key in ("tokens", "loss_masks"):
        return [np.asarray(v, dtype=np.int64 if key == "tokens" else np.uint8) for v in values]
    if key == "rollout_log_probs":
        return [np.asarray(v, dtype=np.float32) for v in values]
    if key in ("response_lengths", "rewards", "sample_indices"):
        return np.asarray(values)
    return values


@st.composite
def train_data(
    draw: st.DrawFn, *, max_samples: int = 24, cap: int = 12, tensors: bool | None = None
) -> dict[str, Any]:
    """A classic train-data dict of every column kind (and the batch-global keys).

    Up to ``max_samples`` samples (0 too) of at most ``cap`` tokens; ``tensors``: whether
    ``rollout_routed_experts`` is there (``None`` draws it).
    """
    lengths = draw(lengths_lists(max_samples, cap))
    with_tensors = draw(st.booleans()) if tensors is None else tensors
    samples = [draw(_sample(total, tensors=with_tensors)) for total in lengths]
    keys = [*_SAMPLE_KEYS, "rollout_routed_experts"] if with_tensors else list(_SAMPLE_KEYS)
    data: dict[str, Any] = {}
    for key in keys:
        values = [sample[key] for sample in samples]
        data[key] = _as_numpy(key, values) if draw(st.booleans()) else values
    data["raw_reward"] = draw(st.lists(float32s, min_size=len(lengths), max_size=len(lengths)))
    data["dynamic_global_batch_size"] = draw(st.integers(1, 4096))
    data["step_adapter_names"] = draw(st.lists(st.text(max_size=4), max_size=3))
    return data


def rollout_batches(
    *, max_samples: int = 24, cap: int = 12, tensors: bool | None = None
) -> st.SearchStrategy[RolloutBatch]:
    """Rollout batches built from :func:`train_data` (same parameters)."""
    drawn = train_data(max_samples=max_samples, cap=cap, tensors=tensors)
    return drawn.map(RolloutBatch.from_train_data)
