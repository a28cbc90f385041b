"""The four paths of a training step, from the rollout loop to one rank's tensors.

Every path sees the same sample groups in the same (seeded) order; what differs is what the
rollout loop appends to, what the driver does at the step boundary and what a rank does:

- ``classic``: the loop extends a dict of Python lists; at the boundary the driver puts it
  (:mod:`benchmarks.baseline`: eager, plan + one dict per rank; delayed, the whole dict); a rank
  gets, plans and indexes (delayed), then ``torch.tensor`` per sample.
- ``numpy``: each per-sample value is a numpy array (what a user tries first), scalar columns one
  array; Ray pickles the dict with out-of-band buffers. A rank gets it, plans with the baseline's
  planner (delayed), indexes its own rows only (cheaper than the classic path, which builds every
  shard) and wraps each array with ``torch.from_numpy`` (no copy; tokens stay int32).
- ``arrow``: the loop extends a dict of lists as ``classic`` does; the boundary converts it
  (``RolloutBatch.from_train_data``) and hands it to :func:`arrow_split.ray.split_train_data_by_dp`;
  a rank calls :func:`arrow_split.ray.process_rollout_data` then
  :func:`arrow_split.torch.to_tensors` (tokens int64, a copy).
- ``builder``: the loop appends each group to an ``arrow_split.RolloutBatchBuilder``; the boundary
  finishes it, then as ``arrow``. Where the package has no builder yet, :class:`_FallbackBuilder`
  stands in (it keeps the dict of lists and converts it at ``finish``); :data:`BUILDER_NAME` says
  which one runs.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import ray

from arrow_split import KNOWN_COLUMNS, ColumnSpec, RolloutBatch
from arrow_split.ray import process_rollout_data, split_train_data_by_dp
from benchmarks import baseline
from benchmarks.timing import Laps

__all__ = [
    "BUILDER_NAME",
    "PATHS",
    "Builder",
    "StepPath",
    "boundary",
    "check_agreement",
    "is_per_sample",
    "rank_steps",
    "rollout",
]

StepPath = Literal["classic", "numpy", "arrow", "builder"]
"""The four ways a step's samples travel, from the rollout loop to a rank's tensors."""

PATHS: tuple[StepPath, ...] = ("classic", "numpy", "arrow", "builder")

_PER_SAMPLE_KINDS = frozenset(
    {"per_token", "per_sample_tensor", "per_sample_scalar", "per_sample_object"}
)


def is_per_sample(key: str) -> bool:
    """Whether a group's ``key`` holds one value per sample of the group (appended, not set)."""
    spec = KNOWN_COLUMNS.get(key)
    if spec is None:
        return False
    return spec.kind in _PER_SAMPLE_KINDS or spec.global_shape == "float_per_sample"


class _FallbackBuilder:
    """Stand-in for ``arrow_split.RolloutBatchBuilder`` until it lands: a dict of lists.

    Same calls as the real builder; ``finish`` is ``RolloutBatch.from_train_data`` of what was
    appended, so its appends cost what the classic path's do and its boundary what ``arrow``'s does.
    """

    def __init__(
        self,
        specs: Iterable[ColumnSpec] = (),
        allow_nonfinite: bool = False,
        exact_floats: bool = False,
    ) -> None:
        self._specs = tuple(specs)
        self._options = {"allow_nonfinite": allow_nonfinite, "exact_floats": exact_floats}
        self._columns: dict[str, list[Any]] = {}
        self._globals: dict[str, Any] = {}

    def append(self, sample: Mapping[str, Any]) -> None:
        for key, value in sample.items():
            if is_per_sample(key):
                self._columns.setdefault(key, []).append(value)
            else:
                self._globals[key] = value

    def extend(self, group: Mapping[str, Any]) -> None:
        for key, values in group.items():
            if is_per_sample(key):
                self._columns.setdefault(key, []).extend(values)
            else:
                self._globals[key] = values

    def set_global(self, key: str, value: Any) -> None:
        self._globals[key] = value

    def finish(self) -> RolloutBatch:
        data = {**self._columns, **self._globals}
        return RolloutBatch.from_train_data(data, specs=self._specs, **self._options)


try:
    from arrow_split import RolloutBatchBuilder as Builder  # type: ignore[attr-defined]
except ImportError:
    Builder = _FallbackBuilder
BUILDER_NAME: str = Builder.__name__
"""``"RolloutBatchBuilder"`` (the package's) or ``"_FallbackBuilder"`` (the stand-in above)."""


