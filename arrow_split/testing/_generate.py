"""Seeded rollout batches shaped like RL training data: a config and a step give one batch."""

from __future__ import annotations

import dataclasses
import itertools
import sys
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from arrow_split import KNOWN_COLUMNS, OptionError, OptionTypeError, TokenLists
from arrow_split._args import INT64_MAX, as_choice, as_flag, as_int, as_real, describe

__all__ = [
    "ColumnSet",
    "RolloutConfig",
    "WORKLOADS",
    "is_per_sample",
    "iter_sample_groups",
    "make_lengths",
    "make_multimodal_train_data",
    "make_train_data",
]

ColumnSet = Literal["every", "numeric"]
"""Which columns a generated batch has: ``numeric`` (the benchmarks' columns), or ``every``:
those and one column of every other kind (ids, objects, batch globals)."""


def _pair(name: str, value: object) -> tuple[int, int]:
    """A tuple of two ints (a ``(low, high)`` range or a ``(layers, top_k)`` shape)."""
    if not isinstance(value, tuple) or len(value) != 2:
        msg = f"`{name}` must be a tuple of two ints, got {describe(value)}"
        raise OptionTypeError(msg, key=name)
    return as_int(name, value[0]), as_int(name, value[1])


@dataclasses.dataclass(frozen=True, slots=True)
class RolloutConfig:
    """The shape, seed and form of a generated rollout batch.

    Parameters
    ----------
    samples, seed
        Samples in the batch, and the seed of every draw (equal configs give equal batches).
    response_mean, response_cap
        Mean and cap of the exponential response lengths (capped samples are ``truncated``).
    prompt_tokens
        Inclusive range of the uniform prompt lengths, in tokens.
    moe_shape
        ``(layers, top_k)`` of ``rollout_routed_experts`` (int32), or ``None`` for none.
    sampling_top_k
        Give ``rollout_sampling_masks`` (1 to ``sampling_top_k`` ids per response token).
    as_numpy
        Which columns come as numpy rather than lists: ``True``, ``False`` or a set of keys.
    columns
        Which columns the batch has (:data:`ColumnSet`).

    Examples
    --------
    >>> from arrow_split.testing import RolloutConfig, make_train_data
    >>> data = make_train_data(RolloutConfig(samples=4, moe_shape=(2, 2), seed=1))
    >>> len(data["tokens"]), data["rollout_routed_experts"][0].shape[1:]
    (4, (2, 2))
    """

    samples: int = 64
    response_mean: float = 1024.0
    response_cap: int = 4096
    prompt_tokens: tuple[int, int] = (64, 512)
    moe_shape: tuple[int, int] | None = None
    seed: int = 0
    as_numpy: bool | frozenset[str] = False
    columns: ColumnSet = "every"
    sampling_top_k: int | None = None

    def __post_init__(self) -> None:
        # numpy ints are accepted and stored as Python ints (slices, ranges and sums take them)
        object.__setattr__(self, "samples", as_int("samples", self.samples, minimum=0))
        cap = as_int("response_cap", self.response_cap, minimum=1)
        object.__setattr__(self, "response_cap", cap)
        object.__setattr__(self, "seed", as_int("seed", self.seed, minimum=0, maximum=INT64_MAX))
        mean = as_real("response_mean", self.response_mean, "a real number > 0")
        if not 0 < mean <= sys.float_info.max:  # an int past it would not become a float
            msg = f"`response_mean` must be a finite number > 0, got {self.response_mean!r}"
            raise OptionError(msg, key="response_mean")
        object.__setattr__(self, "response_mean", mean)
        low, high = _pair("prompt_tokens", self.prompt_tokens)
        object.__setattr__(self, "prompt_tokens", (low, high))
        if not 1 <= low <= high:
            msg = f"`prompt_tokens` must be (low, high) with 1 <= low <= high, got {(low, high)}"
            raise OptionError(msg, key="prompt_tokens")
        if self.moe_shape is not None:
            object.__setattr__(self, "moe_shape", _pair("moe_shape", self.moe_shape))
        if self.moe_shape is not None and min(self.moe_shape) < 1:
            msg = f"`moe_shape` must be (layers, top_k), both >= 1, got {self.moe_shape!r}"
            raise OptionError(msg, key="moe_shape")
        if self.sampling_top_k is not None and self.sampling_top_k < 1:
            msg = f"`sampling_top_k` must be None or >= 1, got {self.sampling_top_k!r}"
            raise OptionError(msg, key="sampling_top_k")
        if not isinstance(self.as_numpy, (bool, frozenset)):
            msg = f"`as_numpy` must be a bool or a frozenset of keys, got {describe(self.as_numpy)}"
            raise OptionTypeError(msg, key="as_numpy")
        as_choice("columns", self.columns, ColumnSet)

    def numpy_for(self, key: str) -> bool:
        """Whether column ``key`` comes as numpy (see ``as_numpy``)."""
        return self.as_numpy if isinstance(self.as_numpy, bool) else key in self.as_numpy


