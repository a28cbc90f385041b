"""Time the balanced planner against the plain-Python reference planner.

For each ``n:dp_size`` pair, draw seeded, long-tailed sample lengths (a prompt of 64..512 tokens
plus an exponential response of mean 4000 tokens, capped at 8192), check that
``arrow_split.partition.plan_partitions(..., balance_data=True)`` returns exactly what
``tests.reference_plan.reference_partitions`` returns, then time both and print the minimum and
median of each and the speed-up. Run from the repository root::

    python benchmarks/bench_planner.py --sizes 4096:64,65536:256,65536:8 --repeats 5 --json out.json

:func:`measure_planner` is the reusable piece for a larger benchmark harness.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: make `arrow_split` and `tests` importable from the repository root.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from arrow_split.partition import plan_partitions
from tests.reference_plan import reference_partitions

PROMPT_TOKENS = (64, 512)
RESPONSE_MEAN_TOKENS = 4000.0
RESPONSE_CAP_TOKENS = 8192


def rollout_lengths(n: int, seed: int = 0) -> np.ndarray:
    """Return `n` seeded total lengths shaped like RL rollouts: prompt plus long-tailed response."""
    rng = np.random.default_rng(seed)
    prompt = rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1, size=n)
    response = np.rint(rng.exponential(RESPONSE_MEAN_TOKENS, size=n)).astype(np.int64)
    return (prompt + np.minimum(response, RESPONSE_CAP_TOKENS)).astype(np.int64)


def _time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - start)
    return seconds


def _summary(seconds: list[float]) -> dict[str, Any]:
    return {"min": min(seconds), "median": statistics.median(seconds), "all": seconds}


def measure_planner(n: int, dp_size: int, repeats: int, *, seed: int = 0) -> dict[str, Any]:
    """Check and time the balanced planner and the reference at `n` samples over `dp_size` ranks.

    Returns a JSON-ready dict: the case, the seconds of each planner (``min``, ``median``,
    ``all``) and the speed-ups (reference time over planner time). Raises ``AssertionError`` if
    the two planners disagree.
    """
    lengths = rollout_lengths(n, seed)
    length_list = lengths.tolist()
    planned = plan_partitions(lengths, dp_size, balance_data=True)
    expected = reference_partitions(length_list, dp_size, True)
    if [part.tolist() for part in planned] != expected:
        msg = f"plan_partitions and reference_partitions disagree at n={n}, dp_size={dp_size}"
        raise AssertionError(msg)
    planner = _summary(
        _time_calls(lambda: plan_partitions(lengths, dp_size, balance_data=True), repeats)
    )
    reference = _summary(
        _time_calls(lambda: reference_partitions(length_list, dp_size, True), repeats)
    )
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


def _parse_sizes(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        n, _, dp_size = item.partition(":")
        if not dp_size:
            msg = f"size {item!r} must look like N:DP_SIZE, e.g. 65536:256"
            raise argparse.ArgumentTypeError(msg)
        sizes.append((int(n), int(dp_size)))
    return sizes


def _print_row(result: dict[str, Any]) -> None:
    planner, reference = result["planner_s"], result["reference_s"]
    print(
        f"{result['n']:>8} {result['dp_size']:>8} "
        f"{planner['min'] * 1e3:>10.2f} {planner['median'] * 1e3:>10.2f} "
        f"{reference['min'] * 1e3:>10.2f} {reference['median'] * 1e3:>10.2f} "
        f"{result['speedup_min']:>8.1f}x {result['speedup_median']:>8.1f}x"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_parse_sizes, default=_parse_sizes("4096:64,65536:256"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    print(
        f"{'n':>8} {'dp_size':>8} {'plan min':>10} {'plan med':>10} {'ref min':>10} "
        f"{'ref med':>10} {'x (min)':>9} {'x (med)':>9}   (times in ms)"
    )
    results = []
    for n, dp_size in args.sizes:
        result = measure_planner(n, dp_size, args.repeats, seed=args.seed)
        _print_row(result)
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
