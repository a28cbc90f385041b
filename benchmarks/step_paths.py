"""The four paths of a training step, from the rollout loop to one rank's tensors.

Every path sees the same groups in the same seeded order and must give each rank the classic
shard (:func:`check_agreement`) before anything is timed. ``classic``: a dict of Python lists,
put by :mod:`benchmarks.baseline`, ``torch.tensor`` per sample on the rank. ``numpy``: one numpy
array per sample (what a user tries first), pickled by Ray out of band, ``torch.from_numpy`` on
the rank. ``arrow``: the dict of lists converted at the boundary (``from_train_data``), then
:func:`arrow_split.ray.split_train_data_by_dp`, ``process_rollout_data`` and ``to_tensors``.
``builder``: a :class:`arrow_split.RolloutBatchBuilder` fed during the loop, then as ``arrow``.
"""

from __future__ import annotations

import gc
import os
import resource
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
import ray

from arrow_split import KNOWN_COLUMNS, RolloutBatch, RolloutBatchBuilder, shard_for_rank
from arrow_split.ray import process_rollout_data, split_train_data_by_dp
from benchmarks import baseline
from benchmarks._common import MIB, Laps, MemoryGauge, timed

__all__ = [
    "PATHS",
    "StepRankActor",
    "StepPath",
    "boundary",
    "check_agreement",
    "from_numpy",
    "is_per_sample",
    "largest_ranks",
    "rank_steps",
    "rollout",
    "rollout_dict",
    "shard_differences",
]

StepPath = Literal["classic", "numpy", "arrow", "builder"]
"""The four ways a step's samples travel, from the rollout loop to a rank's tensors."""

PATHS: tuple[StepPath, ...] = ("classic", "numpy", "arrow", "builder")


def is_per_sample(key: str) -> bool:
    """Whether a group's ``key`` holds one value per sample of the group (appended, not set)."""
    spec = KNOWN_COLUMNS.get(key)
    return spec is not None and (spec.is_per_sample or spec.global_shape == "float_per_sample")


def _extend_lists(groups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for group in groups:
        for key, values in group.items():
            if is_per_sample(key):
                data.setdefault(key, []).extend(values)
            else:
                data[key] = values
    return data


_BUILDER = RolloutBatchBuilder()
"""The run's one builder: a rollout manager keeps one, whose ``finish()`` starts the next step
with the buffers' capacity kept (every step here ends with ``finish()``)."""


def _extend_builder(groups: Sequence[Mapping[str, Any]]) -> Any:
    for group in groups:
        _BUILDER.extend(group)
    return _BUILDER


_THREAD = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)  # Linux: this thread


def rollout(path: StepPath, groups: Sequence[Mapping[str, Any]]) -> tuple[Any, dict[str, float]]:
    """Feed every group to ``path``'s accumulator; return it and the loop's seconds.

    CPU of this thread only (Ray's threads not counted), its kernel part apart, and wall time.
    """
    system = resource.getrusage(_THREAD).ru_stime
    cpu, wall = time.thread_time(), time.perf_counter()
    state = _extend_builder(groups) if path == "builder" else _extend_lists(groups)
    figures = {"cpu_seconds": time.thread_time() - cpu, "wall_seconds": time.perf_counter() - wall}
    figures["system_seconds"] = resource.getrusage(_THREAD).ru_stime - system
    return state, figures


def _numpy_dict(chunks: Mapping[str, Any]) -> dict[str, Any]:
    """The accumulated numpy groups as one dict: scalar columns concatenated into one array."""
    data: dict[str, Any] = {}
    for key, values in chunks.items():
        if isinstance(values, list) and values and np.ndim(values[0]) == 0:
            data[key] = np.asarray(values)
        else:
            data[key] = values
    return data


def _numpy_shard(
    data: Mapping[str, Any], partition: Sequence[int], total_lengths: list[int]
) -> dict[str, Any]:
    """One rank's numpy dict: per-sample arrays listed, scalar arrays indexed, globals whole."""
    rows = np.asarray(partition, dtype=np.int64)
    shard: dict[str, Any] = {}
    for key, values in data.items():
        if key in baseline.GLOBAL_KEYS:
            shard[key] = values
        elif isinstance(values, np.ndarray):
            shard[key] = values[rows]
        else:
            shard[key] = [values[row] for row in partition]
    shard["partition"] = list(partition)
    shard["total_lengths"] = total_lengths
    return shard


