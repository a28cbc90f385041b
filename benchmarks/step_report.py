"""Figures of the step benchmark -> per-configuration summaries, targets, markdown and plot.

Every figure is a median. A configuration's *boundary* is the median over all its steps; a rank's
time is its median over the warm steps (all but the first; the table adds the slowest rank's
minimum, a gauge of the noise); the *slowest rank* is the measured
rank with the largest such median; the *critical path* is boundary + slowest rank. The *cold
start* is the first rank call of the configuration's fresh actor, set against the same rank's
warm median.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks._common import format_bytes, format_seconds, pyplot, save_figure
from benchmarks.step_paths import PATHS

__all__ = ["markdown", "plot", "summarize_config", "summarize_results", "targets"]

TARGET_DP = 64
_LABELS = {
    "classic": "classic (lists)",
    "numpy": "numpy classic",
    "arrow": "arrow_split from lists",
    "builder": "arrow_split builder",
}


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def _medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """``{name: median}`` over runs of the same named laps."""
    return {name: _median([run[name] for run in runs]) for name in runs[0]}


def _cold_start(steps: list[dict[str, Any]], warm_seconds: dict[str, float]) -> dict[str, Any]:
    """The first rank call of the fresh actor, against the same rank's warm steps."""
    rank = next(iter(steps[0]["ranks"]))
    first = steps[0]["ranks"][rank]
    warm = steps[1:] or steps
    return {
        "rank": int(rank),
        "first_seconds": first["seconds"],
        "first_steps": first["steps"],
        "warm_seconds": warm_seconds[rank],
        "warm_steps": _medians([step["ranks"][rank]["steps"] for step in warm]),
    }


def summarize_config(record: dict[str, Any]) -> dict[str, Any]:
    """One configuration's figures (see the module docstring)."""
    steps = record["steps"]
    warm = steps[1:] or steps
    per_rank = {
        rank: _median([step["ranks"][rank]["seconds"] for step in warm])
        for rank in steps[0]["ranks"]
    }
    slowest = max(per_rank, key=lambda rank: per_rank[rank])
    boundary = _median([step["boundary_seconds"] for step in steps])
    return {
        "path": record["path"],
        "mode": record["mode"],
        "dp_size": record["dp_size"],
        "ranks": record["ranks"],
        "appends_cpu_seconds": _median([step["rollout"]["cpu_seconds"] for step in steps]),
        "appends_system_seconds": _median([step["rollout"]["system_seconds"] for step in steps]),
        "boundary_seconds": boundary,
        "boundary_steps": _medians([step["boundary_steps"] for step in steps]),
        "rank_seconds": per_rank,
        "slowest_rank": int(slowest),
        "slowest_rank_seconds": per_rank[slowest],
        "slowest_rank_min_seconds": min(step["ranks"][slowest]["seconds"] for step in warm),
        "slowest_rank_steps": _medians([step["ranks"][slowest]["steps"] for step in warm]),
        "slowest_rank_memory": {
            key: max(step["ranks"][slowest]["memory"][key] for step in warm)
            for key in steps[0]["ranks"][slowest]["memory"]
        },
        "critical_path_seconds": boundary + per_rank[slowest],
        "store_bytes": steps[0]["store_bytes"],
        "cold_start": _cold_start(steps, per_rank),
    }


