"""Seeded rollout batches shaped like RL training data, in the classic and the numpy form.

Every sample has a prompt of 64..512 tokens and a long-tailed response: exponential around a mean,
capped, so that many samples hit the cap (and are flagged ``truncated``). A sample carries

- ``tokens``: prompt + response token ids;
- ``response_lengths``; ``loss_masks`` (0/1 per response token);
- ``rollout_log_probs``: one float32 value per response token (given as Python floats in the
  classic form, each exactly a float32, as a float32 tensor would hand them out);
- ``rewards``, ``truncated``, ``sample_indices``;
- the batch-global ``raw_reward`` (one float per sample of the whole batch);
- with ``moe=True``, ``rollout_routed_experts``: an int32 array ``[len(tokens) - 1, layers, top_k]``
  per sample (a numpy array in both forms, as rollout engines return it).

:func:`generate` returns both forms of the same values: :attr:`Workload.lists` (the classic dict
of Python lists) and :attr:`Workload.arrays` (one numpy array per sample, one array per scalar key).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

__all__ = [
    "MOE_LAYERS",
    "MOE_TOP_K",
    "WORKLOADS",
    "Workload",
    "WorkloadSpec",
    "generate",
]

PROMPT_TOKENS = (64, 512)
VOCAB_SIZE = 151_936
NUM_EXPERTS = 128
MOE_LAYERS = 8
MOE_TOP_K = 4
MASKED_FRACTION = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """The size and length distribution of one workload."""

    name: str
    num_samples: int
    response_mean: float
    response_cap: int
    dp_sizes: tuple[int, ...]


WORKLOADS: dict[str, WorkloadSpec] = {
    spec.name: spec
    for spec in (
        WorkloadSpec("tiny", 32, 96.0, 192, (2, 4, 8)),
        WorkloadSpec("small", 256, 2048.0, 4096, (8, 64, 256)),
        WorkloadSpec("medium", 4096, 5000.0, 8192, (8, 64, 256)),
        WorkloadSpec("large", 16384, 5000.0, 8192, (8, 64, 256)),
    )
}
"""The named workloads: about 12k, 0.5M, 18M and 70M tokens."""


@dataclasses.dataclass(frozen=True, slots=True)
class Workload:
    """One generated batch, in both forms, with its shape."""

    spec: WorkloadSpec
    seed: int
    moe: bool
    lists: dict[str, Any]
    arrays: dict[str, Any]
    total_lengths: np.ndarray
    response_lengths: np.ndarray

    @property
    def num_samples(self) -> int:
        """Samples in the batch."""
        return int(self.total_lengths.size)

    @property
    def num_tokens(self) -> int:
        """Tokens in the batch (prompts and responses)."""
        return int(self.total_lengths.sum())

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description of the workload's shape."""
        return {
            "name": self.spec.name,
            "seed": self.seed,
            "num_samples": self.num_samples,
            "num_tokens": self.num_tokens,
            "response_tokens": int(self.response_lengths.sum()),
            "response_mean": self.spec.response_mean,
            "response_cap": self.spec.response_cap,
            "samples_at_cap": int((self.response_lengths == self.spec.response_cap).sum()),
            "prompt_tokens": list(PROMPT_TOKENS),
            "moe": self.moe,
            "moe_shape": [MOE_LAYERS, MOE_TOP_K] if self.moe else None,
        }


def _ragged(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Cut ``flat`` into one array per sample (views, in order)."""
    return np.split(flat, np.cumsum(lengths)[:-1]) if lengths.size else []


def _lengths(spec: WorkloadSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = spec.num_samples
    prompt = rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1, size=n, dtype=np.int64)
    response = np.rint(rng.exponential(spec.response_mean, size=n)).astype(np.int64)
    response = np.clip(response, 1, spec.response_cap)
    return prompt + response, response


def _per_token_arrays(
    rng: np.random.Generator, total: np.ndarray, response: np.ndarray
) -> dict[str, list[np.ndarray]]:
    tokens = rng.integers(0, VOCAB_SIZE, size=int(total.sum()), dtype=np.int32)
    num_response = int(response.sum())
    masks = (rng.random(num_response) >= MASKED_FRACTION).astype(np.uint8)
    log_probs = -rng.exponential(0.7, size=num_response).astype(np.float32)
    return {
        "tokens": _ragged(tokens, total),
        "loss_masks": _ragged(masks, response),
        "rollout_log_probs": _ragged(log_probs, response),
    }


def _routed_experts(rng: np.random.Generator, total: np.ndarray) -> list[np.ndarray]:
    rows = np.maximum(total - 1, 0)
    shape = (int(rows.sum()), MOE_LAYERS, MOE_TOP_K)
    flat = rng.integers(0, NUM_EXPERTS, size=shape, dtype=np.int32)
    return _ragged(flat, rows)


def _numpy_form(
    spec: WorkloadSpec, rng: np.random.Generator, total: np.ndarray, response: np.ndarray
) -> dict[str, Any]:
    """The batch as per-sample numpy arrays (and one array per scalar key), in key order."""
    n = spec.num_samples
    per_token = _per_token_arrays(rng, total, response)
    return {
        "tokens": per_token["tokens"],
        "response_lengths": response.copy(),
        "loss_masks": per_token["loss_masks"],
        "rollout_log_probs": per_token["rollout_log_probs"],
        "rewards": rng.choice([0.0, 1.0], size=n),
        "truncated": response == spec.response_cap,
        "sample_indices": np.arange(n, dtype=np.int64),
        "raw_reward": rng.normal(0.5, 0.25, size=n),
    }


def _classic_form(arrays: dict[str, Any]) -> dict[str, Any]:
    """The same values as the classic dict of Python lists (routed experts stay numpy arrays)."""
    lists: dict[str, Any] = {}
    for key, value in arrays.items():
        if key == "rollout_routed_experts":
            lists[key] = list(value)
        elif isinstance(value, list):
            lists[key] = [sample.tolist() for sample in value]
        else:
            lists[key] = value.tolist()
    return lists


def generate(spec: WorkloadSpec | str, *, seed: int = 0, moe: bool = False) -> Workload:
    """Generate a workload: the same seeded values as Python lists and as numpy arrays.

    Parameters
    ----------
    spec
        A :class:`WorkloadSpec` or the name of one in :data:`WORKLOADS`.
    seed
        The seed of every random draw: equal seeds give equal batches.
    moe
        Add ``rollout_routed_experts`` (``[len(tokens) - 1, MOE_LAYERS, MOE_TOP_K]`` int32).
    """
    if isinstance(spec, str):
        if spec not in WORKLOADS:
            msg = f"unknown workload {spec!r}; expected one of: {', '.join(WORKLOADS)}"
            raise ValueError(msg)
        spec = WORKLOADS[spec]
    rng = np.random.default_rng(seed)
    total, response = _lengths(spec, rng)
    arrays = _numpy_form(spec, rng, total, response)
    if moe:
        arrays["rollout_routed_experts"] = _routed_experts(rng, total)
    return Workload(spec, seed, moe, _classic_form(arrays), arrays, total, response)
