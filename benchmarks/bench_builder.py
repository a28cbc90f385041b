"""Streaming build: ``RolloutBatchBuilder`` appends and finish against a memcpy and a pickle.

The named workload (:data:`arrow_split.testing.WORKLOADS`, Python lists) is fed to one builder in
groups of ``--group-size`` samples (:func:`arrow_split.testing.iter_sample_groups`), as a rollout
loop would as samples finish. Measured in the same run, every figure min/median over repeats, in
CPU seconds of this process (``time.process_time``: the figures hold on a shared machine):

- ``append_cpu``: all the ``extend`` calls of one step (the work that leaves the step's critical
  path); ``finish``: ``finish``;
- ``memcpy``: ``np.concatenate`` of the finished batch's buffers (one copy of its bytes);
- ``pickle``: ``pickle.dumps(train_data, protocol=5)`` of the whole step's dict;
- ``from_train_data``: ``RolloutBatch.from_train_data`` of that dict (the end-of-step path).

The builder is reused across repeats, so repeats after the first run on kept capacity; the
first step's figures are reported apart. ``peak_over_batch``: the most bytes of Arrow's pool
the builder held (sampled after each append and after finish) over the batch's bytes.
Targets: ``finish <= 2 x memcpy`` and ``append_cpu <= pickle``.

Run: ``python -m benchmarks.bench_builder --workload medium --repeats 3 --json out.json``
"""

from __future__ import annotations

import argparse
import pickle
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import WORKLOADS, iter_sample_groups, make_train_data
from benchmarks.bench_build import report_figures
from benchmarks.timing import summarize

__all__ = ["main", "measure_builder"]


def _figures(seconds: list[float]) -> dict[str, float]:
    figures = summarize(seconds)
    return {"min": figures["min"], "median": figures["median"]}


def _time(function: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        start = time.process_time()
        function()
        seconds.append(time.process_time() - start)
    return _figures(seconds)


def _step(
    builder: RolloutBatchBuilder, groups: list[dict[str, Any]]
) -> tuple[RolloutBatch, float, float, int]:
    """One step: the appends' CPU seconds, finish's seconds and the pool's peak bytes."""
    baseline = pa.total_allocated_bytes()  # the step before's batch, if still alive, not counted
    peak, cpu = 0, 0.0
    for group in groups:
        start = time.process_time()
        builder.extend(group)
        cpu += time.process_time() - start
        peak = max(peak, pa.total_allocated_bytes() - baseline)
    start = time.process_time()
    batch = builder.finish()
    finish = time.process_time() - start
    return batch, cpu, finish, max(peak, pa.total_allocated_bytes() - baseline)


def _memcpy(batch: RolloutBatch) -> Callable[[], object]:
    """One copy of every buffer of the batch (the floor of any columnar build)."""
    views = [
        np.frombuffer(buffer, dtype=np.uint8)
        for column in batch.record_batch.columns
        for buffer in column.buffers()
        if buffer is not None
    ]
    return lambda: np.concatenate(views)


def measure_builder(workload: str, repeats: int, group_size: int) -> dict[str, Any]:
    """Feed one workload to a builder ``repeats`` times; return the figures and their ratios."""
    config = WORKLOADS[workload]
    train_data = make_train_data(config)
    groups = list(iter_sample_groups(config, group_size=group_size))
    builder = RolloutBatchBuilder()
    steps, batches = [], []
    for _ in range(repeats + 1):  # the first step grows the buffers
        batches.clear()  # the step before is freed, as in a synchronous loop
        batch, cpu, finish, peak = _step(builder, groups)
        batches.append(batch)
        steps.append((cpu, finish, peak))
    figures = {
        "append_cpu": _figures([cpu for cpu, _, _ in steps[1:]]),
        "finish": _figures([finish for _, finish, _ in steps[1:]]),
        "memcpy": _time(_memcpy(batch), repeats),
        "pickle": _time(lambda: pickle.dumps(train_data, protocol=5), repeats),
        "from_train_data": _time(lambda: RolloutBatch.from_train_data(train_data), repeats),
    }
    median = {name: figure["median"] for name, figure in figures.items()}
    return {
        "workload": workload,
        "group_size": group_size,
        "samples": len(batch),
        "tokens": int(batch.total_lengths.sum()),
        "arrow_bytes": batch.nbytes,
        "first_step": {"append_cpu": steps[0][0], "finish": steps[0][1]},
        "peak_over_batch": max(peak for _, _, peak in steps) / batch.nbytes,
        "seconds": figures,
        "ratios": {
            "finish_vs_memcpy": median["finish"] / median["memcpy"],
            "append_cpu_vs_pickle": median["append_cpu"] / median["pickle"],
            "from_train_data_vs_pickle": median["from_train_data"] / median["pickle"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=list(WORKLOADS), default="medium")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    result = measure_builder(args.workload, args.repeats, args.group_size)
    print(
        f"{result['samples']} samples, {result['tokens']:,} tokens, {result['arrow_bytes']:,} B "
        f"as Arrow, groups of {result['group_size']}; pool peak "
        f"{result['peak_over_batch']:.2f}x the batch"
    )
    report_figures(result, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
