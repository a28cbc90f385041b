"""The step benchmark's figures: per-configuration medians, the targets, ``step.md``, the plot.

A configuration's boundary is the median over all its steps; a rank's time its median over the
warm steps (all but the first); the slowest rank is the measured rank with the largest such
median; the critical path is boundary + slowest rank; the cold start is the slowest rank's first
call against its warm median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks._common import format_bytes, format_seconds, pyplot, save_figure
from benchmarks.step_paths import PATHS

__all__ = ["markdown", "plot", "summaries", "targets"]

_LABELS = {
    "classic": "classic (lists)",
    "numpy": "numpy classic",
    "arrow": "arrow_split from lists",
    "builder": "arrow_split builder",
}


def _median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def _summary(record: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures: medians (see the module docstring)."""
    steps = record["steps"]
    warm = steps[1:] or steps
    per_rank = {
        rank: _median(s["ranks"][rank]["seconds"] for s in warm) for rank in steps[0]["ranks"]
    }
    slowest = max(per_rank, key=lambda rank: per_rank[rank])
    boundary = _median(step["boundary_seconds"] for step in steps)
    first = steps[0]["ranks"][slowest]["seconds"]
    return {
        "path": record["path"],
        "mode": record["mode"],
        "dp_size": record["dp_size"],
        "ranks": record["ranks"],
        "appends_cpu_seconds": _median(step["rollout"]["cpu_seconds"] for step in steps),
        "appends_system_seconds": _median(step["rollout"]["system_seconds"] for step in steps),
        "boundary_seconds": boundary,
        "boundary_steps": {
            name: _median(step["boundary_steps"][name] for step in steps)
            for name in steps[0]["boundary_steps"]
        },
        "rank_seconds": per_rank,
        "slowest_rank": int(slowest),
        "slowest_rank_seconds": per_rank[slowest],
        "slowest_rank_memory": {
            key: max(step["ranks"][slowest]["memory"][key] for step in warm)
            for key in steps[0]["ranks"][slowest]["memory"]
        },
        "critical_path_seconds": boundary + per_rank[slowest],
        "store_bytes": steps[0]["store_bytes"],
        "cold_start": {"first_seconds": first, "warm_seconds": per_rank[slowest]},
    }


