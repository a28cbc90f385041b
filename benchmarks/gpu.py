"""The GPU hand-off: one rank's shard to device tensors, against the floor of its bytes.

Per configuration (the medium workload's dp 8 and dp 64 ranks; the MoE rank: 128 samples with
routed experts ``(48, 8)`` stored narrow), in one run: the pinned and pageable host-to-device
bandwidths and a host memcpy of the rank's stored bytes; the *floor* (those bytes once through a
host memcpy plus once over the pinned link); ``to_tensors(shard, device="cuda")`` for each layout;
the delayed ``take`` plus that transfer; and the classic path (per-sample lists to tensors, then
to the device). Writes ``gpu.json`` and ``gpu.md``. Without CUDA it says so and exits 0, writing
nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from arrow_split import RolloutBatch, take
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks._common import Results, benchmark_parser, format_seconds, run_main, summarize

__all__ = ["GpuOptions", "cuda_available", "main", "parse_args", "report", "run"]

LAYOUTS = ("per_sample", "packed", "padded", "nested")


@dataclasses.dataclass(frozen=True, slots=True)
class GpuOptions:
    """What one run measures (``--smoke``: the tiny workload, one repeat)."""

    repeats: int = 20
    smoke: bool = False
    out: Path = Path("docs/benchmarks")


def cuda_available() -> bool:
    """Whether torch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _timed_cuda(call: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """Wall seconds of ``call`` (device work included: synchronized), after one warm-up call."""
    import torch

    call()
    torch.cuda.synchronize()
    seconds = []
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return summarize(seconds)


def _bandwidths(nbytes: int, repeats: int) -> dict[str, Any]:
    import torch

    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    host = np.ones(nbytes, dtype=np.uint8)
    figures = {
        "pinned_seconds": _timed_cuda(lambda: pinned.to("cuda", non_blocking=True), repeats),
        "pageable_seconds": _timed_cuda(lambda: pageable.to("cuda"), repeats),
        "memcpy_seconds": _timed_cuda(lambda: np.copyto(np.empty_like(host), host), repeats),
    }
    for name in ("pinned", "pageable"):
        figures[f"{name}_bytes_per_second"] = nbytes / figures[f"{name}_seconds"]["median"]
    figures["floor_seconds"] = (
        figures["memcpy_seconds"]["median"] + figures["pinned_seconds"]["median"]
    )
    return figures


def _configurations(smoke: bool) -> list[tuple[str, RolloutBatch, int]]:
    """(name, batch, dp_size) of each configuration."""
    if smoke:
        tiny = RolloutBatch.from_train_data(make_train_data(WORKLOADS["tiny"]))
        return [("tiny/dp2", tiny, 2)]
    medium = RolloutBatch.from_train_data(make_train_data(WORKLOADS["medium"]))
    moe = dataclasses.replace(WORKLOADS["small"], samples=128, moe_shape=(48, 8))
    return [
        ("medium/dp8", medium, 8),
        ("medium/dp64", medium, 64),
        ("moe/dp1", RolloutBatch.from_train_data(make_train_data(moe)), 1),
    ]


def _measure(name: str, batch: RolloutBatch, dp_size: int, repeats: int) -> dict[str, Any]:
    import torch

    from arrow_split.torch import to_tensors

    plan = batch.make_plan(dp_size, balance_data=True)
    shard = take(batch, plan, 0)
    record: dict[str, Any] = {"name": name, "dp_size": dp_size, "rank_bytes": shard.nbytes}
    record["link"] = _bandwidths(max(shard.nbytes, 1), repeats)
    record["to_tensors_seconds"] = {
        layout: _timed_cuda(
            lambda layout=layout: to_tensors(shard, layout=layout, device="cuda"), repeats
        )
        for layout in LAYOUTS
    }
    record["take_and_to_tensors_seconds"] = _timed_cuda(
        lambda: to_tensors(take(batch, plan, 0), layout="packed", device="cuda"), repeats
    )
    arrays = {column.spec.name for column in shard.rows.numeric_columns()}
    lists = shard.rows.to_train_data()
    record["classic_seconds"] = _timed_cuda(
        lambda: {
            key: [torch.tensor(value).to("cuda") for value in values]
            for key, values in lists.items()
            if key in arrays and isinstance(values, list)
        },
        max(repeats // 10, 1),
    )
    return record


def run(options: GpuOptions) -> dict[str, Results]:
    """Every configuration's figures: ``{"gpu.json": ...}`` (nothing is written)."""
    records = [
        _measure(name, batch, dp, options.repeats)
        for name, batch, dp in _configurations(options.smoke)
    ]
    return {"gpu.json": {"configs": records, "repeats": options.repeats}}


def markdown(results: Results) -> str:
    """One row per configuration: floor, packed to_tensors, take + transfer, classic."""
    lines = [
        "| config | rank bytes | floor | to_tensors packed | take + packed | classic |",
        "|---|---|---|---|---|---|",
    ]
    for record in results["configs"]:
        cells = [
            record["name"],
            str(record["rank_bytes"]),
            format_seconds(record["link"]["floor_seconds"]),
            format_seconds(record["to_tensors_seconds"]["packed"]["median"]),
            format_seconds(record["take_and_to_tensors_seconds"]["median"]),
            format_seconds(record["classic_seconds"]["median"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(outputs: dict[str, Results], out: Path) -> None:
    """Write ``gpu.md`` beside ``gpu.json``; print the table."""
    text = markdown(outputs["gpu.json"])
    (out / "gpu.md").write_text(text, encoding="utf-8")
    print(text)


def parse_args(argv: list[str] | None = None) -> GpuOptions:
    """The command line: ``--smoke`` and ``--out``."""
    parser = benchmark_parser("gpu", __doc__, "the tiny workload, one repeat: for the tests")
    args = parser.parse_args(argv)
    if args.smoke:
        return GpuOptions(repeats=1, smoke=True, out=args.out)
    return GpuOptions(out=args.out)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, or say why not and return 0 where there is no CUDA device."""
    if not cuda_available():
        print("benchmarks.gpu: no CUDA device (torch.cuda.is_available() is False); skipped")
        return 0
    return run_main(argv, parse_args, run, report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
