"""The markdown report (``results.md``) the README embeds, from the figures and ratios."""

from __future__ import annotations

from typing import Any

from benchmarks.config import STEPS
from benchmarks.report import memcpy_by_dp, per_rank_table

__all__ = ["format_bytes", "format_seconds", "markdown"]


def format_seconds(seconds: float | None) -> str:
    """``1.23 s``, ``12.3 ms`` or ``456 us``."""
    if seconds is None:
        return "—"
    if seconds == 0:
        return "0"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def format_bytes(count: float | None) -> str:
    """``1.2 GiB``, ``3.4 MiB``, ``5.6 KiB`` or ``78 B``."""
    if count is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= size:
            value = count / size
            return f"{value:.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"
    return f"{count:.0f} B"


def _tokens(count: int) -> str:
    return f"{count / 1e6:.1f}M" if count >= 1e6 else f"{count:,}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3g}x" if value < 1000 else f"{value:,.0f}x"


def _timing(figures: dict[str, Any]) -> str:
    seconds = figures["seconds"]
    return f"{format_seconds(seconds['median'])} ({format_seconds(seconds['min'])})"


def _put(figures: dict[str, Any]) -> str:
    spilled = ", SPILLED to disk" if figures.get("spilled") else ""
    private = format_bytes(figures["driver"]["private_increase_bytes"])
    return f"{_timing(figures)}; {format_bytes(figures['store_bytes'])} stored{spilled}; +{private}"


def _build(figures: dict[str, Any]) -> str:
    return f"{_timing(figures)}; +{format_bytes(figures['driver']['private_increase_bytes'])}"


def _header(results: dict[str, Any]) -> list[str]:
    workload, meta = results["workload"], results["meta"]
    machine, versions = meta["machine"], meta["versions"]
    moe = f", MoE routed experts {workload['moe_shape']}" if workload["moe"] else ""
    return [
        f"## arrow_split benchmark: `{workload['name']}` workload{moe}",
        "",
        f"{workload['num_samples']:,} samples, {_tokens(workload['num_tokens'])} tokens "
        f"({workload['samples_at_cap']:,} responses at the {workload['response_cap']}-token cap), "
        f"{format_bytes(workload['batch_nbytes'])} as Arrow; {results['plan']} plan; "
        f"at least {results['repeats']} runs of each measurement (more for cheap ones, until "
        f"{results['min_seconds']:g} s of runs), "
        "times are median (min).",
        "",
        f"Machine: {machine['platform']}, {machine['cpu_count']} CPUs, "
        f"{format_bytes(machine['ram_bytes'])} RAM. Python {versions['python']}, "
        f"arrow_split {versions['arrow_split']}, pyarrow {versions['pyarrow']}, "
        f"numpy {versions['numpy']}, ray {versions['ray']}, torch {versions['torch']}"
        f"{', commit ' + meta['git_commit'] if meta.get('git_commit') else ''}. "
        f"Run took {meta['wall_s']:.0f} s; load average {meta['load_average']['before'][0]:.1f} "
        f"before, {meta['load_average']['after'][0]:.1f} after.",
        "",
    ]


