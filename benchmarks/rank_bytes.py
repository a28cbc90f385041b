"""A rank's own bytes: the model-parallel slice, prefetch, the reused block, the eager rank.

Four figures of issue "The trainer never waits for its data", each a ratio to a baseline
measured in the same run (medians over ``repeats`` warm runs):

- ``slice``: the MoE workload at real shape (``layers x top_k`` of 256 experts) at PP x CP:
  the bytes a rank's take makes (its rows, the routed experts cut to its stage's layers and CP
  chunks by :func:`arrow_split.routing.take_expert_slice`) and its take time, against today's
  take of the same rows with every layer and token (``take_rows``). Target: bytes at most
  1 / (PP x CP) + 5%.
- ``prefetch``: steps whose fetch (the object store get, the take, ``to_tensors``) runs in
  :class:`arrow_split.ray.RolloutPrefetcher` while a simulated training step (a sleep of
  ``train_factor`` x the fetch) runs, the trainer holding its step's tensors until the step
  ends: the trainer-visible wait per step, against the fetch without prefetch. Target: at
  most 5%.
- ``block``: the rank's take into :class:`arrow_split.block.RankBlock` (warm: reused) against
  a memcpy of the rank's bytes (``benchmarks.step``'s measure: into fresh memory; and into
  reused memory, the stricter floor), with the new bytes a warm fill allocates (tracemalloc)
  and whether the block moved; the floor of a gather (``gather_floor``: the same runs of the
  same columns copied by numpy, planned ahead; ``vs_gather_floor``: the fill against it).
  Target: at most 2x, no new allocation of the rank's size.
- ``eager``: the eager rank (:func:`arrow_split.ray.fill_rank_block` into a
  :class:`arrow_split.torch.TensorBlock`: its tensors are views of the block) against the
  numpy quick fix's rank (per-sample numpy arrays, the same rows:
  :func:`benchmarks.step_paths.rank_steps`), and today's eager rank (``to_tensors``). Target:
  at least 1x. The quick fix's tensors alias the object store's read-only memory (torch warns,
  silenced there): a write into one would change every rank's data. ``numpy_private`` is that
  rank with copies a trainer may write, as the block's are (``block_vs_numpy_private``).
  ``copy_floor``: the least a rank whose tensors are its own pays, the quick fix's own fetch
  plus one memcpy of the rank's bytes (``copy_floor_vs_numpy``: the best such a rank reaches).
  ``arrow_block`` is a put with every rank on one node (the batch once, with its plan: the rank
  gathers its rows); ``arrow_block_node_groups`` a put for ranks named on nodes of 8 (fewer
  where ``dp`` < 16; ``rank_nodes``, as on a cluster: the rank's rows are one run of its
  node's object).

Beside them, ``delayed_block``: a delayed rank's fill of its block by
:func:`arrow_split.ray.fill_rank_block` (one gather from the fetched batch) against its take
then a fill (``block.fill(process_rollout_data(...))``), at each dp size.

The figures of a ratio are timed in turns (:func:`_interleaved`), each run after a collection.
Writes ``rank_bytes.json`` and ``rank_bytes.png``. No GPU figure: this run had no CUDA device
(``gpu`` in the JSON says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import ray

from arrow_split import RolloutBatch, plan_partitions, take_rows
from arrow_split.block import RankBlock
from arrow_split.ray import (
    RolloutPrefetcher,
    fill_rank_block,
    process_rollout_data,
    split_train_data_by_dp,
    warm_up,
)
from arrow_split.routing import ParallelPlace, take_expert_slice
from arrow_split.schema import ROUTED_EXPERTS
from arrow_split.testing import WORKLOADS, iter_sample_groups, make_train_data
from arrow_split.torch import TensorBlock, to_tensors
from benchmarks._common import (
    MIB,
    Results,
    benchmark_parser,
    local_ray,
    pyplot,
    run_main,
    save_figure,
    summarize,
    timed,
)
from benchmarks.step_paths import boundary, from_numpy, largest_ranks, rank_steps, rollout

__all__ = ["SIZES", "parse_args", "report", "run"]

SIZES = {
    False: {"moe_samples": 256, "layers": 64, "top_k": 8, "experts": 256, "pp": 4, "cp": 2,
            "workload": "medium", "dp_sizes": (64, 8), "prefetch_steps": 16, "train_factor": 1.2,
            "repeats": 9},
    True: {"moe_samples": 8, "layers": 4, "top_k": 2, "experts": 256, "pp": 2, "cp": 2,
           "workload": "tiny", "dp_sizes": (2,), "prefetch_steps": 3, "train_factor": 1.2,
           "repeats": 1},
}  # fmt: skip
"""The full run's sizes (``SIZES[False]``) and the ``--smoke`` run's (``SIZES[True]``)."""


def _rank_rows(lengths: np.ndarray, dp: int) -> tuple[int, np.ndarray]:
    partitions = plan_partitions(lengths, dp, balance_data=True)
    rank = largest_ranks(partitions, lengths, 1)[0]
    return rank, partitions[rank]


def _slice(options: argparse.Namespace) -> dict[str, Any]:
    """Bytes and take time of one rank's slice against the full take, every (PP, CP) place."""
    config = dataclasses.replace(
        WORKLOADS["small"], samples=options.moe_samples, as_numpy=True, seed=0,
        moe_shape=(options.layers, options.top_k),
    )  # fmt: skip
    data = make_train_data(config)
    rng = np.random.default_rng(1)  # ids of all the model's experts
    data[ROUTED_EXPERTS] = [
        rng.integers(0, options.experts, a.shape, dtype=np.int32) for a in data[ROUTED_EXPERTS]
    ]
    batch = RolloutBatch.from_train_data(data)
    rest = RolloutBatch.from_train_data({k: v for k, v in data.items() if k != ROUTED_EXPERTS})
    del data
    rank, rows = _rank_rows(batch.total_lengths, 8)
    full = take_rows(batch, rows)
    full_bytes, full_experts = full.nbytes, full.column(ROUTED_EXPERTS).nbytes
    rest_bytes = take_rows(rest, rows).nbytes
    del full
    places = [
        ParallelPlace(options.pp, pp_rank, options.cp, cp_rank)
        for pp_rank in range(options.pp)
        for cp_rank in range(options.cp)
    ]
    slice_bytes = [take_expert_slice(batch, place, rows).nbytes for place in places]
    place = places[-1]
    full_take = timed(lambda: take_rows(batch, rows), options.repeats, warm_up=1)
    sliced = timed(
        lambda: (take_rows(rest, rows), take_expert_slice(batch, place, rows)),
        options.repeats, warm_up=1,
    )  # fmt: skip
    worst = max(slice_bytes)
    return {
        "samples": batch.num_samples, "tokens": int(batch.total_lengths.sum()),
        "moe_shape": [options.layers, options.top_k], "experts": options.experts,
        "pp": options.pp, "cp": options.cp, "dp_size": 8, "dp_rank": rank, "rows": len(rows),
        "full_rank_bytes": full_bytes, "full_experts_bytes": full_experts,
        "slice_experts_bytes": slice_bytes, "rank_bytes": rest_bytes + worst,
        "rank_bytes_ratio": (rest_bytes + worst) / full_bytes,
        "experts_bytes_ratio": worst / full_experts,
        "target_ratio": 1 / (options.pp * options.cp) * 1.05,
        "full_take_seconds": full_take, "sliced_take_seconds": sliced,
        "take_speedup": full_take["median"] / sliced["median"],
    }  # fmt: skip


