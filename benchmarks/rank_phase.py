"""The per-rank phase: for every dp_size and (path, mode), a few ranks timed in a fresh actor.

The objects a configuration needs are put first (untimed: the put is a driver figure), then a new
:class:`benchmarks.ranks.RankActor` is started and waited for, then each chosen rank is timed
``repeats`` times or more (:class:`benchmarks.timing.Repeats`). The arrow_split
configurations are also timed through the public calls end to end (``leaf``); the delayed
arrow_split actor finally times a memcpy of each rank's bytes. The actor is killed and the
objects dropped before the next configuration.
"""

from __future__ import annotations

import gc
from typing import Any

import ray

from arrow_split import RolloutBatch
from benchmarks import arrow_path, baseline
from benchmarks.config import CONFIGS, Mode, Options, PathName, Progress, pick_ranks
from benchmarks.ranks import RankActor
from benchmarks.timing import Repeats
from benchmarks.workloads import Workload

__all__ = ["rank_phase"]


def _put(
    workload: Workload, batch: RolloutBatch, path: PathName, mode: Mode, dp_size: int, balance: bool
) -> Any:
    if path == "baseline":
        if mode == "eager":
            return baseline.put_eager(workload.lists, dp_size, balance)
        return baseline.put_delayed(workload.lists)
    if mode == "eager":
        return arrow_path.put_eager(batch, dp_size, balance)
    return arrow_path.put_delayed(batch, dp_size, balance)


def _time_config(
    actor: Any, refs: Any, path: PathName, mode: Mode, dp_size: int, options: Options
) -> list[dict[str, Any]]:
    """Time every chosen rank of one configuration in ``actor``."""
    records = []
    for rank in pick_ranks(dp_size, options.ranks_per_config):
        arguments = ([refs], rank, dp_size, options.balance_data, options.runs)
        record = ray.get(actor.run.remote(path, mode, *arguments))
        record.update(path=path, mode=mode, dp_size=dp_size, rank=rank, leaf=None)
        if path == "arrow":
            record["leaf"] = ray.get(actor.run_leaf.remote(*arguments))
        records.append(record)
    return records


def _memcpy(actor: Any, records: list[dict[str, Any]], repeats: Repeats) -> list[dict[str, Any]]:
    """A memcpy of each measured rank's bytes, timed in the same actor."""
    references = []
    for record in records:
        figures = ray.get(actor.memcpy.remote(record["rank_bytes"], repeats))
        references.append({"dp_size": record["dp_size"], "rank": record["rank"], **figures})
    return references


def rank_phase(
    workload: Workload, batch: RolloutBatch, options: Options, progress: Progress
) -> dict[str, Any]:
    """Time the ranks of every configuration; return ``per_rank`` and ``memcpy`` records."""
    per_rank: list[dict[str, Any]] = []
    memcpy: list[dict[str, Any]] = []
    for dp_size in options.dp_sizes:
        for path, mode in CONFIGS:
            with progress.task(f"ranks {path} {mode} dp={dp_size}"):
                refs = _put(workload, batch, path, mode, dp_size, options.balance_data)
                actor = RankActor.remote()  # type: ignore[attr-defined]
                ray.get(actor.ready.remote())
                records = _time_config(actor, refs, path, mode, dp_size, options)
                if (path, mode) == ("arrow", "delayed"):
                    memcpy += _memcpy(actor, records, options.runs)
                ray.kill(actor)
                del refs, actor
                gc.collect()
                per_rank += records
    return {"per_rank": per_rank, "memcpy": memcpy}