def summaries(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``summary[workload]["delayed/64/builder"]``: every configuration's summary."""
    return {
        name: {f"{r['mode']}/{r['dp_size']}/{r['path']}": _summary(r) for r in figures["configs"]}
        for name, figures in results["workloads"].items()
    }


def _divide(top: float | None, bottom: float | None) -> float | None:
    return None if top is None or bottom is None or bottom <= 0 else top / bottom


def _figure(summary: dict[str, Any], key: str, name: str) -> float | None:
    return summary[key][name] if key in summary else None


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target with its value, goal and whether it was reached."""
    main = results["main_workload"]
    summary, refs = results["summary"][main], results["references"]
    rows: list[tuple[str, str, float | None, float, bool]] = []
    for config in ("eager/64", "eager/256", "delayed/64"):
        builder = _figure(summary, f"{config}/builder", "boundary_seconds")
        for over, goal in (("classic", 20), ("numpy", 3)):
            value = _divide(_figure(summary, f"{config}/{over}", "boundary_seconds"), builder)
            rows.append(
                (f"step boundary: {over} / builder", f"{main}, {config}", value, goal, True)
            )
    for name, small in results["summary"].items():
        if name.startswith("small-"):
            value = _divide(
                _figure(small, "eager/64/classic", "boundary_seconds"),
                _figure(small, "eager/64/builder", "boundary_seconds"),
            )
            rows.append(("step boundary: classic / builder", f"{name}, eager/64", value, 2.5, True))
    colds = [
        _divide(entry["cold_start"]["first_seconds"], entry["cold_start"]["warm_seconds"])
        for entry in summary.values()
        if entry["path"] in ("arrow", "builder")
    ]
    worst = max((cold for cold in colds if cold is not None), default=None)
    rows.append(("first / warm rank call, worst arrow_split configuration", main, worst, 2, False))
    dp, take = refs["memcpy_rank"]["dp_size"], refs["take"]
    arrow_take, where = take["arrow_seconds"]["median"], f"{main}, dp {dp}, {take['rows']} rows"
    memcpy = refs["memcpy_rank"]["seconds"]["median"]
    rows.append(
        ("take_rows / memcpy of the rank's bytes", where, _divide(arrow_take, memcpy), 2, False)
    )
    value = _divide(arrow_take, take["classic_seconds"]["median"])
    rows.append(("take_rows / list indexing", where, value, 1, False))
    delayed = _figure(summary, f"delayed/{dp}/builder", "slowest_rank_seconds")
    value = _divide(delayed, refs["delayed_rank_floor_seconds"])
    target = "delayed rank / (ray.get of a small object + memcpy)"
    rows.append((target, f"{main}, delayed/{dp}", value, 3, False))
    eager = _figure(summary, f"eager/{dp}/builder", "slowest_rank_seconds")
    value = _divide(eager, _figure(summary, f"eager/{dp}/numpy", "slowest_rank_seconds"))
    rows.append(("eager rank / numpy quick fix's rank", f"{main}, eager/{dp}", value, 1, False))
    value = results["pickle"]["builder_vs_pickle"]
    target = "builder appends' CPU / pickle of the classic dict (taking turns)"
    rows.append((target, main, value, 1, False))
    return [
        {
            "target": target,
            "where": where,
            "value": value,
            "goal": f"{'>=' if at_least else '<='} {goal:g}x",
            "reached": None if value is None else (value >= goal if at_least else value <= goal),
        }
        for target, where, value, goal, at_least in rows
    ]


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}x" if value < 1000 else f"{value:,.0f}x"


def _table(title: str, header: str, rows: Iterable[str]) -> list[str]:
    rule = "|".join("---" if i < 3 else "---:" for i in range(header.count("|") + 1))
    return [f"### {title}", "", f"| {header} |", f"|{rule}|", *(f"| {r} |" for r in rows), ""]


def _workload_rows(summary: dict[str, Any]) -> Iterator[str]:
    for key, entry in summary.items():
        mode, dp, _ = key.split("/")
        classic = summary[f"{mode}/{dp}/classic"]
        parts = " + ".join(
            f"{name} {format_seconds(value)}" for name, value in entry["boundary_steps"].items()
        )
        memory = entry["slowest_rank_memory"]["private_increase_bytes"]
        yield (
            f"{mode} | {dp} | {_LABELS[entry['path']]} "
            f"| {format_seconds(entry['appends_cpu_seconds'])} "
            f"| {format_seconds(entry['boundary_seconds'])} ({parts}) "
            f"| {format_seconds(entry['slowest_rank_seconds'])} ({entry['slowest_rank']}; "
            f"{format_bytes(memory)}) | {format_seconds(entry['critical_path_seconds'])} "
            f"| {_ratio(_divide(classic['critical_path_seconds'], entry['critical_path_seconds']))}"
        )


def markdown(results: dict[str, Any]) -> str:
    """``step.md``: one table per workload, then the targets (the rest is in ``step.json``)."""
    meta = results["stamp"]
    lines = [
        "## arrow_split step benchmark: rollout loop -> step boundary -> ranks",
        "",
        f"Commit {meta['commit']}{' (dirty tree)' if meta['dirty'] else ''}, "
        f"{meta['machine']['cpu_count']} CPUs, plan {results['plan']}, {results['repeats'] + 1} "
        f"steps per configuration (the first a cold start); medians. Every figure: `step.json`.",
        "",
    ]
    header = (
        "mode | dp | path | appends CPU | boundary (its parts) | slowest rank (rank; private "
        "memory) | critical path | classic / this"
    )
    for name, summary in results["summary"].items():
        lines += _table(f"`{name}`", header, _workload_rows(summary))
    marks = {True: "reached", False: "NOT reached", None: "not measured"}
    rows = (
        f"{t['target']} | {t['where']} | {_ratio(t['value'])} | {t['goal']} | {marks[t['reached']]}"
        for t in results["targets"]
    )
    return "\n".join(lines + _table("Targets", "target | where | measured | goal | reached", rows))


def plot(results: dict[str, Any], path: Path) -> None:
    """Critical path of the main workload: boundary + slowest rank, one panel per (mode, dp)."""
    plt = pyplot()
    summary = results["summary"][results["main_workload"]]
    panels = sorted({(e["mode"], e["dp_size"]) for e in summary.values()})
    figure, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1, 4), squeeze=False)
    for axis, (mode, dp) in zip(axes[0], panels, strict=True):
        entries = [summary[f"{mode}/{dp}/{p}"] for p in PATHS if f"{mode}/{dp}/{p}" in summary]
        labels = [_LABELS[e["path"]].replace(" ", "\n", 1) for e in entries]
        boundary = [e["boundary_seconds"] for e in entries]
        ranks = [e["slowest_rank_seconds"] for e in entries]
        axis.bar(labels, boundary, color="tab:blue", label="step boundary (driver)")
        axis.bar(labels, ranks, bottom=boundary, color="tab:orange", label="slowest rank")
        axis.set_title(f"{mode}, dp {dp}")
        axis.tick_params(axis="x", labelsize=7)
    axes[0][0].set_ylabel("critical path, s (median)")
    axes[0][-1].legend(fontsize="small")
    save_figure(figure, path, f"{results['main_workload']}: critical path of one step")