def _driver(results: dict[str, Any]) -> list[str]:
    build, put, ratio = results["build"], results["put"], results["ratios"]
    lines = [
        "### Driver: build and put (time; bytes in the object store; driver's private peak RSS +)",
        "",
        "The baseline puts its dict of lists as it is; arrow_split first builds a RolloutBatch.",
        "",
        "| step | baseline (dict of lists) | arrow_split | baseline / arrow_split |",
        "|---|---|---|---|",
        f"| build from Python lists | — | {_build(build['from_lists'])} | |",
        f"| build from numpy arrays | — | {_build(build['from_numpy'])} | |",
        f"| put, delayed (the whole batch once) | {_put(put['baseline_delayed'])} | "
        f"{_put(put['arrow_delayed'])} | {_ratio(ratio['delayed_put'])} |",
    ]
    lines += [
        f"| put, eager, dp_size {dp} (plan, split, one put per rank) | "
        f"{_put(put['baseline_eager'][dp])} | {_put(figures)} | {_ratio(ratio['eager_put'][dp])} |"
        for dp, figures in put["arrow_eager"].items()
    ]
    lines += [
        f"| **limit**: `ray.put` of one contiguous buffer of the batch's size | | "
        f"{_put(put['single_buffer'])} | |",
    ]
    lines += [
        f"| **limit**: {dp} `ray.put`s of plain buffers of the shards' sizes (Ray's cost per "
        f"object) | | {_put(figures)} | |"
        for dp, figures in put.get("per_rank_buffers", {}).items()
    ]
    lines.append("")
    return lines


def _rank_rows(results: dict[str, Any]) -> list[str]:
    table = per_rank_table(results)
    memcpy = memcpy_by_dp(results)
    rows = []
    for dp in [str(dp) for dp in results["dp_sizes"]]:
        for mode in ("delayed", "eager"):
            for path in ("baseline", "arrow"):
                figures = table.get(f"{path}/{mode}", {}).get(dp)
                if figures is None:
                    continue
                steps = [format_seconds(figures["steps"].get(name)) for name in STEPS]
                memory = figures["memory"]
                name = "arrow_split" if path == "arrow" else "baseline"
                rows.append(
                    f"| {dp} | {mode} | {name} | {' | '.join(steps)} | "
                    f"**{format_seconds(figures['median'])}** ({format_seconds(figures['min'])}) "
                    f"| {format_seconds(figures['gc'])} | "
                    f"{format_bytes(memory['private_increase_bytes'])} | "
                    f"{format_bytes(memory['shared_touched_bytes'])} | "
                    f"{format_bytes(memory['arrow_allocated_bytes'])} |"
                )
        if dp in memcpy:
            entry = memcpy[dp]
            rows.append(
                f"| {dp} | **limit** | memcpy of a rank's {format_bytes(entry['bytes'])} | | | | | "
                f"{format_seconds(entry['seconds'])} | | | | |"
            )
    return rows


def _ranks(results: dict[str, Any]) -> list[str]:
    measured = "; ".join(
        f"dp_size {entry['dp_size']}: {', '.join(map(str, entry['ranks']))}"
        for entry in results["agreement"]
    )
    return [
        "### Per rank, measured inside a Ray actor",
        "",
        f"Only a few ranks per configuration are measured (ranks {measured}), each configuration "
        "in a fresh `num_cpus=0` actor that times its own steps; the figure is the median over "
        "those ranks. *of which GC*: time CPython's garbage collector ran inside the steps "
        "(left enabled, as in a real process). *private +*: peak increase of the rank's "
        "private memory. *store pages*: object-store pages the rank touched. "
        "*Arrow alloc*: growth of `pyarrow.total_allocated_bytes()` while the rank "
        "holds its shard (Arrow's memory pool, where arrow_split gathers a shard's rows; "
        "torch tensors and Python objects are not in it).",
        "",
        "| dp_size | mode | path | get | plan | take | to_tensors | sum | of which GC | "
        "private + | store pages | Arrow alloc |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *_rank_rows(results),
        "",
    ]


def _targets(results: dict[str, Any]) -> list[str]:
    lines = [
        "### Targets",
        "",
        "| target | where | goal | measured | reached |",
        "|---|---|---|---|---|",
    ]
    for target in results["targets"]:
        reached = {True: "yes", False: "**no**", None: "not measured"}[target["reached"]]
        lines.append(
            f"| {target['target']} | {target['where']} | {target['goal']} | "
            f"{_ratio(target['value'])} | {reached} |"
        )
    return [*lines, ""]


