"""A user's `mypy --strict` sees the library's types: wrong use flagged, right use not."""

from __future__ import annotations

from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

GOOD = """\
from typing import Any

from arrow_split import RolloutBatch, Shard, split

def use(shard: Shard) -> None:
    rank: int | None = shard.dp_rank
    data = shard.to_train_data(layout="actor")
    first: list[int] = data["tokens"][0]
    reward: float = data["rewards"][0]
    lengths: list[int] = data["global_total_lengths"]
    mine: object = data.get("my_own_key")  # a declared key: not in the TypedDict
    plain: dict[str, Any] = {**data}
    print(rank, first, reward, lengths, mine, plain)

def run(train_data: dict[str, Any]) -> None:
    batch = RolloutBatch.from_train_data(train_data)
    for shard in split(batch, batch.make_plan(2, balance_data=True)):
        use(shard)
    tokens: list[list[int]] = batch.to_train_data()["tokens"]
    print(tokens)
"""

WRONG = """\
from arrow_split import Shard

def use(shard: Shard) -> None:
    bad: str = shard.dp_rank
    data = shard.to_train_data(layout="rollout")
    token: str = data["tokens"][0][0]
    typo = data["token"]
    actor = shard.to_train_data(layout="actor")
    partition = actor["partition"]
    print(bad, token, typo, partition)
"""


def test_mypy_strict_flags_wrong_types_and_accepts_typical_use(tmp_path: Path) -> None:
    (tmp_path / "mypy.ini").write_text("[mypy]\nstrict = True\n", encoding="utf-8")
    (tmp_path / "good.py").write_text(GOOD, encoding="utf-8")
    (tmp_path / "wrong.py").write_text(WRONG, encoding="utf-8")
    stdout, stderr, status = mypy_api.run(
        [
            "--config-file",
            str(tmp_path / "mypy.ini"),
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            str(tmp_path / "good.py"),
            str(tmp_path / "wrong.py"),
        ]
    )
    assert status == 1, stdout + stderr
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert not [line for line in errors if "good.py" in line], stdout
    assert any(
        'wrong.py:4: error: Incompatible types in assignment (expression has type "int | None", '
        'variable has type "str")' in line
        for line in errors
    ), stdout
    assert any(
        'wrong.py:6: error: Incompatible types in assignment (expression has type "int", '
        'variable has type "str")' in line
        for line in errors
    ), stdout
    # a misspelt key, and a key of the other layout, are type errors
    assert any(
        'wrong.py:7: error: TypedDict "RolloutTrainData" has no key "token"' in line
        for line in errors
    ), stdout
    assert any(
        'wrong.py:9: error: TypedDict "ActorTrainData" has no key "partition"' in line
        for line in errors
    ), stdout
