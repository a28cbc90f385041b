"""The shape, seed and form of a generated rollout batch, and the named benchmark workloads.

:class:`RolloutConfig` is what :func:`~arrow_split.testing.make_train_data` and the other
generators of :mod:`arrow_split.testing._generate` draw a batch from, each of its fields checked
when it is made; :data:`ColumnSet` names the column sets; :data:`WORKLOADS` the benchmark sizes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, get_args

import numpy as np

from arrow_split import OptionError, OptionTypeError
from arrow_split._args import as_int, describe

__all__ = ["ColumnSet", "RolloutConfig", "WORKLOADS"]

ColumnSet = Literal["every", "numeric"]
"""Which columns a generated batch has.

``numeric``: ``tokens``, ``response_lengths``, ``loss_masks``, ``rollout_log_probs``,
``rewards``, ``truncated``, ``sample_indices`` and the batch-global ``raw_reward`` (what the
benchmarks compare, since the classic path makes a tensor of every per-sample key). ``every``:
those, plus ``teacher_log_probs``, ``rollout_ids``, the objects ``prompt``, ``metadata`` and
``weight_versions`` and the batch-global ``dynamic_global_batch_size`` and
``step_adapter_names``: every kind of column. Either set gets ``rollout_routed_experts`` when the
config has a ``moe_shape``, and ``rollout_sampling_masks`` (a list per token) when it has a
``sampling_top_k``.
"""


def _pair(name: str, value: object) -> tuple[int, int]:
    """A tuple of two ints (a ``(low, high)`` range or a ``(layers, top_k)`` shape)."""
    if not isinstance(value, tuple) or len(value) != 2:
        msg = f"`{name}` must be a tuple of two ints, got {describe(value)}"
        raise OptionTypeError(msg)
    return as_int(name, value[0]), as_int(name, value[1])


@dataclasses.dataclass(frozen=True, slots=True)
class RolloutConfig:
    """The shape, seed and form of a generated rollout batch.

    Parameters
    ----------
    samples
        Samples in the batch.
    response_mean
        Mean of the exponential response lengths, in tokens, before the cap.
    response_cap
        Longest response, in tokens; samples at the cap are ``truncated``.
    prompt_tokens
        Inclusive range of the uniform prompt lengths, in tokens.
    moe_shape
        ``(layers, top_k)`` of ``rollout_routed_experts`` (int32, ``[len(tokens) - 1, layers,
        top_k]`` per sample), or ``None`` for no routed experts.
    seed
        Seed of every draw: equal configs give equal batches.
    sampling_top_k
        Give ``rollout_sampling_masks``: for each response token, 1 to ``sampling_top_k`` distinct
        ids (int32, as :class:`arrow_split.TokenLists` per sample), or ``None`` for none. Drawn
        from a stream of their own: the other columns are the same with or without them.
    as_numpy
        Which columns come as numpy (one array per sample, one array for a scalar column or
        ``raw_reward``) rather than Python lists: ``True`` for all, ``False`` for none, or a set
        of keys. Objects are always Python lists; routed experts always numpy arrays.
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
        object.__setattr__(
            self, "response_cap", as_int("response_cap", self.response_cap, minimum=1)
        )
        object.__setattr__(self, "seed", as_int("seed", self.seed, minimum=0, maximum=2**63 - 1))
        mean = self.response_mean
        if isinstance(mean, (bool, np.bool_)) or not isinstance(mean, (int, float, np.number)):
            msg = f"`response_mean` must be a real number > 0, got {describe(mean)}"
            raise OptionTypeError(msg)
        if not 0 < float(mean) < float("inf"):
            msg = f"`response_mean` must be a finite number > 0, got {mean!r}"
            raise OptionError(msg)
        low, high = _pair("prompt_tokens", self.prompt_tokens)
        object.__setattr__(self, "prompt_tokens", (low, high))
        if not 1 <= low <= high:
            msg = f"`prompt_tokens` must be (low, high) with 1 <= low <= high, got {(low, high)}"
            raise OptionError(msg)
        if self.moe_shape is not None:
            object.__setattr__(self, "moe_shape", _pair("moe_shape", self.moe_shape))
        if self.moe_shape is not None and min(self.moe_shape) < 1:
            msg = f"`moe_shape` must be (layers, top_k), both >= 1, got {self.moe_shape!r}"
            raise OptionError(msg)
        if self.sampling_top_k is not None and self.sampling_top_k < 1:
            msg = f"`sampling_top_k` must be None or >= 1, got {self.sampling_top_k!r}"
            raise OptionError(msg)
        if not isinstance(self.as_numpy, (bool, frozenset)):
            msg = f"`as_numpy` must be a bool or a frozenset of keys, got {describe(self.as_numpy)}"
            raise OptionTypeError(msg)
        if self.columns not in get_args(ColumnSet):
            msg = f"invalid `columns`: {self.columns!r}; expected one of: 'every', 'numeric'"
            raise OptionError(msg)

    def numpy_for(self, key: str) -> bool:
        """Whether column ``key`` comes as numpy (see ``as_numpy``)."""
        if isinstance(self.as_numpy, bool):
            return self.as_numpy
        return key in self.as_numpy


WORKLOADS: Mapping[str, RolloutConfig] = MappingProxyType(
    {
        "tiny": RolloutConfig(32, 96.0, 192, columns="numeric"),
        "small": RolloutConfig(256, 2048.0, 4096, columns="numeric"),
        "medium": RolloutConfig(4096, 5000.0, 8192, columns="numeric"),
        "large": RolloutConfig(16384, 5000.0, 8192, columns="numeric"),
    }
)
"""The named benchmark workloads: about 12k, 0.5M, 18M and 70M tokens.

Numeric columns, Python lists, seed 0; ``dataclasses.replace(WORKLOADS["medium"], as_numpy=True,
moe_shape=(8, 4))`` gives the same lengths and values as numpy arrays, with routed experts.
"""
