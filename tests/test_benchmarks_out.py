"""A benchmark run leaves the committed results alone unless asked (`--out docs/benchmarks`)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

pytest.importorskip("psutil")

from benchmarks.__main__ import BENCHMARKS

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", sorted(module for module, *_ in BENCHMARKS.values()))
def test_the_default_out_is_not_the_committed_results(module: str) -> None:
    parsed = importlib.import_module(module).parse_args(["--smoke"])
    assert parsed.out.resolve() != (REPO_ROOT / "docs" / "benchmarks").resolve()
    assert parsed.out.resolve() == (REPO_ROOT / "benchmarks" / "results").resolve()


def test_make_bench_writes_the_committed_results_explicitly() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-m benchmarks --out docs/benchmarks" in makefile
