"""The manual's shape and its figures: README.md and docs/*.md against the committed JSON.

The Python blocks themselves run through Sybil (``conftest.py`` at the repository root); here:
every benchmark table is what ``docs/figures.py`` renders from ``docs/benchmarks/*.json``, no
block hides from Sybil behind another Python fence, every local link points at a file, every page
is in the manual's table of contents, and the README stays a front page.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```(\S*)", re.M)
RUN = {"python", "output"}  # run or checked by Sybil
SHOWN = {"bash", "text", "{eval-rst}", "{toctree}"}  # deliberately not run


def _figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_figures", DOCS / "figures.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


figures = _figures()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_figures_block_is_what_the_json_gives(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert figures.render(text) == text, (
        f"{page.name}: a benchmark table differs from docs/benchmarks/*.json; "
        "run `python docs/figures.py`"
    )


def test_the_readme_and_the_benchmarks_page_quote_the_json() -> None:
    assert set(figures.blocks(README.read_text(encoding="utf-8"))) == {"headline", "stamp"}
    quoted = set(figures.blocks((DOCS / "benchmarks.md").read_text(encoding="utf-8")))
    assert quoted == {"cluster", "dump", "journal", "stamp", "step"}


def test_a_changed_json_figure_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    original = figures._load

    def slower(name: str) -> dict[str, Any]:
        data = copy.deepcopy(original(name))
        if name == "step":
            data["summary"]["medium"]["eager/64/builder"]["critical_path_seconds"] *= 2
        return data  # type: ignore[no-any-return]

    summary = original("step")["summary"]["medium"]
    classic = summary["eager/64/classic"]["critical_path_seconds"]
    doubled = 2 * summary["eager/64/builder"]["critical_path_seconds"]
    row = f"| eager, dp 64 | {figures.seconds(classic)} | {figures.seconds(doubled)} |"
    text = README.read_text(encoding="utf-8")
    monkeypatch.setattr(figures, "_load", slower)
    rendered = figures.render(text)
    assert rendered != text
    assert row in rendered
    assert row not in text


def test_the_headline_matches_the_step_json_by_hand() -> None:
    summary = json.loads((DOCS / "benchmarks" / "step.json").read_text(encoding="utf-8"))[
        "summary"
    ]["medium"]
    classic = summary["delayed/64/classic"]["critical_path_seconds"]
    builder = summary["delayed/64/builder"]["critical_path_seconds"]
    row = f"| delayed, dp 64 | {figures.seconds(classic)} | {figures.seconds(builder)} |"
    assert row in README.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (4.0712, "4.07 s"),
        (0.0195, "19.5 ms"),
        (0.02, "20 ms"),
        (0.23, "230 ms"),
        (0.00095, "950 µs"),
        (1234.5, "1,230 s"),
    ],
)
def test_seconds_are_written_as_the_step_report_writes_them(value: float, text: str) -> None:
    assert figures.seconds(value) == text


def test_ratios_keep_three_digits() -> None:
    assert [figures.ratio(v) for v in (208.4, 70.52, 1.0, 0.1250038)] == [
        "208x",
        "70.5x",
        "1x",
        "0.125x",
    ]


def test_an_unknown_figures_block_is_an_error() -> None:
    with pytest.raises(KeyError, match="unknown figures block 'nope'"):
        figures.render("<!-- figures:nope -->\n<!-- /figures:nope -->")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_block_is_run_or_deliberately_shown(page: Path) -> None:
    languages = FENCE.findall(page.read_text(encoding="utf-8"))[::2]  # opening fences
    unknown = sorted(set(languages) - RUN - SHOWN)
    assert not unknown, f"{page.name}: fences {unknown} are neither run nor known as shown only"


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_local_link_points_at_a_file(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        assert (page.parent / target).exists(), f"{page.name} links to a missing {target}"


def test_every_docs_page_is_in_the_table_of_contents() -> None:
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    toctree = index.split("```{toctree}", 1)[1].split("```", 1)[0]
    listed = {line.strip() for line in toctree.splitlines() if line.strip() and ":" not in line}
    assert listed == {page.stem for page in DOCS.glob("*.md")} - {"index"}


def test_the_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 250
    first_install = next(i for i, line in enumerate(lines) if "pip install" in line)
    first_miles = next(i for i, line in enumerate(lines) if line == "## Coming from miles")
    assert first_install < 40
    assert first_miles < 120
