"""Plots of the cluster and soak runs (matplotlib, Agg backend), from their JSON reports.

Run ``python -m benchmarks.plots REPORT.json [...]`` to redraw a saved report; ``cluster.py``
and ``soak.py`` call these functions after each run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

MIB = 2**20

__all__ = ["main", "plot_cluster", "plot_soak"]


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


def main(argv: list[str] | None = None) -> int:
    """Redraw the plot of each saved report, next to it."""
    for name in argv if argv is not None else sys.argv[1:]:
        report_path = Path(name)
        report = json.loads(report_path.read_text())
        draw = plot_soak if "samples" in report else plot_cluster
        draw(report, report_path.with_suffix(".png"))
        print(f"wrote {report_path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
