"""Build speed: ``RolloutBatch.from_train_data`` against ``pyarrow.array`` and a memcpy.

From Python lists (what inference engines return) the reference is ``pyarrow.array`` on the same
lists, with the type inferred and with the type given; from per-sample numpy arrays it is one
``np.concatenate`` per column (a memcpy of the bytes, the floor for any columnar build). Every
figure is min/median over repeats, all measured in the same run.

Run: ``python -m benchmarks.bench_build --samples 4096 --repeats 3 --json out.json``
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split import RolloutBatch

_RAGGED = ("tokens", "loss_masks", "rollout_log_probs")


def make_columns(samples: int, seed: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """The same batch as Python lists and as per-sample numpy arrays."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(64, 513, samples)
    responses = np.minimum(rng.exponential(4000, samples).astype(np.int64) + 1, 8192)
    arrays: dict[str, Any] = {
        "tokens": [
            rng.integers(0, 151_000, p + r, dtype=np.int32)
            for p, r in zip(prompts, responses, strict=True)
        ],
        "response_lengths": responses,
        "loss_masks": [np.ones(r, dtype=np.uint8) for r in responses],
        "rollout_log_probs": [-rng.random(r, dtype=np.float32) for r in responses],
    }
    lists = {
        key: value.tolist() if isinstance(value, np.ndarray) else [v.tolist() for v in value]
        for key, value in arrays.items()
    }
    return lists, arrays


def _time(function: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        seconds.append(time.perf_counter() - start)
    return {"min": min(seconds), "median": statistics.median(seconds)}


def _arrow_types() -> dict[str, pa.DataType]:
    return {
        "tokens": pa.large_list(pa.int32()),
        "loss_masks": pa.large_list(pa.uint8()),
        "rollout_log_probs": pa.large_list(pa.float32()),
    }


def measure_build(samples: int, repeats: int) -> dict[str, Any]:
    """Time the four builds on one batch; return the figures and their ratios."""
    lists, arrays = make_columns(samples)
    types = _arrow_types()
    figures = {
        "from_train_data_lists": _time(lambda: RolloutBatch.from_train_data(lists), repeats),
        "pa_array_inferred": _time(lambda: [pa.array(lists[k]) for k in _RAGGED], repeats),
        "pa_array_typed": _time(
            lambda: [pa.array(lists[k], type=types[k]) for k in _RAGGED], repeats
        ),
        "from_train_data_numpy": _time(lambda: RolloutBatch.from_train_data(arrays), repeats),
        "concatenate_numpy": _time(lambda: [np.concatenate(arrays[k]) for k in _RAGGED], repeats),
    }
    batch = RolloutBatch.from_train_data(arrays)
    return {
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "samples": samples,
        "tokens": int(batch.total_lengths.sum()),
        "arrow_bytes": batch.nbytes,
        "seconds": figures,
        "ratios": {
            "lists_vs_pa_array_inferred": figures["from_train_data_lists"]["median"]
            / figures["pa_array_inferred"]["median"],
            "lists_vs_pa_array_typed": figures["from_train_data_lists"]["median"]
            / figures["pa_array_typed"]["median"],
            "numpy_vs_concatenate": figures["from_train_data_numpy"]["median"]
            / figures["concatenate_numpy"]["median"],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="write the figures to this file")
    arguments = parser.parse_args()
    result = measure_build(arguments.samples, arguments.repeats)
    print(
        f"{result['samples']} samples, {result['tokens']:,} tokens, {result['arrow_bytes']:,} B "
        f"as Arrow; peak RSS {result['peak_rss_bytes'] / 2**20:,.0f} MiB"
    )
    for name, figure in result["seconds"].items():
        print(
            f"  {name:<24} min {figure['min'] * 1e3:9.1f} ms"
            f"   median {figure['median'] * 1e3:9.1f} ms"
        )
    for name, ratio in result["ratios"].items():
        print(f"  {name:<28} {ratio:6.2f}x")
    if arguments.json:
        with open(arguments.json, "w", encoding="utf-8") as handle:
            json.dump(result, handle, indent=2)


if __name__ == "__main__":
    main()
