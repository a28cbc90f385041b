"""The ``arrow-split demo`` command: rollout -> data-parallel train actors on a local Ray.

Every sample's values are checked on arrival (a CRC32 per sample and column); Ray (and torch,
if installed) are imported only when the demo runs.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import RolloutBatchBuilder
from arrow_split.testing import RolloutConfig, iter_sample_groups, make_train_data

__all__ = ["DemoConfig", "run_demo"]

# The dtype each checked column is compared in, on both sides.
_CHECKED: dict[str, type[np.generic]] = {
    "tokens": np.int32,
    "loss_masks": np.uint8,
    "rollout_log_probs": np.float32,
    "rollout_routed_experts": np.int32,
    "rewards": np.float64,
}
_MIB = 2**20


@dataclasses.dataclass(frozen=True, slots=True)
class DemoConfig:
    """What the demo runs: batch shape, DP size, steps and modes."""

    samples: int = 512
    mean_response: int = 1024
    max_response: int = 4096
    dp_size: int = 8
    steps: int = 3
    modes: tuple[str, ...] = ("eager", "delayed")
    balance_data: bool = True
    moe: bool = False
    seed: int = 0
    tensors: bool = True  # ranks make torch tensors (False: they check the shard's Arrow values)


def _crc32s(values: Sequence[Any], dtype: type[np.generic]) -> np.ndarray:
    return np.array(
        [zlib.crc32(np.ascontiguousarray(value, dtype=dtype).tobytes()) for value in values],
        dtype=np.int64,
    )


def _checksums(columns: Mapping[str, Sequence[Any]]) -> dict[str, np.ndarray]:
    """CRC32 of every sample of each checked column, in the dtype both sides compare it in."""
    return {key: _crc32s(columns[key], dtype) for key, dtype in _CHECKED.items() if key in columns}


def _tensor_values(shard: Any) -> dict[str, list[np.ndarray]]:
    """Each checked column's per-sample values, from the torch tensors a trainer makes."""
    import torch

    from arrow_split.torch import to_tensors

    tensors = to_tensors(shard, token_dtype=torch.int32, mask_dtype=torch.uint8)
    # a list of one tensor per sample, or a scalar column's tensor (iterated: one 0-d per sample)
    return {key: [tensor.numpy() for tensor in tensors[key]] for key in _CHECKED if key in tensors}


def _arrow_values(shard: Any) -> dict[str, list[Any]]:
    """Each checked column's per-sample values, decoded from the shard (no torch)."""
    train_data = shard.rows.to_train_data()
    return {key: train_data[key] for key in _CHECKED if key in train_data}


class _TrainActor:
    """A data-parallel train rank (a Ray actor): takes its shard and makes tensors, as a trainer."""

    def step(
        self,
        handle: list[Any],
        delayed: bool,
        dp_rank: int,
        dp_size: int,
        balance_data: bool,
        tensors: bool = True,
    ) -> dict[str, Any]:
        """One step: the rank's rows, their CRC32s, its seconds and bytes."""
        from arrow_split.ray import process_rollout_data

        allocated = pa.total_allocated_bytes()
        start = time.perf_counter()
        # a delayed handle comes in a list, so that Ray does not fetch it before this call
        refs_or_ref = handle[0] if delayed else handle
        shard = process_rollout_data(refs_or_ref, dp_rank, dp_size, balance_data=balance_data)
        values = _tensor_values(shard) if tensors else _arrow_values(shard)
        seconds = time.perf_counter() - start
        return {
            "partition": np.asarray(shard.partition).tolist(),
            "checksums": _checksums(values),
            "seconds": seconds,
            "shard_bytes": shard.nbytes,
            "arrow_allocated": pa.total_allocated_bytes() - allocated,
        }