def _prefetch(batch: RolloutBatch, options: argparse.Namespace) -> dict[str, Any]:
    """The trainer-visible wait per step with and without the prefetcher (delayed puts).

    Every step's batch is put first (the driver's work, done before the clock starts), then a
    train actor (:class:`_TrainRank`) fetches each twice: one after the other without prefetch,
    then through the prefetcher while a training step sleeps. The figure is the actor set up as
    docs/ray.md asks of one that prefetches (one malloc arena); ``default_arenas`` is the same
    actor under glibc's default arenas (a thread of its own allocates on fresh pages).
    """
    dp = options.dp_sizes[-1]
    rank, _ = _rank_rows(batch.total_lengths, dp)
    steps = options.prefetch_steps
    refs = [split_train_data_by_dp(batch, dp, balance_data=True, delay=True) for _ in range(steps)]
    figures = {}
    for name, env in (("one_arena", {"MALLOC_ARENA_MAX": "1"}), ("default_arenas", {})):
        actor = _TrainRank.options(runtime_env={"env_vars": env}).remote()  # type: ignore[attr-defined]
        try:
            figures[name] = ray.get(actor.measure.remote([refs], rank, dp, options.train_factor))
        finally:
            ray.kill(actor)
    return {"dp_size": dp, "dp_rank": rank, "steps": steps, **figures["one_arena"],
            "default_arenas": figures["default_arenas"], "target": 0.05}  # fmt: skip


