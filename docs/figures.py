"""The benchmark tables of README.md and docs/*.md, rendered from the committed JSON.

Each table sits between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->``; NAME is a key of
:data:`TABLES`. ``python docs/figures.py`` rewrites every such block from docs/benchmarks/*.json
(run it after ``make bench``); ``tests/test_readme.py`` fails while a block differs from what the
JSON gives.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "docs" / "benchmarks"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(
    r"(<!-- figures:(?P<name>[a-z-]+) -->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.S
)
PATHS = {
    "classic": "classic (lists)",
    "numpy": "numpy classic",
    "arrow": "arrow_split from lists",
    "builder": "arrow_split builder",
}


def _load(name: str) -> dict[str, Any]:
    return json.loads((BENCHMARKS / f"{name}.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _sig(value: float, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, thousands separated, no trailing zeros."""
    if value == 0:
        return "0"
    places = digits - 1 - math.floor(math.log10(abs(value)))
    decimals = max(0, places)
    text = f"{round(value, places):,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def seconds(value: float) -> str:
    """A duration as the step report writes it: 1.13 s, 89.8 ms, 950 µs."""
    if value >= 1:
        return f"{_sig(value)} s"
    if value >= 1e-3:
        return f"{_sig(value * 1e3)} ms"
    return f"{_sig(value * 1e6)} µs"


def ratio(value: float) -> str:
    """A ratio: 31.6x."""
    return f"{_sig(value)}x"


def mib(value: float) -> str:
    """Bytes in MB (10**6), one decimal: 88.2 MB."""
    return f"{value / 1e6:,.1f} MB"


def _table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _step_rows(configs: list[str]) -> list[list[str]]:
    summary = _load("step")["summary"]["medium"]
    rows = []
    for config in configs:
        mode, dp, _ = config.split("/")
        classic = summary[f"{mode}/{dp}/classic"]["critical_path_seconds"]
        for path, label in PATHS.items():
            entry = summary[f"{mode}/{dp}/{path}"]
            rows.append(
                [
                    f"{mode}, {dp}",
                    label,
                    seconds(entry["appends_cpu_seconds"]),
                    seconds(entry["boundary_seconds"]),
                    seconds(entry["slowest_rank_seconds"]),
                    seconds(entry["critical_path_seconds"]),
                    ratio(classic / entry["critical_path_seconds"]),
                ]
            )
    return rows


def step_table() -> str:
    """The medium workload at dp 64, both modes, every path."""
    header = [
        "mode, dp",
        "path",
        "appends (CPU)",
        "step boundary",
        "slowest rank",
        "critical path",
        "vs classic",
    ]
    return _table(
        header,
        ["---", "---", "---:", "---:", "---:", "---:", "---:"],
        _step_rows(["delayed/64/", "eager/64/"]),
    )


def headline_table() -> str:
    """The README's: critical path of a step, classic dict of lists against the builder."""
    summary = _load("step")["summary"]["medium"]
    rows = []
    for mode in ("delayed", "eager"):
        classic = summary[f"{mode}/64/classic"]["critical_path_seconds"]
        builder = summary[f"{mode}/64/builder"]["critical_path_seconds"]
        rows.append(
            [f"{mode}, dp 64", seconds(classic), seconds(builder), ratio(classic / builder)]
        )
    header = ["hand-off", "classic dict of lists", "arrow_split builder", "faster"]
    return _table(header, ["---", "---:", "---:", "---:"], rows)


def journal_table() -> str:
    """Appends per ``sync`` policy against no journal, recovery, the kill test, objects once."""
    journal = _load("journal")
    appends, kill, multi = journal["appends"], journal["kill_test"], journal["multimodal"]
    rows = [
        [
            f'appends with `sync="{policy}"` / no journal ({seconds(appends["append_seconds"]["none"]["median"])})',  # noqa: E501
            ratio(appends["appends_vs_no_journal"][policy]),
        ]
        for policy in ("os", "step", "call")
    ]
    rows += [
        [
            "floor: writing the journal's bytes and their XXH3-64 / no journal",
            ratio(appends["floor_vs_no_journal"]),
        ],
        [
            'appends with `sync="step"` / no journal plus the floor (goal: at most 1.1x)',
            ratio(appends["step_appends_vs_floor"]),
        ],
        [
            "in-step floor: the appends, each followed by the floor's write and XXH3-64 of as"
            " many bytes / no journal plus the floor",
            ratio(appends["in_step_floor_vs_floor"]),
        ],
        [
            'appends with `sync="step"` / the in-step floor',
            ratio(appends["step_appends_vs_in_step_floor"]),
        ],
        ["recovery of the step's journal", seconds(appends["recovery_seconds"]["median"])],
        [
            "kill test: kill points (lost, duplicated, torn)",
            f"{kill['kill_points']} ({kill['lost']}, {kill['duplicated']}, {kill['torn']})",
        ],
        [
            "multimodal objects stored once / one pickle per row (bytes)",
            ratio(multi["bytes_ratio"]),
        ],
        [
            "multimodal delayed put: stored once (one pickle per row)",
            f"{seconds(multi['stored_once']['delayed_put_seconds']['median'])} "
            f"({seconds(multi['one_per_row']['delayed_put_seconds']['median'])})",
        ],
    ]
    return _table(["figure", "measured"], ["---", "---:"], rows)


