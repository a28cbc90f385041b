"""The journal: appends with it against without, recovery, objects stored once, the kill test.

- ``appends``: a step of the workload (groups of 8 samples, numpy) through
  ``RolloutBatchBuilder.extend`` and ``finish``, without a journal and with one per ``sync``
  policy (``os``, ``step``, ``call``), taking turns for ``--repeats`` rounds: the appends alone
  (``append_seconds``, target: ``step`` <= 1.3x no journal) and the whole step (``seconds``:
  with a journal, ``finish`` also writes and syncs the step's dump); and their floor
  (``floor``): the journal's bytes written to a fresh file in one piece per call and their
  CRC-32; ``floor_vs_no_journal`` is (appends + floor) / appends, without a journal.
- ``recovery``: ``RolloutBatchBuilder.recover`` of that step's journal (target <= 1 s, medium).
- ``multimodal``: :func:`~arrow_split.testing.make_multimodal_train_data` (8 samples per prompt,
  one ~1 MB image per prompt): the object column's bytes stored once against one pickle per row
  (what version 1 stored; target <= 1.2/n), and the delayed put and one rank's delayed take +
  decode for both, in a local Ray.
- ``kill_test``: :func:`~arrow_split.testing.run_kill_test` (kill points, lost / duplicated / torn).

Run: ``python -m benchmarks.journal`` (medium workload, 3 repeats, 320 kill points;
``--smoke``: tiny, once, 8 kill points). Writes ``journal.json`` under ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa

from arrow_split import RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import (
    WORKLOADS,
    iter_sample_groups,
    make_multimodal_train_data,
    run_kill_test,
)
from benchmarks._common import (
    MIB,
    benchmark_parser,
    local_ray,
    stamp,
    start_stamp,
    summarize,
    timed,
    write_json,
)

__all__ = ["main", "measure_appends", "measure_multimodal", "parse_args", "write_floor"]

POLICIES = ("none", "os", "step", "call")


def measure_appends(workload: str, repeats: int, folder: Path) -> dict[str, Any]:
    """Seconds of a step's extends and finish per policy, and of recovering its journal."""
    config = dataclasses.replace(WORKLOADS[workload], as_numpy=True)
    groups = list(iter_sample_groups(config, 8))

    appends: dict[str, list[float]] = {policy: [] for policy in POLICIES}
    steps: dict[str, list[float]] = {policy: [] for policy in POLICIES}

    def step(policy: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        journal = None if policy == "none" else folder
        builder = RolloutBatchBuilder(journal=journal, sync=policy if journal else "step")  # type: ignore[arg-type]
        started = time.perf_counter()
        for group in groups:
            builder.extend(group)
        appends[policy].append(time.perf_counter() - started)
        builder.finish()

    # Round robin: no policy always runs first, on memory that no earlier step has touched.
    for _ in range(max(repeats, 1)):
        for policy in POLICIES:
            steps[policy].extend(timed(lambda policy=policy: step(policy), 1)["all"])
    seconds = {policy: summarize(values) for policy, values in steps.items()}
    append_seconds = {policy: summarize(values) for policy, values in appends.items()}
    shutil.rmtree(folder, ignore_errors=True)
    builder = RolloutBatchBuilder(journal=folder)
    for group in groups:
        builder.extend(group)
    builder.close()
    journal_bytes = sum(path.stat().st_size for path in folder.iterdir())
    recovery = timed(lambda: RolloutBatchBuilder.recover(folder).close(), repeats)
    floor = write_floor(folder, len(groups), repeats)  # after: its writes load the disk
    base, append_base = seconds["none"]["median"], append_seconds["none"]["median"]
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
        # the least any journal of these bytes could cost: the appends, plus write + CRC alone
        "floor_vs_no_journal": (append_base + floor["seconds"]) / append_base,
        "recovery_seconds": recovery,
    }