def summarize_results(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``summary[workload]["delayed/64/builder"]``: every configuration's summary."""
    return {
        name: {
            f"{r['mode']}/{r['dp_size']}/{r['path']}": summarize_config(r)
            for r in figures["configs"]
        }
        for name, figures in results["workloads"].items()
    }


def _divide(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom <= 0:
        return None
    return top / bottom


def _ratio_of(results: dict[str, Any], workload: str, config: str, over: str) -> float | None:
    """``over``'s step boundary / the builder's, in ``config`` (``"eager/64"``) of ``workload``."""
    summary = results["summary"].get(workload, {})
    top, bottom = summary.get(f"{config}/{over}"), summary.get(f"{config}/builder")
    if top is None or bottom is None:
        return None
    return _divide(top["boundary_seconds"], bottom["boundary_seconds"])


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The targets (issue 17's), each with its value, goal and whether it was reached."""
    main = results["main_workload"]
    small = next((name for name in results["summary"] if name.startswith("small-")), None)
    rows: list[tuple[str, str, float | None, float, bool]] = []
    for config in ("eager/64", "eager/256", "delayed/64"):
        for over, goal in (("classic", 20), ("numpy", 3)):
            value = _ratio_of(results, main, config, over)
            rows.append(
                (f"step boundary: {over} / builder", f"{main}, {config}", value, goal, True)
            )
    if small is not None:
        value = _ratio_of(results, small, f"eager/{TARGET_DP}", "classic")
        rows.append(("step boundary: classic / builder", f"{small}, eager/64", value, 2.5, True))
    colds = [
        _divide(entry["cold_start"]["first_seconds"], entry["cold_start"]["warm_seconds"])
        for entry in results["summary"][main].values()
        if entry["path"] in ("arrow", "builder")
    ]
    worst = max((cold for cold in colds if cold is not None), default=None)
    rows.append(("first / warm rank call, worst arrow_split configuration", main, worst, 2, False))
    rows.extend(_floor_rows(results, main))
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


def _floor_rows(results: dict[str, Any], main: str) -> list[tuple[str, str, Any, float, bool]]:
    """Issue 28's goals: a rank's gather and its delayed path against the floors of its bytes."""
    refs = results["references"]
    dp = refs["memcpy_rank"]["dp_size"]
    take, memcpy = refs["take"], refs["memcpy_rank"]["seconds"]["median"]
    arrow_take = take["arrow_seconds"]["median"]
    summary = results["summary"][main]
    delayed = summary.get(f"delayed/{dp}/builder")
    eager, numpy_eager = summary.get(f"eager/{dp}/builder"), summary.get(f"eager/{dp}/numpy")
    where = f"{main}, dp {dp}, {take['rows']} rows"
    rows: list[tuple[str, str, Any, float, bool]] = [
        ("take_rows / memcpy of the rank's bytes", where, _divide(arrow_take, memcpy), 2, False),
        (
            "take_rows / list indexing",
            where,
            _divide(arrow_take, take["classic_seconds"]["median"]),
            1,
            False,
        ),
    ]
    if delayed is not None:
        floor = refs.get("delayed_rank_floor_seconds")
        value = _divide(delayed["slowest_rank_seconds"], floor)
        rows.append(
            (
                "delayed rank / (ray.get of a small object + memcpy)",
                f"{main}, delayed/{dp}",
                value,
                3,
                False,
            )
        )
    if eager is not None and numpy_eager is not None:
        value = _divide(eager["slowest_rank_seconds"], numpy_eager["slowest_rank_seconds"])
        rows.append(("eager rank / numpy quick fix's rank", f"{main}, eager/{dp}", value, 1, False))
    return rows


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}x" if value < 1000 else f"{value:,.0f}x"


def _header(results: dict[str, Any]) -> list[str]:
    meta = results["stamp"]
    machine, versions = meta["machine"], meta["versions"]
    dirty = " (dirty tree)" if meta["dirty"] else ""
    return [
        "## arrow_split step benchmark: rollout loop -> step boundary -> ranks",
        "",
        f"Plan: {results['plan']}. Each configuration: a fresh rank actor, "
        f"{results['repeats'] + 1} steps (the first is the cold start; rank figures are the warm "
        "steps' medians; boundary figures the median of all steps). Measured ranks: the "
        f"{results['ranks_per_config']} with the most tokens (named in the table).",
        "",
        f"Commit {meta['commit']}{dirty}. Machine: {machine['platform']}, "
        f"{machine['cpu_count']} CPUs, {format_bytes(machine['ram_bytes'])} RAM. Python "
        f"{versions['python']}, pyarrow {versions['pyarrow']}, numpy {versions['numpy']}, ray "
        f"{versions['ray']}, torch {versions['torch']}. Run took {meta['wall_seconds']:.0f} s; "
        f"load average {meta['load_average']['start'][0]:.1f} at the start, "
        f"{meta['load_average']['end'][0]:.1f} at the end.",
        "",
    ]


def _table(title: str, header: str, align: str, rows: Iterable[str], intro: str = "") -> list[str]:
    """``### title``, ``intro`` if any, a table; ``align``: ``l`` or ``r`` (figures) per column."""
    rule = "|".join({"l": "---", "r": "---:"}[letter] for letter in align)
    lines = [f"### {title}", "", *([intro, ""] if intro else []), f"| {header} |", f"|{rule}|"]
    return [*lines, *(f"| {row} |" for row in rows), ""]


def _references_table(results: dict[str, Any]) -> list[str]:
    refs = results["references"]
    summary = results["summary"][refs["workload"]]
    dp = refs["memcpy_rank"]["dp_size"]
    builder = summary.get(f"delayed/{dp}/builder") or summary[f"eager/{dp}/builder"]
    plan, take, memcpy = refs["planner"], refs["take"], refs["memcpy_rank"]

    def row(what: str, classic: float | None, arrow: float | None) -> str:
        ratio = _ratio(_divide(classic, arrow))
        return f"{what} | {format_seconds(classic)} | {format_seconds(arrow)} | {ratio}"

    rows = [
        row(
            f"{builder['mode']} put ({format_bytes(refs['batch_bytes'])}) vs one `ray.put` of "
            "a buffer that size",
            refs["one_buffer_put"]["seconds"]["median"],
            builder["boundary_steps"].get("put"),
        ),
        row(
            f"{builder['mode']} rank, dp {dp}, vs a memcpy of its {format_bytes(memcpy['bytes'])}",
            memcpy["seconds"]["median"],
            builder["slowest_rank_seconds"],
        ),
        row(
            f"planner, {plan['samples']:,} samples, dp {plan['dp_size']}: classic KK vs "
            "`plan_partitions`",
            plan["classic_seconds"]["median"],
            plan["arrow_seconds"]["median"],
        ),
        row(
            f"gather of one rank's {take['rows']} rows (dp {take['dp_size']}): list indexing vs "
            "`take_rows`",
            take["classic_seconds"]["median"],
            take["arrow_seconds"]["median"],
        ),
    ]
    header = "figure | reference | arrow_split | reference / arrow_split"
    return _table(
        f"References, measured in the same run (`{refs['workload']}`)", header, "lrrr", rows
    )


def _parts(seconds: dict[str, float]) -> str:
    return " + ".join(f"{name} {format_seconds(value)}" for name, value in seconds.items())


def _workload_table(name: str, results: dict[str, Any]) -> list[str]:
    shape = results["workloads"][name]["workload"]
    summary = results["summary"][name]
    rows = []
    for key, entry in summary.items():
        mode, dp, _ = key.split("/")
        classic = summary[f"{mode}/{dp}/classic"]
        rows.append(
            f"{mode} | {dp} | {_LABELS[entry['path']]} "
            f"| {format_seconds(entry['appends_cpu_seconds'])} "
            f"({format_seconds(entry['appends_system_seconds'])}) "
            f"| {format_seconds(entry['boundary_seconds'])} ({_parts(entry['boundary_steps'])}) "
            f"| {format_seconds(entry['slowest_rank_seconds'])} "
            f"({format_seconds(entry['slowest_rank_min_seconds'])}; {entry['slowest_rank']}) "
            f"| {format_seconds(entry['critical_path_seconds'])} "
            f"| {_ratio(_divide(classic['boundary_seconds'], entry['boundary_seconds']))}, "
            f"{_ratio(_divide(classic['critical_path_seconds'], entry['critical_path_seconds']))}"
        )
    title = (
        f"`{name}`: {shape['num_samples']:,} samples, {shape['num_tokens']:,} tokens, "
        f"{shape['groups']} groups of {shape['group_size']}"
    )
    header = (
        "mode | dp | path | appends CPU (kernel) | boundary (its parts) | slowest rank (min; rank) "
        "| critical path | classic / this: boundary, critical path"
    )
    return _table(title, header, "lrlrrrrr", rows)


def _rank_table(results: dict[str, Any]) -> list[str]:
    """The slowest rank's peak memory and its cold start (a fresh actor's first call)."""
    name = results["main_workload"]
    rows = [
        f"{entry['mode']} | {entry['dp_size']} | {_LABELS[entry['path']]} "
        f"| {format_bytes(memory['private_increase_bytes'])} "
        f"| {format_bytes(memory['shared_touched_bytes'])} "
        f"| {format_seconds(cold['first_seconds'])} | {format_seconds(cold['warm_seconds'])} "
        f"| {_ratio(_divide(cold['first_seconds'], cold['warm_seconds']))}"
        for entry in results["summary"][name].values()
        for memory, cold in [(entry["slowest_rank_memory"], entry["cold_start"])]
    ]
    header = (
        "mode | dp | path | private increase | store pages touched | first call | warm "
        "| first / warm"
    )
    title = f"The slowest rank (`{name}`): peak memory (warm steps) and cold start"
    return _table(title, header, "lrlrrrrr", rows)


def _per_object_table(results: dict[str, Any]) -> list[str]:
    costs = results["per_object"]
    dp, name = costs["dp_size"], costs["workload"]
    summary = results["summary"][name]
    rows = [
        f"Ray: `ray.put` of a tiny object | {format_seconds(costs['tiny_put_seconds']['median'])}",
        "Ray: `ray.put` of an arrow_split shard (split beforehand) | "
        f"{format_seconds(costs['arrow_shard_put_seconds']['median'])}",
        *(
            f"{_LABELS[path]}: whole eager boundary / dp | "
            f"{format_seconds(summary[f'eager/{dp}/{path}']['boundary_seconds'] / dp)}"
            for path in PATHS
            if f"eager/{dp}/{path}" in summary
        ),
    ]
    title = f"Per-object cost of an eager put (`{name}`, dp {dp})"
    return _table(title, "what | per object", "lr", rows)


def _targets_table(results: dict[str, Any]) -> list[str]:
    pickled = results["pickle"]
    intro = (
        f"Taking turns for {pickled['rounds']} rounds: the builder's appends "
        f"{format_seconds(pickled['builder_cpu_seconds']['median'])} of CPU, a pickle of the "
        f"classic dict (protocol 5) {format_seconds(pickled['cpu_seconds']['median'])} for "
        f"{format_bytes(pickled['bytes'])}."
    )
    marks = {True: "reached", False: "NOT reached", None: "not measured"}
    rows = [
        f"{t['target']} | {t['where']} | {_ratio(t['value'])} | {t['goal']} | {marks[t['reached']]}"
        for t in results["targets"]
    ]
    return _table("Targets", "target | where | measured | goal |", "llrrl", rows, intro)


def markdown(results: dict[str, Any]) -> str:
    """``step.md``: header, one table per workload, references, the slowest ranks, targets."""
    lines = _header(results)
    for name in results["workloads"]:
        lines += _workload_table(name, results)
    lines += _references_table(results) + _rank_table(results)
    lines += _per_object_table(results) + _targets_table(results)
    return "\n".join(lines)


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
