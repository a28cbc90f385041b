"""The core never imports torch or ray: they are leaves, loaded only when used."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(','.join(sorted(sys.modules)))"
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    return {name.split(".")[0] for name in output.strip().split(",")}


def test_importing_the_core_leaves_torch_and_ray_out() -> None:
    loaded = _modules_after("import arrow_split; arrow_split.RolloutBatch.from_train_data")
    assert "torch" not in loaded
    assert "ray" not in loaded


def test_using_the_core_leaves_torch_and_ray_out() -> None:
    statement = (
        "import arrow_split as a; "
        "b = a.RolloutBatch.from_train_data({'tokens': [[1, 2], [3]]}); "
        "a.split_train_data_by_dp_raw(b, 2, balance_data=False)[0].to_train_data()"
    )
    loaded = _modules_after(statement)
    assert "torch" not in loaded
    assert "ray" not in loaded