def boundary(
    path: StepPath, mode: str, state: Any, dp_size: int, balance: bool
) -> tuple[Any, Laps]:
    """The driver's work once the step's last sample is in: the refs and the laps.

    Laps: ``convert``, ``finish``, ``concat`` (numpy scalars), ``split``, ``put`` (for
    arrow_split the whole ``split_train_data_by_dp``: plan, take and put).
    """
    laps, delay = Laps(), mode == "delayed"
    if path in ("classic", "numpy"):
        data = state
        if path == "numpy":
            data = _numpy_dict(state)
            laps.lap("concat")
        if delay:
            refs: Any = ray.put(dict(data))
        else:
            shard = baseline.classic_shard if path == "classic" else _numpy_shard
            shards = baseline.classic_split(data, dp_size, balance, shard)
            laps.lap("split")
            refs = [ray.put(shard) for shard in shards]
        laps.lap("put")
        return refs, laps
    if path == "builder":
        batch = state.finish()
        laps.lap("finish")
    else:
        batch = RolloutBatch.from_train_data(state)
        laps.lap("convert")
    refs = split_train_data_by_dp(batch, dp_size, balance_data=balance, delay=delay)
    laps.lap("put")
    return refs, laps


def from_numpy(shard: Mapping[str, Any], private: bool = False) -> dict[str, Any]:
    """``torch.from_numpy`` of every per-sample value: read-only store views (warning silenced),
    or (``private``) of copies, tensors a trainer may write without changing the store."""
    import torch

    if private:
        shard = {key: _copies(values) for key, values in shard.items()}
    tensors: dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "The given NumPy array is not writable"
        for key, values in shard.items():
            if key in baseline.GLOBAL_KEYS or key in ("partition", "total_lengths"):
                continue
            if isinstance(values, np.ndarray):
                tensors[key] = torch.from_numpy(values)
            else:
                tensors[key] = [torch.from_numpy(sample) for sample in values]
    return tensors


def _copies(values: Any) -> Any:
    if isinstance(values, np.ndarray):
        return values.copy()
    return [np.array(v) for v in values] if isinstance(values, list) else values


def _numpy_rank(box: list[Any], mode: str, rank: int, dp_size: int, balance: bool) -> Laps:
    laps = Laps()
    if mode == "eager":
        shard = ray.get(box[0][rank])
        laps.lap("get")
    else:
        data = ray.get(box[0])
        laps.lap("get")
        total_lengths = [len(tokens) for tokens in data["tokens"]]
        partition = baseline.classic_partitions(total_lengths, dp_size, balance)[rank]
        laps.lap("plan")
        shard = _numpy_shard(data, partition, total_lengths)
        laps.lap("take")
    tensors = from_numpy(shard)
    laps.lap("to_tensors")
    del tensors, shard
    return laps


def _arrow_rank(box: list[Any], rank: int, dp_size: int, balance: bool) -> Laps:
    from arrow_split.torch import to_tensors

    laps = Laps()
    shard = process_rollout_data(box[0], rank, dp_size, balance_data=balance)
    laps.lap("process_rollout_data")
    tensors = to_tensors(shard)
    laps.lap("to_tensors")
    del tensors, shard
    return laps


def rank_steps(
    path: StepPath, mode: str, box: list[Any], rank: int, dp_size: int, balance: bool
) -> Laps:
    """One rank's work on what the boundary put (``box[0]``: the refs or the ref), timed."""
    if path == "classic" and mode == "eager":
        laps, _ = baseline.eager_rank_steps(box[0], rank)
        return laps
    if path == "classic":
        laps, _ = baseline.delayed_rank_steps(box[0], rank, dp_size, balance)
        return laps
    if path == "numpy":
        return _numpy_rank(box, mode, rank, dp_size, balance)
    return _arrow_rank(box, rank, dp_size, balance)


def largest_ranks(partitions: list[Any], lengths: Any, count: int) -> list[int]:
    """The ``count`` ranks with the most tokens (the slowest candidates), lowest rank on a tie."""
    tokens = [int(lengths[rows].sum()) for rows in partitions]
    order = sorted(range(len(partitions)), key=lambda rank: (-tokens[rank], rank))
    return sorted(order[: max(count, 1)])


RANK_RESERVE_BYTES = 256 * MIB
"""The train actors' heap reserve: above twice a rank's private memory here (57 MB at dp 8)."""


