"""Build speed: ``RolloutBatch.from_train_data`` against ``pyarrow.array`` and a memcpy.

From Python lists (what inference engines return) the reference is ``pyarrow.array`` on the same
lists, with the type inferred and with the type given; from per-sample numpy arrays it is one
``np.concatenate`` per column (a memcpy of the bytes, the floor for any columnar build). The
batch is the named workload's (:data:`arrow_split.testing.WORKLOADS`), its ragged columns and
``response_lengths``. Every figure is min/median over repeats, all measured in the same run.

Run: ``python -m benchmarks.bench_build --workload medium --repeats 3 --json out.json``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import RolloutBatch
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks.timing import summarize

__all__ = ["main", "measure_build", "report_figures"]

_TYPES = {
    "tokens": pa.large_list(pa.int32()),
    "loss_masks": pa.large_list(pa.uint8()),
    "rollout_log_probs": pa.large_list(pa.float32()),
}
_KEYS = ("tokens", "response_lengths", "loss_masks", "rollout_log_probs")


def _time(function: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    figures = summarize(seconds)
    return {"min": figures["min"], "median": figures["median"]}


def measure_build(workload: str, repeats: int) -> dict[str, Any]:
    """Time the five builds on one batch; return the figures and their ratios."""
    config = WORKLOADS[workload]
    numpy_data = make_train_data(dataclasses.replace(config, as_numpy=True))
    arrays = {key: numpy_data[key] for key in _KEYS}
    lists = {key: value for key, value in make_train_data(config).items() if key in _KEYS}
    figures = {
        "from_train_data_lists": _time(lambda: RolloutBatch.from_train_data(lists), repeats),
        "pa_array_inferred": _time(lambda: [pa.array(lists[k]) for k in _TYPES], repeats),
        "pa_array_typed": _time(
            lambda: [pa.array(lists[k], type=t) for k, t in _TYPES.items()], repeats
        ),
        "from_train_data_numpy": _time(lambda: RolloutBatch.from_train_data(arrays), repeats),
        "concatenate_numpy": _time(lambda: [np.concatenate(arrays[k]) for k in _TYPES], repeats),
    }
    batch = RolloutBatch.from_train_data(arrays)
    median = {name: figure["median"] for name, figure in figures.items()}
    return {
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "workload": workload,
        "samples": len(batch),
        "tokens": int(batch.total_lengths.sum()),
        "arrow_bytes": batch.nbytes,
        "seconds": figures,
        "ratios": {
            "lists_vs_pa_array_inferred": median["from_train_data_lists"]
            / median["pa_array_inferred"],
            "lists_vs_pa_array_typed": median["from_train_data_lists"] / median["pa_array_typed"],
            "numpy_vs_concatenate": median["from_train_data_numpy"] / median["concatenate_numpy"],
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=list(WORKLOADS), default="medium")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    args = parser.parse_args(argv)
    result = measure_build(args.workload, args.repeats)
    print(
        f"{result['samples']} samples, {result['tokens']:,} tokens, {result['arrow_bytes']:,} B "
        f"as Arrow; peak RSS {result['peak_rss_bytes'] / 2**20:,.0f} MiB"
    )
    report_figures(result, args.json)
    return 0


def report_figures(result: dict[str, Any], json_path: str | None) -> None:
    """Print the min/median of every timed figure and every ratio; write the JSON if asked."""
    for name, figure in result["seconds"].items():
        low, mid = figure["min"] * 1e3, figure["median"] * 1e3
        print(f"  {name:<24} min {low:9.1f} ms   median {mid:9.1f} ms")
    for name, ratio in result["ratios"].items():
        print(f"  {name:<28} {ratio:6.2f}x")
    if json_path:
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    raise SystemExit(main())