# --- the rollout loop ------------------------------------------------------------------------


def _extend_lists(groups: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for group in groups:
        for key, values in group.items():
            if is_per_sample(key):
                data.setdefault(key, []).extend(values)
            else:
                data[key] = values
    return data


def _extend_builder(groups: Sequence[Mapping[str, Any]]) -> Any:
    builder = Builder()
    for group in groups:
        builder.extend(group)
    return builder


def rollout(path: StepPath, groups: Sequence[Mapping[str, Any]]) -> tuple[Any, dict[str, float]]:
    """Feed every group to ``path``'s accumulator; return it with the loop's CPU and wall seconds.

    The CPU time is this thread's (``time.thread_time``): Ray's own threads are not counted.
    ``numpy`` groups hold arrays: per-token values stay one array per sample; the scalar
    columns collect numpy scalars, made one array each at the boundary.
    """
    cpu, wall = time.thread_time(), time.perf_counter()
    state = _extend_builder(groups) if path == "builder" else _extend_lists(groups)
    figures = {"cpu_seconds": time.thread_time() - cpu, "wall_seconds": time.perf_counter() - wall}
    return state, figures


# --- the step boundary (driver) --------------------------------------------------------------


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


def _numpy_split(data: Mapping[str, Any], dp_size: int, balance: bool) -> list[dict[str, Any]]:
    total_lengths = [len(tokens) for tokens in data["tokens"]]
    plan = baseline.classic_partitions(total_lengths, dp_size, balance)
    return [_numpy_shard(data, partition, total_lengths) for partition in plan]


def _put_all(shards: Sequence[Any]) -> list[Any]:
    return [ray.put(shard) for shard in shards]


def boundary(
    path: StepPath, mode: str, state: Any, dp_size: int, balance: bool
) -> tuple[Any, Laps]:
    """What the driver does when the step's last sample is in: convert (or finish), then put.

    Returns the reference(s) the ranks read (a list of one per rank, eager; one, delayed) and
    the boundary's laps: ``convert`` (``RolloutBatch.from_train_data``), ``finish`` (the
    builder's), ``concat`` (numpy scalar columns), ``split`` (the plan and every rank's dict),
    ``put`` (``ray.put``; for arrow_split, the whole ``split_train_data_by_dp``: plan, take and
    put, interleaved).
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
            split = baseline.classic_split if path == "classic" else _numpy_split
            shards = split(data, dp_size, balance)
            laps.lap("split")
            refs = _put_all(shards)
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


# --- one rank (inside a Ray actor) -----------------------------------------------------------


def _from_numpy(shard: Mapping[str, Any]) -> dict[str, Any]:
    """``torch.from_numpy`` of every per-sample value (read-only store views: warning silenced)."""
    import torch

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
    tensors = _from_numpy(shard)
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


# --- agreement (before anything is timed) ----------------------------------------------------


def check_agreement(
    list_groups: Sequence[Mapping[str, Any]],
    numpy_groups: Sequence[Mapping[str, Any]],
    dp_size: int,
    ranks: Sequence[int],
    balance: bool,
) -> dict[str, Any]:
    """Raise ``AssertionError`` unless every path gives each of ``ranks`` the classic shard.

    Also checks that the builder's batch equals ``RolloutBatch.from_train_data`` of the same
    samples. Shards are compared in the classic rollout layout.
    """
    from arrow_split import shard_for_rank
    from benchmarks.phases import shard_differences

    lists, _ = rollout("classic", list_groups)
    arrays, _ = rollout("numpy", numpy_groups)
    batch = RolloutBatch.from_train_data(lists)
    built, _ = rollout("builder", list_groups)
    if not built.finish().equals(batch):
        msg = f"{BUILDER_NAME}.finish() differs from RolloutBatch.from_train_data"
        raise AssertionError(msg)
    classic = baseline.classic_split(lists, dp_size, balance)
    numpy_shards = _numpy_split(_numpy_dict(arrays), dp_size, balance)
    for rank in ranks:
        arrow = shard_for_rank(batch, rank, dp_size, balance_data=balance)
        for where, shard in (
            ("numpy", numpy_shards[rank]),
            ("arrow", arrow.to_train_data(layout="rollout")),
        ):
            differences = shard_differences(classic[rank], shard)
            if differences:
                msg = f"dp_size={dp_size}, rank={rank}: classic and {where} differ on {differences}"
                raise AssertionError(msg)
    return {"dp_size": dp_size, "ranks": list(ranks), "builder_equals_from_train_data": True}
