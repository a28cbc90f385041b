"""The MoE workload at real shape: narrow routed-expert ids against int32 and the classic path.

README.md ("Routed experts, dumps") says what is measured, for :data:`VARIANTS`: ``narrow``
(ids stored uint8), ``int32`` (the column declared ``storage="exact"``), ``classic`` (the numpy
dict, :mod:`benchmarks.baseline`). The rank is the one with the most tokens, in a fresh
:class:`~benchmarks.step_paths.StepRankActor` (its first call warms the actor up, untimed);
medians over the repeats of :data:`SIZES`. Writes ``moe.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np
import ray

from arrow_split import KNOWN_COLUMNS, RolloutBatch
from arrow_split.ray import split_train_data_by_dp
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks import baseline
from benchmarks._common import (
    Results,
    benchmark_parser,
    local_ray,
    object_sizes,
    run_main,
    summarize,
    timed,
)
from benchmarks.step_paths import StepRankActor, boundary, largest_ranks

__all__ = ["SIZES", "VARIANTS", "build", "parse_args", "run"]

EXPERTS = "rollout_routed_experts"
VARIANTS = ("narrow", "int32", "classic")
SIZES = {
    False: {"samples": 256, "layers": 48, "top_k": 8, "dp_size": 8, "repeats": 3, "seed": 0},
    True: {"samples": 16, "layers": 4, "top_k": 2, "dp_size": 2, "repeats": 1, "seed": 0},
}
"""The full run's sizes (``SIZES[False]``) and the ``--smoke`` run's (``SIZES[True]``)."""


def build(variant: str, data: Mapping[str, Any]) -> Any:
    """What the driver puts for ``variant``: a RolloutBatch, or the dict itself (classic)."""
    if variant == "classic":
        return dict(data)
    exact = dataclasses.replace(KNOWN_COLUMNS[EXPERTS], storage="exact")
    return RolloutBatch.from_train_data(data, specs=[exact] if variant == "int32" else [])


def _put(variant: str, payload: Any, mode: str, dp_size: int) -> Any:
    """The driver's put: the classic path's step boundary, or arrow_split's split."""
    if variant == "classic":
        return boundary("classic", mode, payload, dp_size, True)[0]
    return split_train_data_by_dp(payload, dp_size, balance_data=True, delay=mode == "delayed")


def _rank_seconds(variant: str, refs: Any, mode: str, dp: int, rank: int, repeats: int) -> Any:
    """``rank`` (the most tokens) in a fresh actor: its step's seconds (first call untimed)."""
    actor = StepRankActor.remote()  # type: ignore[attr-defined]
    path = "classic" if variant == "classic" else "arrow"
    calls = [
        ray.get(actor.run.remote(path, mode, [refs], rank, dp, True)) for _ in range(repeats + 1)
    ]
    ray.kill(actor)
    return {"rank": rank, **summarize(call["seconds"] for call in calls[1:])}


def _variant(variant: str, data: Mapping[str, Any], options: argparse.Namespace) -> dict[str, Any]:
    payload = build(variant, data)
    figures: dict[str, Any] = {"build_seconds": timed(lambda: build(variant, data), 1)}
    if isinstance(payload, RolloutBatch):
        figures["experts_type"] = str(payload.column(EXPERTS).type)
        figures["experts_nbytes"] = payload.column(EXPERTS).nbytes
    lengths = np.array([len(tokens) for tokens in data["tokens"]], dtype=np.int64)
    dp = options.dp_size
    rank = largest_ranks(baseline.classic_partitions(lengths.tolist(), dp, True), lengths, 1)[0]
    for mode in ("delayed", "eager"):
        refs = _put(variant, payload, mode, dp)
        stored = sorted(object_sizes(refs))  # one per rank or node group when eager
        ranked = _rank_seconds(variant, refs, mode, dp, rank, options.repeats)
        del refs
        put = timed(lambda mode=mode: _put(variant, payload, mode, dp), options.repeats)
        figures[f"{mode}/{dp}"] = {"stored_bytes": stored, "put_seconds": put, "rank": ranked}
    return figures


def run(options: argparse.Namespace) -> dict[str, Results]:
    """``{"moe.json": every variant's figures and the summary}``."""
    config = dataclasses.replace(
        WORKLOADS["small"],
        samples=options.samples,
        seed=options.seed,
        as_numpy=True,
        moe_shape=(options.layers, options.top_k),
    )
    data = make_train_data(config)
    experts = data[EXPERTS]
    workload = {
        "samples": len(data["tokens"]),
        "tokens": int(sum(len(tokens) for tokens in data["tokens"])),
        "moe_shape": [options.layers, options.top_k],
        "expert_id_max": int(max((int(a.max()) for a in experts if a.size), default=0)),
        "input_experts_bytes": sum(array.nbytes for array in experts),
        "dp_size": options.dp_size,
        "repeats": options.repeats,
    }
    store = max(2**30, 3 * workload["input_experts_bytes"] + 2**29)
    with local_ray(store):
        variants = {variant: _variant(variant, data, options) for variant in VARIANTS}
    results = {"workload": workload, "variants": variants, "object_store_bytes": store}
    results["summary"] = summary(variants, options.dp_size)
    return {"moe.json": results}


def summary(variants: Mapping[str, Any], dp: int) -> dict[str, Any]:
    """Per variant: bytes stored and median seconds of each phase."""
    lines = {}
    for variant, figures in variants.items():
        eager, delayed = figures[f"eager/{dp}"], figures[f"delayed/{dp}"]
        lines[f"{variant} dp={dp}"] = {
            "build_s": figures["build_seconds"]["median"],
            "stored_bytes_delayed": sum(delayed["stored_bytes"]),
            "stored_bytes_eager": sum(eager["stored_bytes"]),
            "eager_objects": len(eager["stored_bytes"]),
            "put_delayed_s": delayed["put_seconds"]["median"],
            "put_eager_s": eager["put_seconds"]["median"],
            "rank_delayed_s": delayed["rank"]["median"],
            "rank_eager_s": eager["rank"]["median"],
        }
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``--smoke`` and ``--out``; the sizes are :data:`SIZES` (``SIZES[True]``: ``--smoke``)."""
    parser = benchmark_parser("moe", __doc__, "16 samples, 4 layers x top-2, dp 2")
    options = parser.parse_args(argv)
    return argparse.Namespace(**vars(options), **SIZES[options.smoke])


if __name__ == "__main__":
    raise SystemExit(run_main(None, parse_args, run))