def _run_step(config: DemoConfig, actors: Sequence[Any], mode: str, step: int) -> str:
    """Run one step of one mode and check every sample; its row of the table, as measured."""
    import ray

    from arrow_split.ray import split_train_data_by_dp

    experts = (4, 2) if config.moe else None  # (layers, top_k)
    settings = RolloutConfig(
        config.samples,
        float(config.mean_response),
        config.max_response,
        moe_shape=experts,
        seed=config.seed,
        columns="numeric",
    )  # long-tailed, capped responses
    expected = _checksums(make_train_data(settings, step))
    builder = RolloutBatchBuilder()
    appending = 0.0
    # The rollout loop: groups of samples finish one after the other and become columnar at
    # once, off the step's critical path.
    for group in iter_sample_groups(settings, group_size=8, step=step):
        start = time.perf_counter()
        builder.extend(group)
        appending += time.perf_counter() - start
    boundary = time.perf_counter()  # the step boundary: finish the batch, then put it
    batch = builder.finish()
    finished = time.perf_counter()
    delayed = mode == "delayed"
    put: Any = split_train_data_by_dp(
        batch, config.dp_size, balance_data=config.balance_data, delay=delayed
    )
    put_seconds = time.perf_counter() - finished
    del batch
    handle: list[Any] = [put] if delayed else list(put)
    results = ray.get(
        [
            actor.step.remote(
                handle, delayed, rank, config.dp_size, config.balance_data, config.tensors
            )
            for rank, actor in enumerate(actors)
        ]
    )
    checked = _verify(results, expected, config.samples, f"{mode} step {step}")
    locations = ray.experimental.get_object_locations(handle)  # Ray's record of each object
    store_bytes = sum(int(location.get("object_size") or 0) for location in locations.values())
    del put, handle
    finish, seconds = finished - boundary, [result["seconds"] for result in results]
    rank_mib = statistics.median(result["shard_bytes"] for result in results) / _MIB
    allocated_mib = statistics.median(result["arrow_allocated"] for result in results) / _MIB
    return (
        f"{mode:<8} {step:>4} {appending * 1e3:>9.1f} {finish * 1e3:>9.1f} "
        f"{put_seconds * 1e3:>8.1f} {(finish + put_seconds) * 1e3:>11.1f} "
        f"{store_bytes / _MIB:>9.1f} {statistics.median(seconds) * 1e3:>11.1f} "
        f"{max(seconds) * 1e3:>11.1f} {rank_mib:>8.2f} {allocated_mib:>9.2f} {checked:>10}"
    )


def _verify(
    results: Sequence[Mapping[str, Any]], expected: Mapping[str, np.ndarray], samples: int, at: str
) -> int:
    rows = np.concatenate([np.asarray(r["partition"], dtype=np.int64) for r in results])
    counts = np.bincount(rows, minlength=samples)
    if len(counts) != samples or not (counts == 1).all():
        missing = int((counts == 0).sum())
        msg = f"{at}: {missing} samples lost, {int((counts > 1).sum())} duplicated"
        raise RuntimeError(msg)
    for rank, result in enumerate(results):
        partition = np.asarray(result["partition"], dtype=np.int64)
        for key, checksums in result["checksums"].items():
            if not np.array_equal(np.asarray(checksums), expected[key][partition]):
                msg = f"{at}: rank {rank} got altered values in `{key}`"
                raise RuntimeError(msg)
    return len(rows)


def _print_table(rows: Sequence[str]) -> None:
    header = (
        f"{'mode':<8} {'step':>4} {'append ms':>9} {'finish ms':>9} {'put ms':>8} "
        f"{'boundary ms':>11} {'store MiB':>9} "
        f"{'rank ms med':>11} {'rank ms max':>11} {'rank MiB':>8} {'alloc MiB':>9} "
        f"{'samples ok':>10}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(row)
    print(
        "append ms: the rollout loop's appends to the builder (off the critical path); "
        "boundary ms: finish + put, the driver's part of the step's critical path; "
        "store MiB: what the step put, as Ray records it; rank MiB: a rank's shard (median); "
        "alloc MiB: what Arrow allocated on the rank for it (0 when it reads the store in place)"
    )


def _progress(line: str) -> None:
    """What the demo is doing, at once (Ray's start and the actors' take seconds)."""
    print(line, file=sys.stderr, flush=True)


def run_demo(config: DemoConfig) -> int:
    """Start a local Ray, run the steps of every mode, print the table, stop Ray; return 0."""
    import ray

    _progress("starting a local Ray (2 CPUs; this takes a few seconds) ...")
    ray.init(
        address="local",  # always a new local Ray, even if another one runs on this machine
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    try:
        _progress(f"starting {config.dp_size} train actors (one process each) ...")
        actor = ray.remote(num_cpus=0)(_TrainActor)
        actors: list[Any] = [actor.remote() for _ in range(config.dp_size)]
        ray.get([handle.__ray_ready__.remote() for handle in actors])
        if not config.tensors:
            _progress("torch is not installed: the ranks check their shards' Arrow values")
        print(
            f"arrow_split demo: {config.samples} samples/step, dp_size {config.dp_size}, "
            f"{'balanced' if config.balance_data else 'strided'} plan, "
            f"{config.steps} steps per mode"
        )
        rows = []
        for mode in config.modes:
            for step in range(config.steps):
                _progress(f"{mode} hand-off, step {step + 1} of {config.steps} ...")
                rows.append(_run_step(config, actors, mode, step))
        _print_table(rows)
        print("every sample reached exactly one rank with its values intact, on every step")
    finally:
        ray.shutdown()
    return 0
