"""Figures -> ratios, targets, the JSON file and the plots (harness, cluster and soak runs).

All ratios are taken on medians. A per-rank figure of a configuration is the median, over the
ranks measured, of each rank's median over the repeats (``min`` likewise takes the minimum).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "machine_and_versions",
    "memcpy_by_dp",
    "per_rank_table",
    "plot",
    "plot_cluster",
    "plot_soak",
    "ratios",
    "targets",
    "write_json",
]

MIB = 2**20
PACKAGES = ("arrow-split", "pyarrow", "numpy", "ray", "torch", "matplotlib", "tqdm", "psutil")
TARGET_DP = 64


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.strip() or None


def machine_and_versions() -> dict[str, Any]:
    """The machine (platform, CPUs, RAM) and the versions of everything measured."""
    import psutil

    import arrow_split

    versions = {package: _version(package) for package in PACKAGES}
    versions["python"] = sys.version.split()[0]
    versions["arrow_split"] = arrow_split.__version__
    return {
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(),
            "ram_bytes": psutil.virtual_memory().total,
        },
        "versions": versions,
        "git_commit": _commit(),
    }


def per_rank_table(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``table["arrow/delayed"]["64"]``: the configuration's figures over its measured ranks."""
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in results["per_rank"]:
        key = f"{record['path']}/{record['mode']}"
        groups.setdefault(key, {}).setdefault(str(record["dp_size"]), []).append(record)
    return {
        key: {dp: _combine(records) for dp, records in by_dp.items()}
        for key, by_dp in groups.items()
    }


def _combine(records: list[dict[str, Any]]) -> dict[str, Any]:
    steps = {
        name: statistics.median(record["steps"][name]["median"] for record in records)
        for name in records[0]["steps"]
    }
    return {
        "ranks": [record["rank"] for record in records],
        "median": statistics.median(record["sum"]["median"] for record in records),
        "min": min(record["sum"]["min"] for record in records),
        "gc": statistics.median(record["gc"]["median"] for record in records),
        "median_excluding_gc": statistics.median(
            record["sum_excluding_gc"]["median"] for record in records
        ),
        "steps": steps,
        "memory": {
            key: max(record["memory"][key] for record in records) for key in records[0]["memory"]
        },
        "rank_bytes": max((record.get("rank_bytes") or 0) for record in records),
    }


def memcpy_by_dp(results: dict[str, Any]) -> dict[str, dict[str, float]]:
    """``{dp_size: {"seconds", "bytes"}}``: medians over the measured ranks' memcpy references."""
    by_dp: dict[str, list[dict[str, Any]]] = {}
    for entry in results["memcpy"]:
        by_dp.setdefault(str(entry["dp_size"]), []).append(entry)
    return {
        dp: {
            "seconds": statistics.median(entry["seconds"]["median"] for entry in entries),
            "bytes": statistics.median(entry["bytes"] for entry in entries),
        }
        for dp, entries in by_dp.items()
    }