def write_floor(folder: Path, records: int, repeats: int) -> dict[str, Any]:
    """What any journal of these bytes pays: writing them and their CRC-32, nothing else.

    The journal's bytes, in ``records`` pieces (one per call), written with ``os.write`` to a
    fresh file (no sync: the ``os`` and ``step`` policies' appends), and ``zlib.crc32`` of them.
    """
    data = memoryview(b"".join(path.read_bytes() for path in sorted(folder.iterdir())))
    size = -(-len(data) // max(records, 1))
    pieces = [data[start : start + size] for start in range(0, len(data), size)]
    target = folder.parent / "floor.bin"

    def write() -> None:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for piece in pieces:
            os.write(descriptor, piece)
        os.close(descriptor)
        target.unlink()

    written = timed(write, repeats)
    crc = timed(lambda: zlib.crc32(data), repeats)
    seconds = written["median"] + crc["median"]
    return {"bytes": len(data), "write_seconds": written, "crc_seconds": crc, "seconds": seconds}


def _plain(batch: RolloutBatch, name: str) -> RolloutBatch:
    """The batch as version 1 stored it: one pickle per row."""
    index = batch.column_names.index(name)
    column = batch.record_batch.column(index).cast(pa.large_binary())
    record_batch = batch.record_batch.set_column(index, name, column)
    return RolloutBatch(record_batch, batch.specs, batch.batch_globals)


def measure_multimodal(prompts: int, image_bytes: int, repeats: int) -> dict[str, Any]:
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
            ref: list[Any] = []

            def put(batch: RolloutBatch = batch, ref: list[Any] = ref) -> None:
                ref[:] = [split_train_data_by_dp(batch, dp_size, balance_data=False, delay=True)]

            def rank(ref: list[Any] = ref) -> None:
                process_rollout_data(ref[0], dp_size - 1, dp_size).to_train_data(layout="actor")

            result[form] = {
                "object_bytes": batch.record_batch.column(name).nbytes,
                "delayed_put_seconds": timed(put, repeats),
                "delayed_rank_seconds": timed(rank, repeats),
            }
    plain = result["one_per_row"]
    result["bytes_ratio"] = result["stored_once"]["object_bytes"] / plain["object_bytes"]
    result["target_bytes_ratio"] = 1.2 / per_prompt
    return result


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = benchmark_parser("journal", __doc__, "tiny workload, once, 8 kills")
    parser.add_argument("--workload", default="medium", choices=sorted(WORKLOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kills", type=int, default=320)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--image-bytes", type=int, default=MIB)
    arguments = parser.parse_args(argv)
    if arguments.smoke:
        arguments.workload, arguments.repeats, arguments.kills = "tiny", 1, 8
        arguments.prompts, arguments.image_bytes = 2, 64 * 1024
    return arguments


def main(argv: list[str] | None = None) -> int:
    """Run, print and write ``journal.json``."""
    arguments = parse_args(argv)
    started = start_stamp()
    with tempfile.TemporaryDirectory() as folder:
        result: dict[str, Any] = {
            "appends": measure_appends(arguments.workload, arguments.repeats, Path(folder) / "j"),
            "kill_test": run_kill_test(arguments.kills, folder=str(Path(folder) / "k")).as_dict(),
        }
    result["multimodal"] = measure_multimodal(
        arguments.prompts, arguments.image_bytes, arguments.repeats
    )
    result["stamp"] = stamp(started)
    appends, multimodal = result["appends"], result["multimodal"]
    ratios = appends["appends_vs_no_journal"]
    print("appends vs no journal", {k: round(v, 2) for k, v in ratios.items()})
    print(f"floor (appends + write + CRC of the journal) {appends['floor_vs_no_journal']:.2f}x")
    print(f"recovery {appends['recovery_seconds']['median']:.3f} s;", "kill", result["kill_test"])
    print(f"object bytes ratio {multimodal['bytes_ratio']:.4f}")
    print(f"wrote {write_json(result, arguments.out / 'journal.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
