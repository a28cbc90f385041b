"""The MoE workload at real shape: narrow routed-expert ids against int32 and the classic path.

Run from the repository root::

    python -m benchmarks.moe                       # 256 samples, 48 layers x top-8
    python -m benchmarks.moe --smoke --out /tmp        # seconds: what the tests run

The ``small`` workload (256 samples, seed 0) with ``rollout_routed_experts`` of
``[len(tokens) - 1, 48, 8]`` ids < 128 per sample (816 MB as int32), carried three ways:
``narrow`` (:meth:`arrow_split.RolloutBatch.from_train_data`: ids stored uint8), ``int32`` (the
column declared ``storage="exact"``) and ``classic`` (the numpy dict pickled into Ray,
:mod:`benchmarks.baseline`). For each and each dp_size: the driver's build, delayed and eager
put with the bytes Ray stored (``object_size``), then a few ranks' steps in a fresh
:class:`benchmarks.step_ranks.StepRankActor`, eager and delayed; minimum and median over
``--repeats`` runs. Writes ``moe.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import ray

from arrow_split import KNOWN_COLUMNS, RolloutBatch
from arrow_split.ray import split_train_data_by_dp
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks import baseline
from benchmarks._common import (
    DOCS,
    MemoryGauge,
    local_ray,
    stamp,
    start_stamp,
    summarize,
    write_json,
)
from benchmarks.step_ranks import StepRankActor, largest_ranks

__all__ = ["VARIANTS", "build", "main", "make_data", "parse_args", "run"]

EXPERTS = "rollout_routed_experts"
VARIANTS = ("narrow", "int32", "classic")
BALANCE = True
_MIB = 2**20


def make_data(samples: int, layers: int, top_k: int, seed: int = 0) -> dict[str, Any]:
    """The ``small`` workload's numeric columns as numpy, with routed experts ``[n-1, L, k]``."""
    config = dataclasses.replace(
        WORKLOADS["small"],
        samples=samples,
        moe_shape=(layers, top_k),
        as_numpy=True,
        seed=seed,
    )
    return make_train_data(config)


def build(variant: str, data: Mapping[str, Any]) -> Any:
    """What the driver puts for ``variant``: a RolloutBatch, or the dict itself (classic)."""
    if variant == "classic":
        return dict(data)
    specs = []
    if variant == "int32":
        specs.append(dataclasses.replace(KNOWN_COLUMNS[EXPERTS], storage="exact"))
    return RolloutBatch.from_train_data(data, specs=specs)


def _timed(call: Callable[[], Any], runs: range) -> tuple[dict[str, Any], Any]:
    """Seconds and the worst driver memory figures over the runs, and the last result."""
    seconds, memory, result = [], [], None
    for _ in runs:
        result = None
        gc.collect()
        with MemoryGauge() as gauge:
            start = time.perf_counter()
            result = call()
            seconds.append(time.perf_counter() - start)
        memory.append(gauge.figures)
    worst = {key: max(entry[key] for entry in memory) for key in memory[0]}
    return {"seconds": summarize(seconds), "driver": worst}, result


def _stored(refs: list[Any]) -> dict[str, Any]:
    """Bytes Ray stored for these objects, in all and per object (per rank when eager)."""
    locations = ray.experimental.get_object_locations(refs)
    sizes = [int(locations[ref].get("object_size") or 0) for ref in refs]
    return {
        "objects": len(refs),
        "store_bytes": sum(sizes),
        "per_object_bytes": {"min": min(sizes), "max": max(sizes), "mean": sum(sizes) / len(sizes)},
        "spilled": any(bool(entry.get("did_spill")) for entry in locations.values()),
    }


def _put(variant: str, payload: Any, mode: str, dp_size: int) -> Any:
    if variant == "classic":
        if mode == "eager":
            return baseline.put_eager(payload, dp_size, BALANCE)
        return baseline.put_delayed(payload)
    return split_train_data_by_dp(payload, dp_size, balance_data=BALANCE, delay=mode == "delayed")


def _measure_put(variant: str, payload: Any, mode: str, dp: int, runs: range) -> dict[str, Any]:
    figures, refs = _timed(lambda: _put(variant, payload, mode, dp), runs)
    stored = _stored(refs if isinstance(refs, list) else [refs])
    del refs
    return {**figures, **stored}


def _measure_ranks(
    variant: str, payload: Any, mode: str, dp: int, ranks: int, runs: range
) -> list[dict[str, Any]]:
    """The largest ranks' steps in a fresh actor (the first call warms it up, untimed)."""
    refs = _put(variant, payload, mode, dp)
    actor = StepRankActor.remote()  # type: ignore[attr-defined]
    path = "classic" if variant == "classic" else "arrow"
    lengths = _lengths(payload)
    partitions = baseline.classic_partitions(lengths.tolist(), dp, BALANCE)
    records = []
    for rank in largest_ranks(partitions, lengths, ranks):
        call = functools.partial(actor.run.remote, path, mode, [refs], rank, dp, BALANCE)
        ray.get(call())
        calls = [ray.get(call()) for _ in runs]
        seconds = summarize(record["seconds"] for record in calls)
        records.append({"rank": rank, "seconds": seconds, "memory": calls[-1]["memory"]})
    ray.kill(actor)
    del refs, actor
    gc.collect()
    return records


