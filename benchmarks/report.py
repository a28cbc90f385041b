"""Figures -> ratios, targets, the JSON file, the markdown table and the plot.

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
    "ratios",
    "targets",
    "write_json",
]

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
    leaves = [record["leaf"]["sum"]["median"] for record in records if record.get("leaf")]
    return {
        "ranks": [record["rank"] for record in records],
        "median": statistics.median(record["sum"]["median"] for record in records),
        "min": min(record["sum"]["min"] for record in records),
        "gc": statistics.median(record["gc"]["median"] for record in records),
        "median_excluding_gc": statistics.median(
            record["sum_excluding_gc"]["median"] for record in records
        ),
        "steps": steps,
        "leaf": statistics.median(leaves) if leaves else None,
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
    put, build = results["put"], results["build"]["from_lists"]["seconds"]["median"]
    numpy_build = results["build"]["from_numpy"]["seconds"]["median"]
    single = put["single_buffer"]["seconds"]["median"]
    arrow_delayed = put["arrow_delayed"]["seconds"]["median"]
    baseline_delayed = put["baseline_delayed"]["seconds"]["median"]
    eager = {
        dp: (put["baseline_eager"][dp]["seconds"]["median"], figures["seconds"]["median"])
        for dp, figures in put["arrow_eager"].items()
    }
    return {
        "delayed_put": _divide(baseline_delayed, arrow_delayed),
        "delayed_build_put": _divide(baseline_delayed, build + arrow_delayed),
        "delayed_numpy_build_put": _divide(baseline_delayed, numpy_build + arrow_delayed),
        "eager_put": {dp: _divide(base, arrow) for dp, (base, arrow) in eager.items()},
        "eager_build_put": {
            dp: _divide(base, build + arrow) for dp, (base, arrow) in eager.items()
        },
        "eager_numpy_build_put": {
            dp: _divide(base, numpy_build + arrow) for dp, (base, arrow) in eager.items()
        },
        "arrow_put_over_single_buffer": {
            "delayed": _divide(arrow_delayed, single),
            "eager": {dp: _divide(arrow, single) for dp, (_, arrow) in eager.items()},
        },
        "arrow_eager_put_over_per_rank_buffers": {
            dp: _divide(arrow, put["per_rank_buffers"][dp]["seconds"]["median"])
            for dp, (_, arrow) in eager.items()
            if dp in put.get("per_rank_buffers", {})
        },
    }


def _scaling(table: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float | None]]:
    scaling: dict[str, dict[str, float | None]] = {}
    for key, by_dp in table.items():
        first = min(by_dp, key=int)
        scaling[key] = {dp: _divide(by_dp[dp]["median"], by_dp[first]["median"]) for dp in by_dp}
    sizes = sorted({dp for by_dp in table.values() for dp in by_dp}, key=int)
    if sizes:
        scaling["ideal 1/dp_size"] = {dp: int(sizes[0]) / int(dp) for dp in sizes}
    return scaling


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
        "per_rank_vs_dp_size": _scaling(table),
        "planner_speedup": {
            f"{entry['n']}/{entry['dp_size']}": entry["speedup_median"]
            for entry in results["planner"]
        },
    }


def _target(name: str, value: float | None, limit: float, at_least: bool, where: str) -> Any:
    reached = None if value is None else (value >= limit if at_least else value <= limit)
    relation = ">=" if at_least else "<="
    return {
        "target": name,
        "where": where,
        "value": value,
        "goal": f"{relation} {limit:g}x",
        "reached": reached,
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets of the brief, each with its measured value and whether it was reached."""
    ratio = results["ratios"]
    dp_sizes = [str(dp) for dp in results["dp_sizes"]]
    dp = str(TARGET_DP) if str(TARGET_DP) in dp_sizes else dp_sizes[-1]
    where = f"{results['workload']['name']}, dp_size {dp}"
    planner = ratio["planner_speedup"].get("65536/256")
    return [
        _target(
            "delayed per-rank: baseline / arrow_split",
            ratio["delayed_per_rank"].get(dp),
            100,
            True,
            where,
        ),
        _target(
            "delayed per-rank, garbage-collector time taken out of both",
            ratio["delayed_per_rank_excluding_gc"].get(dp),
            100,
            True,
            where,
        ),
        _target("eager put: baseline / arrow_split", ratio["eager_put"].get(dp), 10, True, where),
        _target(
            "arrow_split delayed put / one-buffer put",
            ratio["arrow_put_over_single_buffer"]["delayed"],
            1.3,
            False,
            results["workload"]["name"],
        ),
        _target(
            "arrow_split delayed per-rank / memcpy of its bytes",
            ratio["arrow_rank_over_memcpy"]["delayed"].get(dp),
            10,
            False,
            where,
        ),
        _target("planner: reference / arrow_split", planner, 10, True, "65,536 samples, dp 256"),
    ]


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    msg = f"cannot write {type(value).__name__} to JSON"
    raise TypeError(msg)


def write_json(results: dict[str, Any], path: Path) -> None:
    """Every figure, pretty-printed."""
    path.write_text(json.dumps(results, indent=2, default=_plain) + "\n", encoding="utf-8")


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
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

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