@ray.remote(num_cpus=0)
class StepRankActor:
    """One train rank's process, started fresh per configuration as a framework would.

    It imports torch and calls :func:`arrow_split.ray.warm_up` (heap reserve
    :data:`RANK_RESERVE_BYTES`); its first call is the cold start. References travel in a list
    so that Ray does not resolve them before the clock starts.
    """

    def __init__(self) -> None:
        import torch  # a train actor has imported torch long before its first step

        import arrow_split.torch  # noqa: F401 - as a train actor's module imports it
        from arrow_split.ray import warm_up

        warm_up(reserve_bytes=RANK_RESERVE_BYTES)
        self.torch_version = torch.__version__

    def ready(self) -> int:
        return os.getpid()

    def run(
        self, path: StepPath, mode: str, box: list[Any], rank: int, dp_size: int, balance: bool
    ) -> dict[str, Any]:
        """Run and time one rank's steps once: ``{"steps", "seconds", "memory"}``."""
        gc.collect()
        with MemoryGauge() as memory:
            laps = rank_steps(path, mode, box, rank, dp_size, balance)
        return {"steps": laps.seconds, "seconds": laps.total, "memory": memory.figures}

    def get_small(self, box: list[Any], repeats: int) -> dict[str, Any]:
        """The floor of a fetch: ``ray.get`` of a small object (``box[0]``) in this process."""
        return {"seconds": timed(lambda: ray.get(box[0]), repeats)}

    def memcpy(self, nbytes: int, repeats: int) -> dict[str, Any]:
        """The floor of a delayed rank: a copy of ``nbytes`` into fresh memory in this process."""
        source = np.ones(max(nbytes, 1), dtype=np.uint8)
        return {
            "bytes": nbytes,
            "seconds": timed(lambda: np.copyto(np.empty_like(source), source), repeats),
        }


def _same(left: Any, right: Any) -> bool:
    """Equal values; numpy arrays (one per sample, or whole) compare by shape and values."""
    if isinstance(left, np.ndarray) or isinstance(right, np.ndarray):
        return bool(np.array_equal(np.asarray(left), np.asarray(right)))
    both_lists = isinstance(left, list) and isinstance(right, list)
    if both_lists and any(isinstance(value, np.ndarray) for value in [*left, *right]):
        return len(left) == len(right) and all(map(_same, left, right))
    return bool(left == right)


def shard_differences(classic: Mapping[str, Any], other: Mapping[str, Any]) -> list[str]:
    """The keys on which two classic-layout shards differ (missing ones included), or ``[]``."""
    keys = sorted(set(classic) | set(other))
    return [
        k for k in keys if k not in classic or k not in other or not _same(classic[k], other[k])
    ]


def rollout_dict(shard: Any) -> dict[str, Any]:
    """A shard in the classic rollout layout (``to_train_data(layout="rollout")``), as a dict."""
    return dict(shard.to_train_data(layout="rollout"))


def check_agreement(
    list_groups: Sequence[Mapping[str, Any]],
    numpy_groups: Sequence[Mapping[str, Any]],
    dp_size: int,
    ranks: Sequence[int],
    balance: bool,
) -> dict[str, Any]:
    """Raise ``AssertionError`` unless every path gives each of ``ranks`` the classic shard.

    The builder's batch must equal ``from_train_data`` of the same samples too.
    """
    lists, _ = rollout("classic", list_groups)
    arrays, _ = rollout("numpy", numpy_groups)
    batch = RolloutBatch.from_train_data(lists)
    built, _ = rollout("builder", list_groups)
    if not built.finish().equals(batch):
        msg = "RolloutBatchBuilder.finish() differs from RolloutBatch.from_train_data"
        raise AssertionError(msg)
    classic = baseline.classic_split(lists, dp_size, balance)
    numpy_shards = baseline.classic_split(_numpy_dict(arrays), dp_size, balance, _numpy_shard)
    for rank in ranks:
        arrow = shard_for_rank(batch, rank, dp_size, balance_data=balance)
        for where, shard in (("numpy", numpy_shards[rank]), ("arrow", rollout_dict(arrow))):
            differences = shard_differences(classic[rank], shard)
            if differences:
                msg = f"dp_size={dp_size}, rank={rank}: classic and {where} differ on {differences}"
                raise AssertionError(msg)
    return {
        "dp_size": dp_size,
        "ranks": list(ranks),
        "paths": ["numpy", "arrow", "builder"],
        "builder_equals_from_train_data": True,
        "agree": True,
    }