_RATIO_ROWS = (
    ("delayed per-rank: baseline / arrow_split", ("delayed_per_rank",)),
    ("same, garbage-collector time taken out", ("delayed_per_rank_excluding_gc",)),
    ("eager per-rank: baseline / arrow_split", ("eager_per_rank",)),
    ("eager put: baseline / arrow_split", ("eager_put",)),
    ("arrow_split eager put / one-buffer put", ("arrow_put_over_single_buffer", "eager")),
    ("arrow_split delayed per-rank / memcpy of its bytes", ("arrow_rank_over_memcpy", "delayed")),
    ("arrow_split eager per-rank / memcpy of its bytes", ("arrow_rank_over_memcpy", "eager")),
)


def _ratios(results: dict[str, Any]) -> list[str]:
    sizes = [str(dp) for dp in results["dp_sizes"]]
    lines = [
        "### Ratios by dp_size (medians)",
        "",
        f"| ratio | {' | '.join(f'dp_size {dp}' for dp in sizes)} |",
        f"|---|{'---|' * len(sizes)}",
    ]
    for name, keys in _RATIO_ROWS:
        by_dp: Any = results["ratios"]
        for key in keys:
            by_dp = by_dp[key]
        lines.append(f"| {name} | {' | '.join(_ratio(by_dp.get(dp)) for dp in sizes)} |")
    return [*lines, ""]


def _planner(results: dict[str, Any]) -> list[str]:
    lines = [
        "### Planner (balanced Karmarkar-Karp): arrow_split against the baseline's",
        "",
        "| samples | dp_size | arrow_split | baseline | baseline / arrow_split |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {entry['n']:,} | {entry['dp_size']} | {format_seconds(entry['planner_s']['median'])} "
        f"| {format_seconds(entry['reference_s']['median'])} | {_ratio(entry['speedup_median'])} |"
        for entry in results["planner"]
    ]
    return [*lines, ""]


_NOTES = [
    "### How it is measured",
    "",
    "- **Baseline**: the classic path, rewritten from its description (`benchmarks/baseline.py`): "
    "a dict of Python lists; eager puts one dict per rank built by list indexing, delayed puts "
    "the whole dict and every rank gets it, builds all shards and keeps its own; "
    "`torch.tensor(list)` per sample; its own plain-Python Karmarkar-Karp. "
    "Before anything is timed, the baseline's shards are checked "
    "equal to arrow_split's (`shard_for_rank`, eager and delayed `process_rollout_data`) for "
    "every rank measured.",
    "- **Bytes stored**: `ray.experimental.get_object_locations(refs)[ref]['object_size']` "
    "summed over a put's references (Ray's own record of each object's size).",
    "- **Memory**: from `/proc/self/status`: the peak RSS (VmHWM, reset through "
    "`/proc/self/clear_refs` before each measurement) less the shared pages (RssShmem), minus "
    "the private RSS before: the *private* increase; and the growth of RssShmem: the "
    "object-store pages the process mapped (Linux maps shared pages around each touched one, so "
    "scattered rows map more than their own bytes).",
    "- **Limits**: one `ray.put` of a contiguous numpy buffer as large as the Arrow batch; a "
    "`np.copyto` of a rank's Arrow bytes into freshly allocated memory, in the rank's actor.",
    "- **Per-rank steps**: arrow_split's ranks are timed with the calls `process_rollout_data` "
    "makes, one at a time (`ray.get`, `partition_for_rank`, `take_rows`; an eager rank's *plan* "
    "is the leaf's check of its rows), then `to_tensors(layout='per_sample')`. Each actor first "
    "runs every step once on a tiny batch, untimed.",
    "",
]


def markdown(results: dict[str, Any]) -> str:
    """The whole report as markdown."""
    sections = [
        _header(results),
        _targets(results),
        _driver(results),
        _ranks(results),
        _ratios(results),
        _planner(results),
        _NOTES,
    ]
    return "\n".join(line for section in sections for line in section)
