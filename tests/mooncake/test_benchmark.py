"""The Mooncake benchmark in its smoke mode: a stamped JSON of every path, ratios and a plot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

try:  # the wheel, or libibverbs1 it links, missing: skipped with the reason
    import arrow_split.mooncake  # noqa: F401
except ImportError as exc:
    pytest.skip(str(exc), allow_module_level=True)
pytest.importorskip("ray")
pytest.importorskip("matplotlib")

REPO_ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.mooncake, pytest.mark.ray]


def test_the_smoke_run_writes_every_path_per_rank(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.mooncake", "--smoke", "--out", str(tmp_path)]
    done = subprocess.run(
        command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "mooncake.json").read_text())
    assert results["stamp"]["command"]
    assert sorted(results["dp"]) == ["2", "4"]
    for row in results["dp"].values():
        for path in ("arrow_split", "mooncake", "ray"):
            assert len(row[path]["take_seconds"]) == len(row["ranks"])
            assert len(row[path]["bytes_read"]) == len(row["ranks"])
            assert row[path]["put_seconds"] > 0
        assert row["ratios"]["max_bytes_read_over_share"] < 1.1
    assert (tmp_path / "mooncake.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
