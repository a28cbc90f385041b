"""``python -m benchmarks``: every benchmark the docs quote, each in its own process.

JSON and plots go under ``--out`` (default ``benchmarks/results``, ignored by git; ``make bench``
passes ``docs/benchmarks``); ``--smoke`` runs each in its smallest mode, ``--only`` some.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from benchmarks._common import REPO_ROOT, RESULTS

__all__ = ["BENCHMARKS", "main"]

BENCHMARKS: dict[str, tuple[str, ...]] = {
    "step": ("benchmarks.step", "--workload", "medium"),
    "moe": ("benchmarks.moe",),
    "journal": ("benchmarks.journal",),
    "cluster": ("benchmarks.cluster", "--steps", "8", "--soak-steps", "300"),
    "miles_job": ("benchmarks.miles_job",),
    "rank_bytes": ("benchmarks.rank_bytes",),
    "mooncake": ("benchmarks.mooncake",),
}
"""Every benchmark of ``make bench``: name -> module and its arguments of the full run."""


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks one after the other; stop at the first that fails."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--smoke", action="store_true", help="each benchmark's smallest mode")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated names")
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="where the JSON and plots go (default: %(default)s; docs/benchmarks for the README)",
    )
    args = parser.parse_args(argv)
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; expected some of {sorted(BENCHMARKS)}")
    for position, name in enumerate(names, 1):
        module, *options = BENCHMARKS[name]
        if args.smoke:
            options = ["--smoke"]
        command = [sys.executable, "-m", module, *options, "--out", str(args.out)]
        print(f"== [{position}/{len(names)}] {name}: {' '.join(command[1:])}", flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO_ROOT, check=False)
        print(f"== {name}: {time.perf_counter() - started:.0f} s", flush=True)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
