"""Durable files: the journal, objects stored once, the kill test; rollout dumps against torch.

docs/benchmarks.md ("The journal", "Rollout dumps") says what each figure of ``journal.json``
and ``dump.json`` is and its goal. Sizes: :data:`SIZES` (``--smoke``: tiny, once, 8 kill points,
16 samples dumped).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
import xxhash

from arrow_split import RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import (
    WORKLOADS,
    RolloutConfig,
    iter_sample_groups,
    make_multimodal_train_data,
    make_train_data,
    run_kill_test,
)
from benchmarks._common import MIB, Results, benchmark_parser, local_ray, run_main, summarize, timed

__all__ = ["SIZES", "parse_args", "run"]

POLICIES = ("none", "os", "step", "call")
SIZES = {
    False: {"workload": "medium", "repeats": 6, "kills": 320, "prompts": 16, "image_bytes": MIB},
    True: {"workload": "tiny", "repeats": 1, "kills": 8, "prompts": 2, "image_bytes": 64 * 1024},
}
DUMP_SAMPLES = {False: 2048, True: 16}
"""The full run's sizes (``SIZES[False]``) and the ``--smoke`` run's (``SIZES[True]``)."""


def _measure_appends(workload: str, repeats: int, folder: Path) -> dict[str, Any]:
    """Seconds of a step's extends and finish per policy and of the floor; the recovery.

    Each round runs every policy, the floor and the in-step floor in turn, starting one turn
    later than the round before, each after an untimed ``os.sync()`` (none pays for another's
    writeback).
    """
    config = dataclasses.replace(WORKLOADS[workload], as_numpy=True)
    groups = list(iter_sample_groups(config, 8))
    shutil.rmtree(folder, ignore_errors=True)
    builder = RolloutBatchBuilder(journal=folder)
    for group in groups:
        builder.extend(group)
    builder.close()
    journal_bytes = sum(path.stat().st_size for path in folder.glob("*.journal"))
    recovery = timed(lambda: RolloutBatchBuilder.recover(folder).close(), repeats)
    write_floor = _write_floor(folder, len(groups))
    in_step = _InStepFloor(groups, write_floor, folder.parent / "in_step.bin")

    appends: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    steps: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    floor_writes: list[float] = []
    in_step_appends: list[float] = []

    def step(policy: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        journal = None if policy == "none" else folder
        builder = RolloutBatchBuilder(journal=journal, sync=policy if journal else "step")  # type: ignore[arg-type]
        started = time.perf_counter()
        for group in groups:
            builder.extend(group)
        appends[policy].append(time.perf_counter() - started)
        builder.finish()

    def run_policy(policy: str) -> None:
        steps[policy].extend(timed(lambda: step(policy), 1)["all"])

    turns: list[Callable[[], None]] = [partial(run_policy, policy) for policy in POLICIES]
    turns.append(lambda: floor_writes.extend(timed(write_floor, 1)["all"]))
    turns.append(lambda: in_step_appends.append(in_step()))
    for round_number in range(max(repeats, 1)):
        shift = round_number % len(turns)  # each round starts one turn later: no fixed order
        for turn in turns[shift:] + turns[:shift]:
            os.sync()
            turn()
    shutil.rmtree(folder, ignore_errors=True)
    data = write_floor.data
    crc = timed(lambda: xxhash.xxh3_64_intdigest(data), repeats)
    written = summarize(floor_writes)
    floor = {
        "bytes": len(data),
        "write_seconds": written,
        "crc_seconds": crc,
        "seconds": written["median"] + crc["median"],
    }
    seconds = {policy: summarize(values) for policy, values in steps.items()}
    append_seconds = {policy: summarize(values) for policy, values in appends.items()}
    base, append_base = seconds["none"]["median"], append_seconds["none"]["median"]
    in_step_seconds = summarize(in_step_appends)
    return {
        "workload": workload,
        "samples": config.samples,
        "seconds": seconds,  # the step: appends, then finish (with a journal: the dump, synced)
        "vs_no_journal": {p: seconds[p]["median"] / base for p in POLICIES if p != "none"},
        "append_seconds": append_seconds,  # the appends alone
        "appends_vs_no_journal": {
            p: append_seconds[p]["median"] / append_base for p in POLICIES if p != "none"
        },
        "journal_bytes": journal_bytes,
        "floor": floor,
        # the least any journal of these bytes could cost: the appends, plus write + XXH3 alone
        "floor_vs_no_journal": (append_base + floor["seconds"]) / append_base,
        "recovery_seconds": recovery,
        # the appends with sync="step" against the floor measured in this run (goal: <= 1.1)
        "step_appends_vs_floor": append_seconds["step"]["median"]
        / (append_base + floor["seconds"]),
        # the same writes made where a journal makes them: inside the appends (_InStepFloor)
        "in_step_floor": {"bytes": in_step.bytes, "append_seconds": in_step_seconds},
        "in_step_floor_vs_floor": in_step_seconds["median"] / (append_base + floor["seconds"]),
        "step_appends_vs_in_step_floor": append_seconds["step"]["median"]
        / in_step_seconds["median"],
    }


class _FloorWrite:
    """A call writing the journal's bytes, in ``records`` pieces, to a fresh file (no sync)."""

    def __init__(self, data: memoryview, records: int, target: Path) -> None:
        size = -(-len(data) // max(records, 1))
        self.data, self.target = data, target
        self.pieces = [data[start : start + size] for start in range(0, len(data), size)]

    def __call__(self) -> None:
        descriptor = os.open(self.target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for piece in self.pieces:
            os.write(descriptor, piece)
        os.close(descriptor)
        self.target.unlink()


class _InStepFloor:
    """The floor's work where a journal does it: after each ``extend`` (no journal), the XXH3-64
    and one ``os.write`` of as many bytes as that call's record, from one cached buffer; the
    appends' seconds."""

    def __init__(self, groups: list[dict[str, Any]], floor: _FloorWrite, target: Path) -> None:
        self.groups, self.target = groups, target
        hot = memoryview(bytes(floor.pieces[0])) if floor.pieces else memoryview(b"")
        sizes = [piece.nbytes for piece in floor.pieces]
        self.pieces = [hot[:size] for size in sizes] + [hot[:0]] * (len(groups) - len(sizes))
        self.bytes = sum(sizes)

    def __call__(self) -> float:
        builder = RolloutBatchBuilder()
        descriptor = os.open(self.target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        started = time.perf_counter()
        for group, piece in zip(self.groups, self.pieces, strict=True):
            builder.extend(group)
            xxhash.xxh3_64_intdigest(piece)
            if os.write(descriptor, piece) != piece.nbytes:
                msg = "a short write to the in-step floor's file"
                raise OSError(msg)
        seconds = time.perf_counter() - started
        os.close(descriptor)
        self.target.unlink()
        builder.finish()
        return seconds


def _write_floor(folder: Path, records: int) -> _FloorWrite:
    """What any journal of these bytes pays: one ``os.write`` per record to a fresh file (no
    sync; this call) and their XXH3-64. The lock file is left out."""
    data = memoryview(b"".join(path.read_bytes() for path in sorted(folder.glob("*.journal"))))
    return _FloorWrite(data, records, folder.parent / "floor.bin")


def _plain(batch: RolloutBatch, name: str) -> RolloutBatch:
    """The batch as version 1 stored it: one pickle per row."""
    index = batch.column_names.index(name)
    column = batch.record_batch.column(index).cast(pa.large_binary())
    record_batch = batch.record_batch.set_column(index, name, column)
    return RolloutBatch(record_batch, batch.specs, batch.batch_globals)


def _measure_multimodal(prompts: int, image_bytes: int, repeats: int) -> dict[str, Any]:
    """Bytes stored, delayed put and rank seconds, stored once against one pickle per row."""
    from arrow_split.ray import process_rollout_data, split_train_data_by_dp

    per_prompt, dp_size, name = 8, 8, "multimodal_train_inputs"
    data = make_multimodal_train_data(prompts, per_prompt, image_bytes, shared=False)
    once = RolloutBatch.from_train_data(data)
    batches = {"stored_once": once, "one_per_row": _plain(once, name)}
    result: dict[str, Any] = {"prompts": prompts, "samples_per_prompt": per_prompt}
    result["dp_size"] = dp_size
    with local_ray(max(512 * MIB, 8 * prompts * per_prompt * image_bytes)):
        for form, batch in batches.items():

            def put(batch: RolloutBatch = batch) -> Any:
                return split_train_data_by_dp(batch, dp_size, balance_data=False, delay=True)

            ref = put()

            def rank(ref: Any = ref) -> None:
                process_rollout_data(ref, dp_size - 1, dp_size).to_train_data(layout="actor")

            result[form] = {
                "object_bytes": batch.record_batch.column(name).nbytes,
                "delayed_put_seconds": timed(put, repeats),
                "delayed_rank_seconds": timed(rank, repeats),
            }
    plain = result["one_per_row"]
    result["bytes_ratio"] = result["stored_once"]["object_bytes"] / plain["object_bytes"]
    result["target_bytes_ratio"] = 1.2 / per_prompt
    return result


def _measure_dump(samples: int, repeats: int, folder: Path) -> dict[str, Any]:
    """Every write and read of one batch (uncompressed and zstd) against ``torch.save`` and
    ``torch.load``; reads follow writes (the page cache's: each format's CPU cost)."""
    # ~4k tokens a sample, every kind of column (prompt text, metadata, ids, teacher log-probs)
    train_data = make_train_data(RolloutConfig(samples, 3600.0, 8192, (64, 512), columns="every"))
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """``--smoke`` and ``--out``; the sizes are :data:`SIZES` (``SIZES[True]``: ``--smoke``)."""
    parser = benchmark_parser("journal", __doc__, "tiny workload, once, 8 kills, 16 samples dumped")
    options = parser.parse_args(argv)
    return argparse.Namespace(**vars(options), **SIZES[options.smoke])


def run(options: argparse.Namespace) -> dict[str, Results]:
    """``{"journal.json": ..., "dump.json": ...}``: the journal's figures, then the dumps'."""
    with tempfile.TemporaryDirectory() as folder:
        journal: dict[str, Any] = {
            "appends": _measure_appends(options.workload, options.repeats, Path(folder) / "j"),
            "kill_test": run_kill_test(options.kills, folder=str(Path(folder) / "k")).as_dict(),
        }
        dump = _measure_dump(DUMP_SAMPLES[options.smoke], options.repeats, Path(folder))
    journal["multimodal"] = _measure_multimodal(
        options.prompts, options.image_bytes, options.repeats
    )
    return {"journal.json": journal, "dump.json": dump}


if __name__ == "__main__":
    raise SystemExit(run_main(None, parse_args, run))
