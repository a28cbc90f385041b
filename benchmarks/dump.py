"""Rollout dumps: ``RolloutBatch.write``/``read`` against ``torch.save``/``torch.load`` of the dict.

The classic way to keep a step's rollout for debugging or replay is ``torch.save`` of the train
data dict (Python lists), read back with ``torch.load``. This benchmark times both on the same
seeded batch in one run: the Arrow dump uncompressed (read maps the file: no copy) and with zstd
(read decompresses), plus ``RolloutBatch.read(...).to_train_data()`` for the same Python lists that
``torch.load`` returns. Reads follow writes, so the file is in the page cache: the figures are the
CPU cost of each format, not the disk's. Each write includes an fsync (the write is atomic);
``torch.save`` does not sync. Figures are min/median over ``--repeats``.

Run: ``python -m benchmarks.dump`` (2,048 samples, 3 repeats; ``--smoke``: 16 samples, once).
Writes ``dump.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arrow_split import RolloutBatch
from benchmarks._common import benchmark_parser, stamp, start_stamp, timed, write_json

__all__ = ["main", "make_train_data", "measure", "parse_args"]


def make_train_data(samples: int, seed: int = 0) -> dict[str, Any]:
    """A classic train-data dict of Python lists, ~4k tokens per sample (prompt + response)."""
    rng = np.random.default_rng(seed)
    prompts = rng.integers(64, 513, samples)
    responses = np.minimum(rng.exponential(3600, samples).astype(np.int64) + 1, 8192)
    return {
        "tokens": [
            rng.integers(0, 151_000, p + r, dtype=np.int32).tolist()
            for p, r in zip(prompts, responses, strict=True)
        ],
        "response_lengths": responses.tolist(),
        "loss_masks": [np.ones(r, dtype=np.uint8).tolist() for r in responses],
        "rollout_log_probs": [(-rng.random(r, dtype=np.float32)).tolist() for r in responses],
        "rewards": rng.random(samples).tolist(),
        "prompt": [f"prompt {index}: solve the task" for index in range(samples)],
        "metadata": [{"turn": index % 4, "source": "math"} for index in range(samples)],
        "raw_reward": rng.random(samples).tolist(),
    }


def measure(samples: int, repeats: int, folder: Path) -> dict[str, Any]:
    """Time every write and read on one batch; return the figures, the sizes and the ratios."""
    train_data = make_train_data(samples)
    batch = RolloutBatch.from_train_data(train_data)
    arrow, zstd, pickled = folder / "step.arrow", folder / "step.zstd.arrow", folder / "step.pt"
    figures = {
        "from_train_data": timed(lambda: RolloutBatch.from_train_data(train_data), repeats),
        "torch_save": timed(lambda: torch.save(train_data, pickled), repeats),
        "torch_load": timed(lambda: torch.load(pickled, weights_only=False), repeats),
        "write_batch": timed(lambda: batch.write(arrow), repeats),
        "read_batch": timed(lambda: RolloutBatch.read(arrow), repeats),
        "read_batch_to_train_data": timed(
            lambda: RolloutBatch.read(arrow).to_train_data(), repeats
        ),
        "write_batch_zstd": timed(lambda: batch.write(zstd, compression="zstd"), repeats),
        "read_batch_zstd": timed(lambda: RolloutBatch.read(zstd), repeats),
    }
    if not (RolloutBatch.read(arrow).equals(batch) and RolloutBatch.read(zstd).equals(batch)):
        msg = "a dump did not read back equal to the batch written"
        raise RuntimeError(msg)
    median = {name: figure["median"] for name, figure in figures.items()}
    return {
        "samples": samples,
        "tokens": int(batch.total_lengths.sum()),
        "arrow_bytes": batch.nbytes,
        "file_bytes": {
            "torch_save": pickled.stat().st_size,
            "arrow": arrow.stat().st_size,
            "arrow_zstd": zstd.stat().st_size,
        },
        "seconds": figures,
        "ratios": {
            "torch_save_vs_write_batch": median["torch_save"] / median["write_batch"],
            "torch_load_vs_read_batch": median["torch_load"] / median["read_batch"],
            "torch_load_vs_read_to_train_data": median["torch_load"]
            / median["read_batch_to_train_data"],
        },
    }


def _print(result: dict[str, Any]) -> None:
    print(f"{result['samples']:,} samples, {result['tokens']:,} tokens; ms min / median below")
    print(result["file_bytes"], "ratios", {k: round(v, 2) for k, v in result["ratios"].items()})
    for name, figure in result["seconds"].items():
        print(f"  {name:<34} {figure['min'] * 1e3:9.1f} / {figure['median'] * 1e3:.1f}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = benchmark_parser("dump", __doc__, "16 samples, once")
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args(argv)
    if arguments.smoke:
        arguments.samples, arguments.repeats = 16, 1
    return arguments


def main(argv: list[str] | None = None) -> int:
    """Run, print and write ``dump.json``."""
    arguments = parse_args(argv)
    started = start_stamp()
    with tempfile.TemporaryDirectory() as folder:
        result = measure(arguments.samples, arguments.repeats, Path(folder))
    result["stamp"] = stamp(started)
    _print(result)
    print(f"wrote {write_json(result, arguments.out / 'dump.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