WORKLOADS: Mapping[str, RolloutConfig] = MappingProxyType(
    {
        "tiny": RolloutConfig(32, 96.0, 192, columns="numeric"),
        "small": RolloutConfig(256, 2048.0, 4096, columns="numeric"),
        "medium": RolloutConfig(4096, 5000.0, 8192, columns="numeric"),
        "large": RolloutConfig(16384, 5000.0, 8192, columns="numeric"),
    }
)
"""The named benchmark workloads (numeric columns, Python lists, seed 0): about 12k, 0.5M, 18M
and 70M tokens."""

VOCAB_SIZE = 151_936
NUM_EXPERTS = 128
MASKED_FRACTION = 0.05
_MAX_STEP = 2**31 - 1  # steps times samples stay far inside int64 (the rollout ids)


def _rng(seed: int, step: int) -> np.random.Generator:
    """Step 0 draws from ``seed``'s own stream; step ``s`` from the child stream ``s``."""
    spawn_key = () if step == 0 else (step,)
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=spawn_key))


def _ragged(flat: npt.NDArray[Any], lengths: npt.NDArray[np.int64]) -> list[npt.NDArray[Any]]:
    """Cut ``flat`` into one array per sample (views, in order)."""
    return np.split(flat, np.cumsum(lengths)[:-1]) if lengths.size else []


