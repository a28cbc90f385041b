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
        "a.split_train_data_by_dp_raw(b, 2, balance_data=False)[0].to_train_data(layout='rollout')"
    )
    loaded = _modules_after(statement)
    assert "torch" not in loaded
    assert "ray" not in loaded


def test_importing_the_core_leaves_the_testing_helpers_and_hypothesis_out() -> None:
    code = (
        "import sys, arrow_split; "
        "arrow_split.RolloutBatch.from_train_data({'tokens': [[1, 2], [3]]}); "
        "print('arrow_split.testing' in sys.modules)"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert output.strip() == "False"
    assert "hypothesis" not in _modules_after("import arrow_split")


def test_the_testing_helpers_leave_hypothesis_torch_and_ray_out() -> None:
    loaded = _modules_after(
        "import arrow_split.testing as t; "
        "t.make_train_data(t.RolloutConfig(samples=4, moe_shape=(2, 2)))"
    )
    assert not {"hypothesis", "torch", "ray"} & loaded


def test_the_strategies_fail_fast_without_hypothesis() -> None:
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "try:\n    import arrow_split.testing.strategies\n"
        "except ImportError as error:\n    print(error)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert "pip install arrow-split[test]" in output
