"""The README's core example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_core_example_runs() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    shards = namespace["shards"]
    assert [shard.partition.tolist() for shard in shards] == [[0], [1]]  # type: ignore[attr-defined]


def test_the_crash_example_runs() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("### Surviving a crash", 1)[1]
    block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    exec(compile(block, str(README), "exec"), {})