def _divide(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom <= 0:
        return None
    return top / bottom


def _put_ratios(results: dict[str, Any]) -> dict[str, Any]:
    put = results["put"]
    median = {key: put[key]["seconds"]["median"] for key in ("single_buffer", "arrow_delayed")}
    base_delayed = put["baseline_delayed"]["seconds"]["median"]
    eager = {
        dp: (put["baseline_eager"][dp]["seconds"]["median"], figures["seconds"]["median"])
        for dp, figures in put["arrow_eager"].items()
    }
    return {
        "delayed_put": _divide(base_delayed, median["arrow_delayed"]),
        "eager_put": {dp: _divide(base, arrow) for dp, (base, arrow) in eager.items()},
        "arrow_put_over_single_buffer": {
            "delayed": _divide(median["arrow_delayed"], median["single_buffer"]),
            "eager": {
                dp: _divide(arrow, median["single_buffer"]) for dp, (_, arrow) in eager.items()
            },
        },
    }


def ratios(results: dict[str, Any]) -> dict[str, Any]:
    """Every ratio the run reports (baseline over arrow_split: > 1 means arrow_split is faster)."""
    table = per_rank_table(results)
    memcpy = {dp: entry["seconds"] for dp, entry in memcpy_by_dp(results).items()}

    def rank_ratio(mode: str, figure: str = "median") -> dict[str, float | None]:
        arrow, base = table.get(f"arrow/{mode}", {}), table.get(f"baseline/{mode}", {})
        return {dp: _divide(base[dp][figure], arrow[dp][figure]) for dp in arrow if dp in base}

    return {
        "delayed_per_rank": rank_ratio("delayed"),
        "delayed_per_rank_excluding_gc": rank_ratio("delayed", "median_excluding_gc"),
        "eager_per_rank": rank_ratio("eager"),
        **_put_ratios(results),
        "arrow_rank_over_memcpy": {
            mode: {
                dp: _divide(figures["median"], memcpy.get(dp))
                for dp, figures in table.get(f"arrow/{mode}", {}).items()
            }
            for mode in ("delayed", "eager")
        },
        "planner_speedup": {
            f"{entry['n']}/{entry['dp_size']}": entry["speedup_median"]
            for entry in results["planner"]
        },
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of the brief, each with its measured value and whether it was reached."""
    ratio, name = results["ratios"], results["workload"]["name"]
    dp_sizes = [str(dp) for dp in results["dp_sizes"]]
    dp = str(TARGET_DP) if str(TARGET_DP) in dp_sizes else dp_sizes[-1]
    where = f"{name}, dp_size {dp}"
    rows = [  # (target, where, measured, goal, at least)
        ("delayed per-rank: baseline / arrow_split", where, ratio["delayed_per_rank"], 100, True),
        (
            "delayed per-rank, garbage-collector time taken out of both",
            where,
            ratio["delayed_per_rank_excluding_gc"],
            100,
            True,
        ),
        ("eager put: baseline / arrow_split", where, ratio["eager_put"], 10, True),
        (
            "arrow_split delayed put / one-buffer put",
            name,
            ratio["arrow_put_over_single_buffer"]["delayed"],
            1.3,
            False,
        ),
        (
            "arrow_split delayed per-rank / memcpy of its bytes",
            where,
            ratio["arrow_rank_over_memcpy"]["delayed"],
            10,
            False,
        ),
        (
            "planner: baseline / arrow_split",
            "65,536 samples, dp 256",
            ratio["planner_speedup"].get("65536/256"),
            10,
            True,
        ),
    ]
    found = []
    for target, place, measured, limit, at_least in rows:
        value = measured.get(dp) if isinstance(measured, dict) else measured
        reached = None if value is None else (value >= limit if at_least else value <= limit)
        goal = f"{'>=' if at_least else '<='} {limit:g}x"
        found.append(
            {"target": target, "where": place, "value": value, "goal": goal, "reached": reached}
        )
    return found


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    msg = f"cannot write {type(value).__name__} to JSON"
    raise TypeError(msg)


def write_json(results: dict[str, Any], path: Path) -> None:
    """Every figure, pretty-printed."""
    path.write_text(json.dumps(results, indent=2, default=_plain) + "\n", encoding="utf-8")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def plot_cluster(report: dict[str, Any], path: Path) -> None:
    """Bytes crossing nodes per step and per-rank time, one bar per mode."""
    pyplot = _pyplot()
    summary = report["summary"]
    modes = list(summary)
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(10, 4))
    left.bar(modes, [summary[mode]["cross_node_mib"] for mode in modes], color="tab:blue")
    left.axhline(report["batch"]["object_bytes"] / MIB, color="gray", linestyle="--", label="batch")
    left.set_ylabel("MiB crossing nodes per step")
    left.legend()
    medians = [summary[mode]["rank_ms_median"] for mode in modes]
    maxima = [summary[mode]["rank_ms_max"] for mode in modes]
    right.bar(modes, maxima, color="tab:orange", alpha=0.4, label="max")
    right.bar(modes, medians, color="tab:orange", label="median")
    right.set_ylabel("per-rank ms")
    right.legend()
    figure.suptitle(report["layout"])
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def plot_soak(report: dict[str, Any], path: Path) -> None:
    """Object-store usage and driver memory over the soak's steps."""
    pyplot = _pyplot()
    samples = report["samples"]
    steps = [sample["step"] for sample in samples]
    figure, axis = pyplot.subplots(figsize=(8, 4))
    for key, label in (
        ("store_used", "object store used"),
        ("driver_rss_private", "driver private memory"),
        ("driver_rss_shmem", "driver's object-store pages"),
    ):
        axis.plot(steps, [sample[key] / MIB for sample in samples], label=label)
    axis.set_xlabel("step")
    axis.set_ylabel("MiB")
    axis.set_title(f"{len(steps)} steps of a {report['batch_nbytes'] / MIB:.1f} MiB batch")
    axis.legend(loc="center right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


_STYLES = {"baseline": ("tab:red", "o", "baseline"), "arrow": ("tab:blue", "s", "arrow_split")}


def _lines(results: dict[str, Any]) -> list[tuple[list[int], list[float], dict[str, Any]]]:
    """``(dp_sizes, seconds, style)`` of every line of the plot: each path and mode, the memcpy."""
    lines = []
    for key, by_dp in sorted(per_rank_table(results).items()):
        path_name, mode = key.split("/")
        color, marker, label = _STYLES[path_name]
        sizes = sorted(by_dp, key=int)
        style = {"color": color, "marker": marker, "label": f"{label}, {mode}"}
        style["linestyle"] = "-" if mode == "delayed" else ":"
        lines.append(([int(dp) for dp in sizes], [by_dp[dp]["median"] for dp in sizes], style))
    memcpy = memcpy_by_dp(results)
    sizes = sorted(memcpy, key=int)
    style = {"color": "gray", "linestyle": "--", "label": "memcpy of a rank's bytes"}
    lines.append(([int(dp) for dp in sizes], [memcpy[dp]["seconds"] for dp in sizes], style))
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    """Per-rank time against dp_size, both paths and modes, log-log, with the memcpy limit."""
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(figsize=(9, 4.5))
    for sizes, seconds, style in _lines(results):
        axes.plot(sizes, seconds, **style)
    axes.set(xscale="log", yscale="log", xlabel="dp_size", ylabel="per-rank time, s (median)")
    axes.set_xticks(results["dp_sizes"], [str(dp) for dp in results["dp_sizes"]])
    workload = results["workload"]
    axes.set_title(
        f"{workload['name']}: {workload['num_samples']:,} samples, "
        f"{workload['num_tokens'] / 1e6:.1f}M tokens, {results['plan']} plan"
    )
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.02, 1.0))
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
