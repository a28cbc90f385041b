"""Time arrow_split's balanced planner against the plain-Python Karmarkar-Karp of the baseline.

For each ``n:dp_size`` pair, draw seeded, long-tailed sample lengths
(:func:`arrow_split.testing.make_lengths`: a prompt of 64..512 tokens plus an exponential
response of mean 4000 tokens, capped at 8192), check that
``arrow_split.plan_partitions(..., balance_data=True)`` returns exactly what
:func:`benchmarks.baseline.classic_partitions` returns, then time both. Run::

    python -m benchmarks.bench_planner --sizes 4096:64,65536:256 --repeats 5 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from arrow_split import plan_partitions
from arrow_split.testing import RolloutConfig, make_lengths
from benchmarks.baseline import classic_partitions
from benchmarks.timing import summarize

__all__ = ["main", "measure_planner"]


def _seconds(call: Callable[[], object], repeats: int) -> dict[str, Any]:
    seconds = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return summarize(seconds)


def measure_planner(n: int, dp_size: int, repeats: int, *, seed: int = 0) -> dict[str, Any]:
    """Check and time both planners at ``n`` samples over ``dp_size`` ranks; JSON-ready.

    Raises ``AssertionError`` if the two planners disagree.
    """
    config = RolloutConfig(samples=n, response_mean=4000.0, response_cap=8192, seed=seed)
    lengths = make_lengths(config)
    length_list = lengths.tolist()
    planned = [part.tolist() for part in plan_partitions(lengths, dp_size, balance_data=True)]
    if planned != classic_partitions(length_list, dp_size, True):
        msg = f"arrow_split and the baseline plan differently at n={n}, dp_size={dp_size}"
        raise AssertionError(msg)
    planner = _seconds(lambda: plan_partitions(lengths, dp_size, balance_data=True), repeats)
    reference = _seconds(lambda: classic_partitions(length_list, dp_size, True), repeats)
    return {
        "n": n,
        "dp_size": dp_size,
        "repeats": repeats,
        "seed": seed,
        "identical": True,
        "planner_s": planner,
        "reference_s": reference,
        "speedup_min": reference["min"] / planner["min"],
        "speedup_median": reference["median"] / planner["median"],
    }


def _sizes(text: str) -> list[tuple[int, int]]:
    try:
        return [(int(n), int(dp)) for n, dp in (item.split(":") for item in text.split(","))]
    except ValueError:
        msg = f"expected N:DP_SIZE pairs such as 4096:64,65536:256, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=_sizes("4096:64,65536:256"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    results = []
    for n, dp_size in args.sizes:
        result = measure_planner(n, dp_size, args.repeats, seed=args.seed)
        print(
            f"n={n} dp_size={dp_size}: arrow_split {result['planner_s']['median'] * 1e3:.2f} ms, "
            f"baseline {result['reference_s']['median'] * 1e3:.2f} ms (medians), "
            f"{result['speedup_median']:.1f}x"
        )
        results.append(result)
    if args.json is not None:
        report = {
            "benchmark": "bench_planner",
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "platform": platform.platform(),
            "results": results,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
