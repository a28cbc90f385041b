"""The hand-off on one Mooncake master: a rank reading only its rows, against Mooncake's own.

On the medium workload (per-sample numpy arrays), dp 8 and dp 64, one local ``mooncake_master``:

- ``arrow_split``: :func:`arrow_split.mooncake.put_batch` of the train-data dict (converted and
  put once as Arrow buffers) and, apart, of the RolloutBatch already built (as the builder hands
  it over at the step's end), then each rank's :func:`~arrow_split.mooncake.take_rank` from a
  second client (it reads only its rows' byte ranges); ``arrow_split_no_plan``: miles' put, with
  no plan (each rank plans for its own size); ``arrow_split_resplit``: a batch put for another
  ``dp_size``, taken with ``resplit=True``; ``convert_seconds``: the dict's conversion alone;
- ``mooncake``: Mooncake's structured object store, ``MooncakeBundleTransfer.put(data,
  type="dict")``, then each rank's ``get(ref, type="dict", rows=its rows)``;
- ``ray``: :func:`arrow_split.ray.split_train_data_by_dp` (``delay=True``) and each rank's
  :func:`~arrow_split.ray.process_rollout_data` on a local Ray (the rank fetches the object).

Per rank: the take's seconds (median of repeats) and the bytes it read (counted at the store
client's read calls; for Ray, the object a remote rank fetches). Ratios are against Mooncake's
own in the same run. At dp 64 a spread of 8 ranks is measured. Run:
``python -m benchmarks.mooncake`` (``--smoke``: the small workload, dp 2 and 4).
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from arrow_split import RolloutBatch
from arrow_split.testing import WORKLOADS, make_train_data
from benchmarks._common import (
    MIB,
    Results,
    benchmark_parser,
    format_bytes,
    format_seconds,
    local_ray,
    pyplot,
    run_main,
    save_figure,
    timed,
)

SIZES = {False: ("medium", (8, 64), 3), True: ("small", (2, 4), 1)}
"""``--smoke`` -> workload, dp sizes, repeats per rank."""
RANKS_MEASURED = 8


class CountingClient:
    """A Mooncake client that counts the bytes its read calls return (the store's own paths)."""

    def __init__(self, client: Any) -> None:
        self.client, self.bytes_read = client, 0

    def __getattr__(self, name: str) -> Any:
        if name == "_get_pyclient_capsule":  # no native pool: every read goes through here
            raise AttributeError(name)
        return getattr(self.client, name)

    def get(self, key: str) -> bytes:
        value = self.client.get(key)
        self.bytes_read += len(value)
        return bytes(value)

    def get_into(self, *args: Any) -> int:
        code = int(self.client.get_into(*args))
        self.bytes_read += max(code, 0)
        return code

    def batch_get_into(self, *args: Any) -> list[int]:
        codes = self.client.batch_get_into(*args)
        self.bytes_read += sum(max(int(code), 0) for code in codes)
        return list(codes)

    def get_into_ranges(self, *args: Any) -> Any:
        codes = self.client.get_into_ranges(*args)
        self.bytes_read += sum(max(c, 0) for one in codes for key in one for c in key)
        return codes


def _ranks(dp_size: int) -> list[int]:
    return sorted({int(r) for r in np.linspace(0, dp_size - 1, min(dp_size, RANKS_MEASURED))})


def _puts(put: Callable[[], Any], drop: Callable[[Any], None], repeats: int) -> tuple[float, Any]:
    """The median seconds of ``put`` (after one put not kept, each put dropped), its last handle."""
    seconds = []
    for _ in range(repeats + 1):
        gc.collect()
        started = time.perf_counter()
        handle = put()
        seconds.append(time.perf_counter() - started)
        if len(seconds) <= repeats:
            drop(handle)
    return statistics.median(seconds[1:]), handle


def _per_rank(take: Callable[[int], Any], ranks: list[int], repeats: int) -> list[float]:
    return [timed(lambda rank=rank: take(rank), repeats)["median"] for rank in ranks]


def _mooncake_runs(
    data: dict[str, Any], batch: RolloutBatch, sizes: tuple[int, ...], repeats: int
) -> dict[str, Any]:
    from mooncake.structured_object_store import MooncakeBundleTransfer

    from arrow_split.mooncake import (
        MooncakeStore,
        connect,
        local_master,
        put_batch,
        remove,
    )

    found: dict[str, Any] = {}
    segment = max(64 * MIB, 3 * batch.nbytes)
    with local_master() as master:
        writer = connect(master.address, segment_bytes=segment, buffer_bytes=256 * MIB)
        reader = connect(master.address, segment_bytes=0, buffer_bytes=max(16 * MIB, batch.nbytes))
        for dp_size in sizes:
            plan = batch.make_plan(dp_size, balance_data=True)
            ranks = _ranks(dp_size)
            row = found[str(dp_size)] = {"ranks": ranks}
            put_seconds, ref = _puts(
                partial(put_batch, writer, data, dp_size=dp_size, balance_data=True),
                partial(remove, writer),
                repeats,
            )
            remove(writer, ref)
            put_built, ref = _puts(
                partial(put_batch, writer, batch, dp_size=dp_size, balance_data=True),
                partial(remove, writer),
                repeats,
            )
            store = MooncakeStore(reader)
            takes = partial(_takes, store, dp_size=dp_size, ranks=ranks, repeats=repeats)
            shares = [int(plan.partitions[r].size) for r in ranks]
            share_bytes = [batch.nbytes * share / batch.num_samples for share in shares]
            convert, _ = _puts(partial(RolloutBatch.from_train_data, data), id, repeats)
            row["arrow_split"] = {
                "put_seconds": put_seconds,
                "put_batch_seconds": put_built,
                "put_bytes": ref.nbytes,
                "convert_seconds": convert,  # the floor of a put of the dict
                **takes(ref),
            }
            remove(writer, ref)
            # miles' put: no plan (the trainers' dp_size unknown); each rank plans for its own
            no_plan, ref = _puts(partial(put_batch, writer, data), partial(remove, writer), repeats)
            remove(writer, ref)
            built, ref = _puts(partial(put_batch, writer, batch), partial(remove, writer), repeats)
            row["arrow_split_no_plan"] = {
                "put_seconds": no_plan,
                "put_batch_seconds": built,
                **takes(ref, balance_data=True),
            }
            remove(writer, ref)
            other = sizes[0] if dp_size != sizes[0] else sizes[-1]  # a batch put for another plan
            ref = put_batch(writer, batch, dp_size=other, balance_data=True)
            row["arrow_split_resplit"] = {"put_for": other, **takes(ref, resplit=True)}
            remove(writer, ref)
            gc.collect()
            theirs = MooncakeBundleTransfer(writer)
            their_put, handle = _puts(
                partial(theirs.put, data, type="dict"), theirs.cleanup_dataproto, repeats
            )
            rows = {rank: plan.partitions[rank].tolist() for rank in ranks}
            getter = MooncakeBundleTransfer(reader)
            their = _per_rank(
                lambda rank, get=getter.get, handle=handle, rows=rows: get(
                    handle, type="dict", rows=rows[rank]
                ),
                ranks,
                repeats,
            )
            counted, their_bytes = CountingClient(reader), []
            for rank in ranks:
                counted.bytes_read = 0
                MooncakeBundleTransfer(counted).get(handle, type="dict", rows=rows[rank])
                their_bytes.append(counted.bytes_read)
            row["mooncake"] = {
                "put_seconds": their_put,
                "take_seconds": their,
                "bytes_read": their_bytes,
            }
            row["share_bytes"] = share_bytes
            theirs.cleanup_dataproto(handle)
            gc.collect()
        reader.close()
        writer.close()
    return found


def _ray_runs(
    data: dict[str, Any],
    batch: RolloutBatch,
    sizes: tuple[int, ...],
    repeats: int,
    found: dict[str, Any],
) -> None:
    from arrow_split.ray import process_rollout_data, split_train_data_by_dp

    with local_ray(max(512 * MIB, 3 * batch.nbytes)):
        for dp_size in sizes:
            row = found[str(dp_size)]
            put_seconds, ref = _puts(
                partial(split_train_data_by_dp, data, dp_size, balance_data=True, delay=True),
                lambda ref: None,
                repeats,
            )
            put_built, ref = _puts(
                partial(split_train_data_by_dp, batch, dp_size, balance_data=True, delay=True),
                lambda ref: None,
                repeats,
            )
            takes = _per_rank(
                partial(process_rollout_data, ref, dp_size=dp_size, locality="local"),
                row["ranks"],
                repeats,
            )
            row["ray"] = {
                "put_seconds": put_seconds,
                "put_batch_seconds": put_built,
                "take_seconds": takes,
                "bytes_read": [batch.nbytes] * len(takes),
            }
            del ref
            gc.collect()


def _takes(
    store: Any, ref: Any, *, dp_size: int, ranks: list[int], repeats: int, **options: Any
) -> dict[str, list[Any]]:
    """Each rank's take seconds (median of repeats) and the bytes it read."""
    from arrow_split.mooncake import take_rank

    take = partial(take_rank, store, ref, dp_size=dp_size, **options)
    bytes_read = []
    for rank in ranks:
        store.bytes_read = 0
        take(rank)
        bytes_read.append(store.bytes_read)
    return {"take_seconds": _per_rank(take, ranks, repeats), "bytes_read": bytes_read}


def _ratios(row: dict[str, Any]) -> dict[str, float]:
    ours, theirs = row["arrow_split"], row["mooncake"]
    take = statistics.median(theirs["take_seconds"]) / statistics.median(ours["take_seconds"])
    share = max(b / s for b, s in zip(ours["bytes_read"], row["share_bytes"], strict=True))
    no_plan, resplit = row["arrow_split_no_plan"], row["arrow_split_resplit"]
    return {
        "put_without_a_plan_speedup_vs_mooncake": theirs["put_seconds"] / no_plan["put_seconds"],
        "convert_alone_speedup_vs_mooncake_put": theirs["put_seconds"] / ours["convert_seconds"],
        "take_without_a_plan_speedup_vs_mooncake": statistics.median(theirs["take_seconds"])
        / statistics.median(no_plan["take_seconds"]),
        "take_resplit_speedup_vs_mooncake": statistics.median(theirs["take_seconds"])
        / statistics.median(resplit["take_seconds"]),
        "max_bytes_read_resplit_over_share": max(
            b / s for b, s in zip(resplit["bytes_read"], row["share_bytes"], strict=True)
        ),
        "take_speedup_vs_mooncake": take,
        "put_speedup_vs_mooncake": theirs["put_seconds"] / ours["put_seconds"],
        "put_of_the_batch_speedup_vs_mooncake": theirs["put_seconds"] / ours["put_batch_seconds"],
        "max_bytes_read_over_share": share,
        "take_speedup_vs_ray": statistics.median(row["ray"]["take_seconds"])
        / statistics.median(ours["take_seconds"]),
    }


def parse_args(argv: list[str] | None) -> Any:
    parser = benchmark_parser("mooncake", __doc__, "the small workload, dp 2 and 4, once")
    return parser.parse_args(argv)


def run(options: Any) -> dict[str, Results]:
    workload, sizes, repeats = SIZES[options.smoke]
    config = dataclasses.replace(WORKLOADS[workload], as_numpy=True)
    data = make_train_data(config)
    batch = RolloutBatch.from_train_data(data)
    found = _mooncake_runs(data, batch, sizes, repeats)
    _ray_runs(data, batch, sizes, repeats, found)
    for row in found.values():
        row["ratios"] = _ratios(row)
    return {
        "mooncake.json": {
            "workload": workload,
            "samples": batch.num_samples,
            "tokens": int(batch.total_lengths.sum()),
            "batch_bytes": batch.nbytes,
            "repeats": repeats,
            "dp": found,
        }
    }


def report(outputs: dict[str, Results], out: Path) -> None:
    results = outputs["mooncake.json"]
    plt = pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    paths = ("arrow_split", "mooncake", "ray")
    sizes = list(results["dp"])
    for position, path in enumerate(paths):
        medians = [statistics.median(results["dp"][dp][path]["take_seconds"]) for dp in sizes]
        read = [statistics.median(results["dp"][dp][path]["bytes_read"]) / MIB for dp in sizes]
        spots = np.arange(len(sizes)) + 0.27 * (position - 1)
        axes[0].bar(spots, medians, 0.27, label=path)
        axes[1].bar(spots, read, 0.27, label=path)
    for axis, label in zip(
        axes, ("take per rank (s, median)", "bytes read per rank (MiB)"), strict=True
    ):
        axis.set_xticks(range(len(sizes)), [f"dp {dp}" for dp in sizes])
        axis.set_ylabel(label)
        axis.set_yscale("log")
        axis.legend()
    save_figure(
        figure, out / "mooncake.png", f"{results['workload']} workload on one Mooncake master"
    )
    for dp, row in results["dp"].items():
        ours, theirs = row["arrow_split"], row["mooncake"]
        print(
            f"dp {dp}: take {format_seconds(statistics.median(ours['take_seconds']))} vs "
            f"{format_seconds(statistics.median(theirs['take_seconds']))} (Mooncake's), "
            f"{format_seconds(statistics.median(row['ray']['take_seconds']))} (Ray); read "
            f"{format_bytes(statistics.median(ours['bytes_read']))} vs "
            f"{format_bytes(statistics.median(theirs['bytes_read']))}; put "
            f"{format_seconds(ours['put_seconds'])} vs {format_seconds(theirs['put_seconds'])}; "
            f"ratios {row['ratios']}"
        )


def main(argv: list[str] | None = None) -> int:
    return run_main(argv, parse_args, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