def _lengths(payload: Any) -> np.ndarray:
    if isinstance(payload, RolloutBatch):
        return np.asarray(payload.total_lengths, dtype=np.int64)
    return np.array([len(tokens) for tokens in payload["tokens"]], dtype=np.int64)


def _variant(variant: str, data: Mapping[str, Any], options: argparse.Namespace) -> dict[str, Any]:
    runs = range(options.repeats)
    figures, payload = _timed(lambda: build(variant, data), range(1))
    result: dict[str, Any] = {"build": figures}
    if isinstance(payload, RolloutBatch):
        column = payload.column(EXPERTS)
        result["nbytes"] = payload.nbytes
        result["experts_nbytes"] = column.nbytes
        result["experts_type"] = str(column.type)
    first = options.dp_sizes[0]
    result["put"] = {"delayed": _measure_put(variant, payload, "delayed", first, runs)}
    result["put"]["delayed"].pop("per_object_bytes")
    result["put"]["eager"], result["ranks"] = {}, {}
    for dp in options.dp_sizes:
        result["put"]["eager"][str(dp)] = _measure_put(variant, payload, "eager", dp, runs)
        result["ranks"][str(dp)] = {
            mode: _measure_ranks(variant, payload, mode, dp, options.ranks, runs)
            for mode in ("eager", "delayed")
        }
    del payload
    gc.collect()
    return result


def _describe(data: Mapping[str, Any], options: argparse.Namespace) -> dict[str, Any]:
    experts = data[EXPERTS]
    ids = sum(array.size for array in experts)
    return {
        "samples": len(data["tokens"]),
        "tokens": int(sum(len(tokens) for tokens in data["tokens"])),
        "moe_shape": [options.layers, options.top_k],
        "expert_ids": ids,
        "expert_id_max": int(max((int(a.max()) for a in experts if a.size), default=0)),
        "input_experts_bytes": sum(array.nbytes for array in experts),
        "dp_sizes": list(options.dp_sizes),
        "repeats": options.repeats,
        "balance_data": BALANCE,
    }


def run(options: argparse.Namespace) -> dict[str, Any]:
    """Every variant's figures, JSON-ready."""
    started = start_stamp()
    data = make_data(options.samples, options.layers, options.top_k, options.seed)
    workload = _describe(data, options)
    store = max(1024 * _MIB, 3 * workload["input_experts_bytes"] + 512 * _MIB)
    results: dict[str, Any] = {"workload": workload, "variants": {}}
    with local_ray(store):
        for variant in options.variants:
            print(f"measuring {variant}...", file=sys.stderr)
            results["variants"][variant] = _variant(variant, data, options)
    results["summary"] = summary(results)
    results["object_store_bytes"] = store
    results["stamp"] = stamp(started)
    return results


def _median(figures: Mapping[str, Any] | list[dict[str, Any]]) -> float:
    """The median seconds of a phase, or the median over ranks of their medians."""
    if isinstance(figures, list):
        return float(np.median([record["seconds"]["median"] for record in figures]))
    return float(figures["seconds"]["median"])


def summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """One line per variant and dp_size: bytes and median seconds of each phase."""
    lines: dict[str, Any] = {}
    for variant, figures in results["variants"].items():
        for dp, eager in figures["put"]["eager"].items():
            ranks = figures["ranks"][dp]
            lines[f"{variant} dp={dp}"] = {
                "build_s": _median(figures["build"]),
                "stored_bytes_delayed": figures["put"]["delayed"]["store_bytes"],
                "stored_bytes_eager": eager["store_bytes"],
                "bytes_per_rank_eager_max": eager["per_object_bytes"]["max"],
                "put_delayed_s": _median(figures["put"]["delayed"]),
                "put_eager_s": _median(eager),
                "rank_eager_s": _median(ranks["eager"]),
                "rank_delayed_s": _median(ranks["delayed"]),
            }
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.moe", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--top-k", type=int, default=8)
    parser.add_argument("--dp-sizes", default="8", help="comma-separated, e.g. 8,64")
    parser.add_argument("--ranks", type=int, default=2, help="ranks timed per configuration")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--smoke", action="store_true", help="16 samples, 4 layers x top-2, dp 2")
    parser.add_argument("--out", type=Path, default=DOCS, help="where moe.json goes")
    options = parser.parse_args(argv)
    if options.smoke:
        options.samples, options.layers, options.top_k, options.dp_sizes = 16, 4, 2, "2"
        options.repeats, options.ranks = 1, 1
    options.dp_sizes = tuple(int(item) for item in options.dp_sizes.split(","))
    options.variants = tuple(item for item in options.variants.split(",") if item)
    unknown = sorted(set(options.variants) - set(VARIANTS))
    if unknown or options.repeats < 1 or min(options.dp_sizes) < 1:
        parser.error(f"bad --variants {unknown}, --repeats or --dp-sizes")
    return options


def main(argv: list[str] | None = None) -> int:
    """Run, write the JSON, print the summary."""
    options = parse_args(argv)
    results = run(options)
    path = write_json(results, options.out / "moe.json")
    for line, figures in results["summary"].items():
        print(line, {key: round(value, 4) for key, value in figures.items()})
    print(f"wrote {path}; wall time {results['stamp']['wall_seconds']:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