def dump_table() -> str:
    """A dump of 2,048 samples of every column kind against ``torch.save`` of the classic dict."""
    dump = _load("dump")
    secs, files = dump["seconds"], dump["file_bytes"]
    rows = [
        ["write", seconds(secs["write_batch"]["median"]), seconds(secs["torch_save"]["median"])],
        [
            "read (validated; `torch.load`)",
            seconds(secs["read_batch"]["median"]),
            seconds(secs["torch_load"]["median"]),
        ],
        [
            "read and `to_train_data()` (`torch.load`)",
            seconds(secs["read_batch_to_train_data"]["median"]),
            seconds(secs["torch_load"]["median"]),
        ],
        [
            "file (zstd)",
            f"{mib(files['arrow'])} ({mib(files['arrow_zstd'])})",
            mib(files["torch_save"]),
        ],
    ]
    return _table(["", "arrow_split", "`torch.save` / `torch.load`"], ["---", "---:", "---:"], rows)


def cluster_table() -> str:
    """Bytes crossing nodes and rank times on the simulated 3-node cluster."""
    summary = _load("cluster")["summary"]
    labels = {
        "eager": "eager",
        "local": 'delayed, `locality="local"`',
        "auto": 'delayed, `locality="auto"`',
        "holder": 'delayed, `locality="holder"`',
    }
    rows = [
        [
            label,
            f"{summary[mode]['cross_node_mib']:.1f}",
            f"{summary[mode]['x_eager']:.2f}",
            f"{summary[mode]['rank_ms_median']:.0f} / {summary[mode]['rank_ms_max']:.0f}",
        ]
        for mode, label in labels.items()
    ]
    header = ["mode", "MiB crossing nodes / step", "x eager", "rank ms median / max"]
    return _table(header, ["---", "---:", "---:", "---:"], rows)


def mooncake_table() -> str:
    """Put, take per rank and bytes read per rank on one Mooncake master, and on Ray."""
    results = _load("mooncake")
    labels = {
        "arrow_split": "arrow_split on Mooncake",
        "arrow_split_no_plan": "arrow_split on Mooncake, put without a plan",
        "arrow_split_resplit": "arrow_split on Mooncake, put for dp {put_for}, resplit",
        "mooncake": "Mooncake's structured store",
        "ray": "arrow_split on Ray",
    }
    rows = []
    for dp, row in results["dp"].items():
        theirs = _median(row["mooncake"]["take_seconds"])
        share = _median(row["share_bytes"])
        for path, label in labels.items():
            if path not in row:  # a run before the path was measured
                continue
            take = _median(row[path]["take_seconds"])
            put, built = row[path].get("put_seconds"), row[path].get("put_batch_seconds")
            rows.append(
                [
                    f"{dp}",
                    label.format(**row[path]),
                    "" if put is None else seconds(put),
                    "" if built is None else seconds(built),
                    seconds(take),
                    ratio(theirs / take),
                    mib(_median(row[path]["bytes_read"])),
                    ratio(_median(row[path]["bytes_read"]) / share),
                ]
            )
    header = ["dp", "path", "put (dict)", "put (batch)", "take / rank", "vs Mooncake's"]
    header += ["read / rank", "x share"]
    return _table(header, ["---:", "---", *["---:"] * 6], rows)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def stamp_line() -> str:
    """Which run the figures come from."""
    stamp = _load("step")["stamp"]
    machine = stamp["machine"]
    return (
        f"From the `make bench` run at commit {stamp['commit'][:7]} "
        f"({machine['cpu_count']} CPUs; medians).\n"
    )


TABLES: dict[str, Callable[[], str]] = {
    "cluster": cluster_table,
    "dump": dump_table,
    "headline": headline_table,
    "journal": journal_table,
    "mooncake": mooncake_table,
    "stamp": stamp_line,
    "step": step_table,
}


def render(text: str) -> str:
    """``text`` with every figures block rendered anew from the JSON."""

    def block(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in TABLES:
            msg = f"unknown figures block {name!r}; known: {', '.join(sorted(TABLES))}"
            raise KeyError(msg)
        return f"{match[1]}{TABLES[name]()}{match[4]}"

    return BLOCK.sub(block, text)


def blocks(text: str) -> list[str]:
    """The names of the figures blocks in ``text``."""
    return [match["name"] for match in BLOCK.finditer(text)]


def main() -> int:
    """Rewrite every page's figures blocks; print the pages that changed."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"updated {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