@ray.remote(num_cpus=0)
class _TrainRank:
    """A train actor that prefetches: one malloc arena (``MALLOC_ARENA_MAX=1`` in its
    environment) and a reserved heap (``warm_up``), so that the prefetch thread's tensors reuse
    the pages the reserve faulted in."""

    def measure(self, box: list[Any], rank: int, dp: int, train_factor: float) -> dict[str, Any]:
        """The fetch alone, then the waits through the prefetcher (``box[0]``: the refs).

        As a trainer does, the rank keeps a step's tensors until its training step ends; their
        release is timed apart (``release_seconds``).
        """
        refs = box[0]

        def fetch(ref: Any) -> Any:
            return to_tensors(process_rollout_data(ref, rank, dp, balance_data=True))

        step_bytes = _tensor_bytes(list(fetch(refs[0]).values()))
        warm_up(reserve_bytes=min(4 * step_bytes, 1 << 30))  # two steps held, twice over
        plain = [_kept(lambda ref=ref: fetch(ref))[0] for ref in refs]
        train = train_factor * float(np.median(plain))
        waits, releases = [], []
        with RolloutPrefetcher(rank, dp, convert=to_tensors, balance_data=True) as prefetcher:
            prefetcher.submit(0, refs[0])
            for step in range(len(refs)):
                if step + 1 < len(refs):
                    prefetcher.submit(step + 1, refs[step + 1])
                wait, tensors = _kept(lambda step=step: prefetcher.get(step))
                waits.append(wait)
                time.sleep(train)  # the training step; the next fetch runs meanwhile
                releases.append(_kept(tensors.clear)[0])  # the step's tensors dropped
        first, rest = waits[0], waits[1:] or waits
        return {
            "train_seconds": train, "step_bytes": step_bytes, "fetch_seconds": summarize(plain),
            "wait_seconds": summarize(rest), "first_wait_seconds": first,
            "release_seconds": summarize(releases),
            "wait_vs_fetch": float(np.median(rest)) / float(np.median(plain)),
        }  # fmt: skip


def _tensor_bytes(value: Any) -> int:
    """The bytes of the tensors in ``value`` (a tensor, or lists and tuples of them)."""
    if isinstance(value, (list, tuple)):
        return sum(map(_tensor_bytes, value))
    return int(value.element_size() * value.nelement()) if hasattr(value, "element_size") else 0


def _kept(call: Callable[[], Any]) -> tuple[float, Any]:
    """The seconds ``call`` takes, and its result: dropped by the caller, outside the clock."""
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _interleaved(calls: dict[str, Callable[[], object]], repeats: int) -> dict[str, Any]:
    """:func:`timed` of each call, the calls taking turns (a round each, the first to warm up):
    a change of the shared machine's load weighs on every figure of a ratio alike."""
    seconds: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats + 1):
        for name, call in calls.items():
            gc.collect()
            start = time.perf_counter()
            result = call()
            seconds[name].append(time.perf_counter() - start)
            del result
    return {name: summarize(values[1:]) for name, values in seconds.items()}


def _block(batch: RolloutBatch, dp: int, repeats: int) -> dict[str, Any]:
    """The rank's take into the reused block, against a memcpy of its bytes and the floor."""
    _, rows = _rank_rows(batch.total_lengths, dp)
    block = RankBlock()
    nbytes = block.fill(batch, rows).nbytes
    address = block.address
    tracemalloc.start()
    block.fill(batch, rows)
    allocated = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    source, reused = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
    figures = _interleaved(
        {
            "fill": lambda: block.fill(batch, rows),
            "memcpy_fresh": lambda: np.copyto(np.empty_like(source), source),
            "memcpy_reused": lambda: np.copyto(reused, source),
            "take_rows": lambda: take_rows(batch, rows),
            "gather_floor": _gather_floor(batch, rows),
        },
        5 * repeats,
    )
    fill, fresh = figures["fill"]["median"], figures["memcpy_fresh"]["median"]
    floor = figures["gather_floor"]["median"]
    return {
        "dp_size": dp, "rows": len(rows), "rank_bytes": nbytes,
        **{f"{name}_seconds": figure for name, figure in figures.items()},
        "vs_memcpy_fresh": fill / fresh,
        "vs_memcpy_reused": fill / figures["memcpy_reused"]["median"],
        "take_rows_vs_memcpy_fresh": figures["take_rows"]["median"] / fresh,
        "gather_floor_vs_memcpy_fresh": floor / fresh, "vs_gather_floor": fill / floor,
        "warm_fill_allocated_bytes": allocated, "block_moved": block.address != address,
        "allocations": block.allocations, "target": 2.0,
    }  # fmt: skip


