"""One rank's take: arrow_split's row gather against Arrow's own ``RecordBatch.take``.

arrow_split's take copies each selected row's run of values whole (one copy per row and
column); Arrow's ``take`` on a list column gathers element by element. Both get the same rows:
the rank's partition of the balanced plan (:func:`arrow_split.partition_for_rank`) on the named
workload (:data:`arrow_split.testing.WORKLOADS`), and must give equal record batches. The timed
calls are :func:`arrow_split.take_rows` and ``pyarrow.RecordBatch.take``. Run::

    python -m benchmarks.bench_take --workload medium --dp-size 64 --json take.json
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from arrow_split import RolloutBatch, partition_for_rank, take_rows
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks.timing import Repeats, summarize

__all__ = ["main", "measure_take"]


def _seconds(call: Callable[[], object], repeats: Repeats) -> dict[str, Any]:
    seconds = []
    for _ in repeats:
        gc.collect()
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return summarize(seconds)


def measure_take(
    workload: str, dp_size: int, dp_rank: int, repeats: Repeats, *, moe: bool = False
) -> dict[str, Any]:
    """Check, then time both takes of one rank's rows; JSON-ready.

    Raises ``AssertionError`` if the two takes give different record batches.
    """
    config = dataclasses.replace(
        WORKLOADS[workload], as_numpy=True, moe_shape=(8, 4) if moe else None
    )
    batch = RolloutBatch.from_train_data(make_train_data(config))
    indices = partition_for_rank(batch.total_lengths, dp_rank, dp_size, balance_data=True)
    shard = take_rows(batch, indices)
    arrow = batch.record_batch.take(pa.array(indices))
    if not shard.record_batch.equals(arrow):
        msg = f"take_rows and RecordBatch.take differ for rank {dp_rank} of {dp_size}"
        raise AssertionError(msg)
    ours = _seconds(lambda: take_rows(batch, indices), repeats)
    theirs = _seconds(lambda: batch.record_batch.take(pa.array(indices)), repeats)
    return {
        "workload": workload,
        "moe": moe,
        "dp_size": dp_size,
        "dp_rank": dp_rank,
        "rows": len(indices),
        "batch_bytes": batch.nbytes,
        "shard_bytes": shard.nbytes,
        "seconds": {"take_rows": ours, "record_batch_take": theirs},
        "speedup_median": theirs["median"] / ours["median"],
        "speedup_min": theirs["min"] / ours["min"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=list(WORKLOADS), default="medium")
    parser.add_argument("--dp-size", type=int, default=64)
    parser.add_argument("--dp-rank", type=int, default=0)
    parser.add_argument("--moe", action="store_true", help="add rollout_routed_experts")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    result = measure_take(
        args.workload, args.dp_size, args.dp_rank, Repeats(args.repeats), moe=args.moe
    )
    seconds = result["seconds"]
    print(
        f"{args.workload}, rank {args.dp_rank} of {args.dp_size}: {result['rows']} rows, "
        f"{result['shard_bytes'] / 2**20:.2f} MiB; take_rows "
        f"{seconds['take_rows']['median'] * 1e3:.3g} ms, RecordBatch.take "
        f"{seconds['record_batch_take']['median'] * 1e3:.3g} ms (medians): "
        f"{result['speedup_median']:.2f}x"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
