"""The miles drop-in against the classic path: driver put and one rank's actor dict, per mode.

Both paths end where miles' train side starts: rank ``r``'s actor-layout dict of Python lists
(no ``partition``, ``total_lengths`` of its rows). Classic: the driver splits the dict and puts
one dict per rank (eager) or the whole dict (delayed, each rank then splits it all again), as
miles does today. Drop-in: :func:`arrow_split.compat.miles.split_train_data_by_dp` and
:func:`~arrow_split.compat.miles.process_rollout_data`, eager (strided or balanced plan), eager
with the rollout-side schedule (every sample its own rollout, two steps), and delayed. A local
Ray runs both; the rank is played in the driver process, after a first check that both paths
give the rank the same dict. Run::

    python -m benchmarks.bench_compat --workload medium --dp-size 8 --json compat.json
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from argparse import Namespace
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from arrow_split.compat import miles
from benchmarks import baseline
from benchmarks.config import Workload
from benchmarks.phases import shard_differences
from benchmarks.timing import summarize

__all__ = ["main", "measure_compat"]


def _args(balance_data: bool, delay: bool, global_batch_size: int) -> Namespace:
    return Namespace(
        balance_data=balance_data,
        delay_split_train_data_by_dp=delay,
        multi_lora=False,
        multi_lora_n_adapters=None,
        global_batch_size=global_batch_size,
        micro_batch_size=1,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=16384,
    )


def _classic_actor_dict(shard: dict[str, Any]) -> dict[str, Any]:
    """miles' train-side completion of a classic shard."""
    partition = shard.pop("partition")
    total_lengths = shard["total_lengths"]
    shard["total_lengths"] = [total_lengths[row] for row in partition]
    return shard


def _classic_eager(data: dict[str, Any], dp_size: int, balance: bool, rank: int) -> Any:
    refs = baseline.put_eager(data, dp_size, balance)
    return refs, lambda: _classic_actor_dict(dict(ray.get(refs[rank])))


def _classic_delayed(data: dict[str, Any], dp_size: int, balance: bool, rank: int) -> Any:
    ref = baseline.put_delayed(data)

    def rank_side() -> dict[str, Any]:
        whole = ray.get(ref)
        shards = baseline.classic_split(whole, dp_size, balance)
        return _classic_actor_dict(shards[rank])

    return ref, rank_side


def _compat(
    data: dict[str, Any], args: Namespace, config: dict[str, Any], rank: int, dp_size: int
) -> Any:
    refs = miles.split_train_data_by_dp(args, data, config)
    return refs, lambda: miles.process_rollout_data(args, refs, rank, dp_size)[0]


def _time(call: Callable[[], Any], repeats: int) -> tuple[dict[str, Any], Any]:
    seconds, result = [], None
    for _ in range(repeats):
        result = None
        gc.collect()
        start = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - start)
    return summarize(seconds), result


def _path_figures(put: Callable[[], Any], repeats: int) -> tuple[dict[str, Any], Any]:
    put_seconds, (refs, rank_side) = _time(put, repeats)
    rank_seconds, actor_dict = _time(rank_side, repeats)
    del refs
    return {"put": put_seconds, "rank": rank_seconds}, actor_dict


def measure_compat(
    workload: str, dp_size: int, dp_rank: int, repeats: int, *, balance: bool = True
) -> dict[str, Any]:
    """Check, then time every path; JSON-ready.

    Raises ``AssertionError`` if the classic and the drop-in eager paths give the rank
    different dicts (float32 columns compared as the trainer sees them).
    """
    generated = Workload.generate(workload)
    data = dict(generated.lists)
    data["rollout_ids"] = list(range(len(data["tokens"])))
    steps_of = len(data["tokens"]) // 2
    plan_config = {"dp_size": dp_size}
    schedule_config = {
        "dp_size": dp_size,
        "cp_size": 1,
        "vpp_size": 1,
        "microbatch_group_size_per_vp_stage": None,
    }
    eager, delayed = _args(balance, False, steps_of), _args(balance, True, steps_of)
    paths: dict[str, Callable[[], Any]] = {
        "classic eager": lambda: _classic_eager(data, dp_size, balance, dp_rank),
        "classic delayed": lambda: _classic_delayed(data, dp_size, balance, dp_rank),
        "compat eager": lambda: _compat(data, eager, plan_config, dp_rank, dp_size),
        "compat eager + schedule": lambda: _compat(data, eager, schedule_config, dp_rank, dp_size),
        "compat delayed": lambda: _compat(data, delayed, plan_config, dp_rank, dp_size),
    }
    figures, dicts = {}, {}
    for name, put in paths.items():
        figures[name], dicts[name] = _path_figures(put, repeats)
    differences = shard_differences(dicts["classic eager"], dicts["compat eager"])
    if set(differences) - {"rollout_log_probs"}:  # float32 rounding is the documented policy
        msg = f"classic and compat eager disagree on {differences}"
        raise AssertionError(msg)
    classic = figures["classic eager"]
    return {
        "workload": generated.describe(),
        "dp_size": dp_size,
        "dp_rank": dp_rank,
        "balance_data": balance,
        "repeats": repeats,
        "seconds": figures,
        "rank_speedup_vs_classic_eager": {
            name: classic["rank"]["median"] / f["rank"]["median"] for name, f in figures.items()
        },
        "put_speedup_vs_classic_eager": {
            name: classic["put"]["median"] / f["put"]["median"] for name, f in figures.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="medium")
    parser.add_argument("--dp-size", type=int, default=8)
    parser.add_argument("--dp-rank", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strided", action="store_true", help="strided plan, not balanced")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    options = parser.parse_args(argv)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        result = measure_compat(
            options.workload,
            options.dp_size,
            options.dp_rank,
            options.repeats,
            balance=not options.strided,
        )
    finally:
        ray.shutdown()
    for name, figures in result["seconds"].items():
        print(
            f"{name:>24}: put {figures['put']['median'] * 1e3:9.1f} ms, "
            f"rank {figures['rank']['median'] * 1e3:9.1f} ms (medians)"
        )
    if options.json is not None:
        options.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {options.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