def _gather_floor(batch: RolloutBatch, rows: np.ndarray) -> Callable[[], object]:
    """The rank's runs of every numeric column copied into arrays made ahead: no planning."""
    copies = []
    for column in batch.numeric_columns():
        if column.offsets is None or column.token_offsets is not None:
            out = np.empty((len(rows), *column.values.shape[1:]), column.values.dtype)
            copies.append((column.values, rows, out))
            continue
        runs = [
            column.values[a:b]
            for a, b in zip(column.offsets[rows], column.offsets[rows + 1], strict=True)
        ]
        copies.append(
            (
                runs,
                None,
                np.empty((sum(map(len, runs)), *column.values.shape[1:]), column.values.dtype),
            )
        )

    def gather() -> None:
        for source, picked, out in copies:
            if picked is None:
                np.concatenate(source, out=out)
            else:
                np.take(source, picked, axis=0, out=out)

    return gather


def _eager(groups: list[dict[str, Any]], dp: int, repeats: int) -> dict[str, Any]:
    """The eager rank three ways, in this process, on the same step's objects."""
    numpy_state, _ = rollout("numpy", groups)
    lists, _ = rollout("classic", groups)
    lengths = np.array([len(tokens) for tokens in lists["tokens"]], dtype=np.int64)
    rank, rows = _rank_rows(lengths, dp)
    numpy_refs, _ = boundary("numpy", "eager", numpy_state, dp, True)
    arrow_refs, _ = boundary("arrow", "eager", lists, dp, True)
    per_node = max(1, min(_RANKS_PER_NODE, dp // 2))  # two node groups at least
    nodes = [f"node-{rank // per_node}" for rank in range(dp)]  # a cluster's eager put
    group_refs = split_train_data_by_dp(lists, dp, balance_data=True, rank_nodes=nodes)
    del numpy_state, lists
    block, group_block = TensorBlock(pin=False), TensorBlock(pin=False)

    def with_block() -> object:
        return fill_rank_block(arrow_refs, rank, dp, block, balance_data=True)

    nbytes = block.block.fill(ray.get(arrow_refs[rank]), rows).nbytes  # the bytes it copies
    source, reused = np.ones(nbytes, dtype=np.uint8), np.empty(nbytes, dtype=np.uint8)
    calls = {
        "numpy": lambda: rank_steps("numpy", "eager", [numpy_refs], rank, dp, True),
        "numpy_private": lambda: from_numpy(ray.get(numpy_refs[rank]), private=True),
        "arrow_to_tensors": lambda: rank_steps("arrow", "eager", [arrow_refs], rank, dp, True),
        "arrow_block": with_block,
        "arrow_block_node_groups": lambda: fill_rank_block(
            group_refs, rank, dp, group_block, balance_data=True
        ),
        "copy_floor": lambda: (ray.get(numpy_refs[rank]), np.copyto(reused, source)),
    }
    figures = _interleaved(calls, 5 * repeats)
    numpy_median, floor = figures["numpy"]["median"], figures["copy_floor"]["median"]
    return {
        "dp_size": dp, "dp_rank": rank, "rank_bytes": nbytes, "seconds": figures,
        "block_vs_numpy": numpy_median / figures["arrow_block"]["median"],
        "node_groups_block_vs_numpy": (
            numpy_median / figures["arrow_block_node_groups"]["median"]
        ),
        "ranks_per_node": per_node,
        "block_vs_numpy_private": (
            figures["numpy_private"]["median"] / figures["arrow_block"]["median"]
        ),
        "to_tensors_vs_numpy": numpy_median / figures["arrow_to_tensors"]["median"],
        "copy_floor_vs_numpy": numpy_median / floor,
        "block_vs_copy_floor": floor / figures["arrow_block"]["median"],
        "target": 1.0,
    }  # fmt: skip


_RANKS_PER_NODE = 8


def _delayed_block(batch: RolloutBatch, dp: int, repeats: int) -> dict[str, Any]:
    """A delayed rank into the block: its take then a fill, against the one-copy fill."""
    rank, _ = _rank_rows(batch.total_lengths, dp)
    ref = split_train_data_by_dp(batch, dp, balance_data=True, delay=True)
    block = TensorBlock(pin=False)
    calls = {
        "take_then_fill": lambda: block.fill(process_rollout_data(ref, rank, dp)),
        "fill_rank_block": lambda: fill_rank_block(ref, rank, dp, block),
    }
    figures = _interleaved(calls, 5 * repeats)
    one_copy = figures["fill_rank_block"]["median"]
    return {"dp_size": dp, "dp_rank": rank, "seconds": figures,
            "speedup": figures["take_then_fill"]["median"] / one_copy}  # fmt: skip


def run(options: argparse.Namespace) -> dict[str, Results]:
    """``{"rank_bytes.json": the four figures}``."""
    results: dict[str, Any] = {"slice": _slice(options)}
    config = dataclasses.replace(WORKLOADS[options.workload], as_numpy=True)
    groups = list(iter_sample_groups(config, 8))
    batch = RolloutBatch.from_train_data(rollout("classic", groups)[0])
    results["block"] = [_block(batch, dp, options.repeats) for dp in options.dp_sizes]
    store = max(768 * MIB, (options.prefetch_steps + 4) * batch.nbytes + 256 * MIB)
    with local_ray(store):
        results["prefetch"] = _prefetch(batch, options)
        results["eager"] = _eager(groups, options.dp_sizes[0], options.repeats)
        results["delayed_block"] = [
            _delayed_block(batch, dp, options.repeats) for dp in options.dp_sizes
        ]
    results.update(
        workload=options.workload, samples=batch.num_samples, batch_bytes=batch.nbytes,
        repeats=options.repeats, object_store_bytes=store,
        gpu="not measured: no CUDA device on the machine of this run",
    )  # fmt: skip
    results["summary"] = summary(results)
    return {"rank_bytes.json": results}


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Each figure against its target (``met``: the target is reached)."""
    cut = results["slice"]
    lines = {
        "slice_experts_bytes_ratio": (cut["experts_bytes_ratio"], "<=", cut["target_ratio"]),
        "prefetch_wait_vs_fetch": (results["prefetch"]["wait_vs_fetch"], "<=", 0.05),
        **{
            f"block_vs_memcpy_dp{block['dp_size']}": (block["vs_memcpy_fresh"], "<=", 2.0)
            for block in results["block"]
        },
        "eager_block_vs_numpy": (results["eager"]["block_vs_numpy"], ">=", 1.0),
        "eager_node_groups_block_vs_numpy": (
            results["eager"]["node_groups_block_vs_numpy"],
            ">=",
            1.0,
        ),
    }
    return {
        name: {"value": value, "target": f"{sign} {target:.3g}",
               "met": value <= target if sign == "<=" else value >= target}
        for name, (value, sign, target) in lines.items()
    }  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``--smoke`` and ``--out``; the sizes are :data:`SIZES` (``SIZES[True]``: ``--smoke``)."""
    parser = benchmark_parser("rank_bytes", __doc__, "tiny sizes, once: for the tests")
    options = parser.parse_args(argv)
    return argparse.Namespace(**vars(options), **SIZES[options.smoke])


def report(outputs: dict[str, Results], out: Path) -> None:
    """Print the summary; plot each ratio against its target."""
    lines = outputs["rank_bytes.json"]["summary"]
    for name, line in lines.items():
        print(f"{name}: {line['value']:.4g} (target {line['target']}, met: {line['met']})")
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 3.5))
    names = list(lines)
    axis.barh(names, [lines[name]["value"] for name in names])
    for position, name in enumerate(names):
        target = float(lines[name]["target"].split()[1])
        axis.plot([target, target], [position - 0.4, position + 0.4], color="black")
    axis.set_xscale("log")
    axis.set_xlabel("ratio (black: the target)")
    save_figure(figure, out / "rank_bytes.png", "A rank's own bytes")


if __name__ == "__main__":
    raise SystemExit(run_main(None, parse_args, run, report))