def _lengths(
    config: RolloutConfig, rng: np.random.Generator
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Total and response lengths: the first draws of every batch."""
    n, (low, high) = config.samples, config.prompt_tokens
    prompt = rng.integers(low, high + 1, size=n, dtype=np.int64)
    response = np.rint(rng.exponential(config.response_mean, size=n)).astype(np.int64)
    response = np.clip(response, 1, config.response_cap)
    return prompt + response, response


def make_lengths(config: RolloutConfig, step: int = 0) -> npt.NDArray[np.int64]:
    """The int64 total length of each sample of ``make_train_data(config, step)``, alone."""
    step = as_int("step", step, minimum=0, maximum=_MAX_STEP)
    return _lengths(config, _rng(config.seed, step))[0]


def _numeric(config: RolloutConfig, rng: np.random.Generator) -> dict[str, Any]:
    """The numeric columns as numpy, drawn in a fixed order (routed experts last)."""
    n = config.samples
    total, response = _lengths(config, rng)
    tokens = rng.integers(0, VOCAB_SIZE, size=int(total.sum()), dtype=np.int32)
    num_response = int(response.sum())
    masks = (rng.random(num_response) >= MASKED_FRACTION).astype(np.uint8)
    log_probs = -rng.exponential(0.7, size=num_response).astype(np.float32)
    columns: dict[str, Any] = {
        "tokens": _ragged(tokens, total),
        "response_lengths": response,
        "loss_masks": _ragged(masks, response),
        "rollout_log_probs": _ragged(log_probs, response),
        "rewards": rng.choice([0.0, 1.0], size=n),
        "truncated": response == config.response_cap,
        "sample_indices": np.arange(n, dtype=np.int64),
        "raw_reward": rng.normal(0.5, 0.25, size=n),
    }
    if config.moe_shape is not None:
        rows = total - 1
        shape = (int(rows.sum()), *config.moe_shape)
        experts = rng.integers(0, NUM_EXPERTS, size=shape, dtype=np.int32)
        columns["rollout_routed_experts"] = _ragged(experts, rows)
    return columns


def _sampling_masks(
    config: RolloutConfig, step: int, response: npt.NDArray[np.int64]
) -> list[TokenLists]:
    """1 to ``sampling_top_k`` ids per response token, from a stream of their own."""
    top_k = int(config.sampling_top_k or 1)
    rng = np.random.default_rng(np.random.SeedSequence(config.seed, spawn_key=(step, 1)))
    counts = rng.integers(1, top_k + 1, size=int(response.sum()), dtype=np.int64)
    ids = rng.integers(0, VOCAB_SIZE, size=int(counts.sum()), dtype=np.int32)
    token_offsets = np.concatenate([[0], np.cumsum(counts)])
    masks = []
    for begin, end in itertools.pairwise([0, *np.cumsum(response).tolist()]):
        start, stop = int(token_offsets[begin]), int(token_offsets[end])
        values, offsets = ids[start:stop], token_offsets[begin : end + 1] - start
        if not config.numpy_for("rollout_sampling_masks"):
            values, offsets = values.tolist(), offsets.tolist()
        masks.append(TokenLists(values, offsets))
    return masks


def _extras(
    config: RolloutConfig, rng: np.random.Generator, numeric: Mapping[str, Any], step: int
) -> dict[str, Any]:
    """The other kinds: a second per-token column, ids, objects and small batch globals."""
    n = config.samples
    log_probs = numeric["rollout_log_probs"]
    shift = rng.normal(0.0, 0.05, size=sum(len(values) for values in log_probs))
    teacher = np.concatenate([*log_probs, np.empty(0, np.float32)]) + shift.astype(np.float32)
    group = np.arange(n, dtype=np.int64) // 8
    return {
        "teacher_log_probs": _ragged(np.minimum(teacher, 0.0), numeric["response_lengths"]),
        "rollout_ids": group + step * n,
        "prompt": [f"prompt {step}-{row}: solve problem {row // 8}" for row in range(n)],
        "metadata": [
            None if row % 5 == 4 else {"group": int(row // 8), "attempt": int(row % 8)}
            for row in range(n)
        ],
        "weight_versions": [[f"v{step}"] * int(1 + row % 2) for row in range(n)],
        "dynamic_global_batch_size": n,
        "step_adapter_names": ["base"],
    }


def _in_form(config: RolloutConfig, key: str, value: Any) -> Any:
    """``value`` (numpy, or Python objects) in the form the config asks for ``key``."""
    plain = isinstance(value, list) and (not value or not isinstance(value[0], np.ndarray))
    if key == "rollout_routed_experts" or config.numpy_for(key) or plain:
        return value  # objects and plain lists stay as they are
    if isinstance(value, list):
        return [sample.tolist() for sample in value]
    return value.tolist() if isinstance(value, np.ndarray) else value


def make_train_data(config: RolloutConfig, step: int = 0) -> dict[str, Any]:
    """A seeded rollout batch as a classic train-data dict; each ``step`` is another batch."""
    step = as_int("step", step, minimum=0, maximum=_MAX_STEP)
    rng = _rng(config.seed, step)
    columns = _numeric(config, rng)
    if config.columns == "every":
        columns.update(_extras(config, rng, columns, step))
    if config.sampling_top_k is not None:
        response = np.asarray(columns["response_lengths"])
        columns["rollout_sampling_masks"] = _sampling_masks(config, step, response)
    return {key: _in_form(config, key, value) for key, value in columns.items()}


def is_per_sample(key: str) -> bool:
    """Whether a known key gives one value per sample (``raw_reward`` too)."""
    spec = KNOWN_COLUMNS.get(key)
    if spec is None:
        return False
    return spec.is_per_sample or spec.global_shape == "float_per_sample"


def iter_sample_groups(
    config: RolloutConfig, group_size: int = 8, *, step: int = 0
) -> Iterator[dict[str, Any]]:
    """:func:`make_train_data`'s batch as dicts of ``group_size`` rows (other globals whole)."""
    group_size = as_int("group_size", group_size, minimum=1)
    data = make_train_data(config, step)
    per_sample = [key for key in data if is_per_sample(key)]
    for start in range(0, config.samples, group_size):
        rows = {key: data[key][start : start + group_size] for key in per_sample}
        yield {**data, **rows}


def make_multimodal_train_data(
    prompts: int = 8,
    samples_per_prompt: int = 8,
    image_bytes: int = 2**20,
    *,
    seed: int = 0,
    shared: bool = True,
) -> dict[str, Any]:
    """A seeded multimodal batch: the samples of a prompt share its processed image.

    ``multimodal_train_inputs``: per prompt a dict of ``pixel_values`` (about ``image_bytes``)
    and ``image_grid_thw``, one object per prompt (``shared``) or a copy per sample.

    Examples
    --------
    >>> from arrow_split.testing import make_multimodal_train_data
    >>> data = make_multimodal_train_data(prompts=2, samples_per_prompt=4, image_bytes=4096)
    >>> inputs = data["multimodal_train_inputs"]
    >>> len(inputs), inputs[0] is inputs[3], inputs[0] is inputs[4]
    (8, True, False)
    """
    prompts = as_int("prompts", prompts, minimum=1, maximum=2**16)
    samples_per_prompt = as_int("samples_per_prompt", samples_per_prompt, minimum=1, maximum=256)
    image_bytes = as_int("image_bytes", image_bytes, minimum=4, maximum=2**30)
    seed = as_int("seed", seed, minimum=0, maximum=INT64_MAX)
    shared = as_flag("shared", shared)
    count = prompts * samples_per_prompt
    config = RolloutConfig(count, 256.0, 1024, seed=seed, columns="numeric")
    data = make_train_data(config)
    rng = _rng(seed, 1)
    width = max(1, image_bytes // 4 // 1176)
    images: list[dict[str, np.ndarray]] = [
        {
            "pixel_values": rng.random((width, 1176), dtype=np.float32),
            "image_grid_thw": np.array([[1, 2, max(1, width // 2)]], dtype=np.int64),
        }
        for _ in range(prompts)
    ]
    inputs = [images[row // samples_per_prompt] for row in range(count)]
    if not shared:  # a copy per sample
        inputs = [{key: value.copy() for key, value in image.items()} for image in inputs]
    data["multimodal_train_inputs"] = inputs
    return data
