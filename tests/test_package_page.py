"""What a user meets first: the package page's links, the docs' hosting, the changelog, and
removed names that say what replaced them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

import arrow_split
from arrow_split._version import __version__
from arrow_split.shard import _REMOVED as REMOVED

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
REPOSITORY = PYPROJECT["project"]["urls"]["Repository"]


def _links(text: str) -> list[str]:
    inline = re.findall(r"\]\(([^)\s]+)\)", text)
    defined = re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.M)
    return inline + defined


def test_the_readme_is_the_long_description() -> None:
    assert PYPROJECT["project"]["readme"] == "README.md"


def test_every_readme_link_is_absolute_so_it_works_on_the_package_page() -> None:
    links = _links(README)
    assert len(links) > 15
    relative = [link for link in links if "://" not in link]
    assert not relative, f"relative links break on the package page: {relative}"


def test_every_link_into_the_repository_names_a_file_of_it() -> None:
    pattern = re.compile(re.escape(REPOSITORY) + r"/(?:blob|tree)/main/([^#]*)")
    targets = [m.group(1) for link in _links(README) if (m := pattern.match(link))]
    assert len(targets) > 15
    missing = [target for target in targets if not (ROOT / target).exists()]
    assert not missing


def test_the_install_section_works_from_a_clone() -> None:
    install = README.split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip install arrow-split" not in install  # not on the index
    for line in ("pip install .", 'pip install ".[ray]"', "python -m build"):
        assert line in install
    assert "--index-url https://download.pytorch.org/whl/cpu" in install


def test_read_the_docs_builds_the_sphinx_docs_with_warnings_as_errors() -> None:
    config = (ROOT / ".readthedocs.yaml").read_text(encoding="utf-8")
    assert "configuration: docs/conf.py" in config
    assert "fail_on_warning: true" in config
    conf = (ROOT / "docs" / "conf.py").read_text(encoding="utf-8")
    assert "nitpicky = True" in conf


def test_the_changelog_has_every_release() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", changelog, re.M)
    assert releases == ["0.3.0", "0.2.0", "0.1.0"]
    assert __version__ in releases
    for (_, name), (release, _) in REMOVED.items():
        assert f"`shard.{name}" in changelog
        assert release in releases


@pytest.mark.parametrize("name", sorted(name for owner, name in REMOVED if owner == "Shard"))
def test_a_removed_shard_name_says_what_replaced_it(name: str) -> None:
    batch = arrow_split.RolloutBatch.from_train_data({"tokens": [[1, 2]], "response_lengths": [1]})
    shard = arrow_split.split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    with pytest.raises(AttributeError, match=rf"`Shard\.{name}` was removed in 0\.3\.0; .*"):
        getattr(shard, name)
    assert not hasattr(shard, name)


def test_an_unknown_shard_name_is_a_plain_attribute_error() -> None:
    batch = arrow_split.RolloutBatch.from_train_data({"tokens": [[1, 2]], "response_lengths": [1]})
    shard = arrow_split.split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    with pytest.raises(AttributeError, match="'Shard' object has no attribute 'nope'"):
        shard.nope  # noqa: B018
