"""The contract suite: seeded hostile calls of every crash-prone entry point, in a subprocess.

Each group runs its cases in one child process (``_child.py``): a crash of the interpreter fails
the test and prints the case that caused it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrow_split import OptionError, OptionTypeError, PlanError, RolloutBatch, take_rows

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 300 if os.environ.get("ARROW_SPLIT_HYPOTHESIS_PROFILE") == "ci" else 120


def _run_child(group: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-W", "error", "-m", "tests.contracts._child", group, str(EXAMPLES)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        cases = [line for line in result.stderr.splitlines() if line.startswith("CASE")]
        last = cases[-1] if cases else "(no case)"
        pytest.fail(
            f"group {group}: exit {result.returncode}; last case: {last}\n{result.stderr[-3000:]}"
        )
    assert f"OK {group}" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("group", ["indices", "shard", "plan"])
def test_core_entry_points_keep_their_contract(group: str) -> None:
    _run_child(group)


@pytest.mark.slow
@pytest.mark.torch
@pytest.mark.parametrize("group", ["offsets", "tensors"])
def test_torch_entry_points_keep_their_contract(group: str) -> None:
    pytest.importorskip("torch")
    _run_child(group)


BATCH = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_offsets_of_unsigned_dtype_never_crash(dtype: type) -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_micro_batches

    decreasing = np.array([0, 3, 1, 4], dtype=dtype)
    with pytest.raises(OptionError, match=r"must be non-decreasing: offset 2 \(1\)"):
        to_micro_batches(BATCH, decreasing)
    rising = np.array([0, 1, 4], dtype=dtype)
    assert len(to_micro_batches(BATCH, rising)) == 2


@pytest.mark.torch
def test_offsets_of_bool_or_huge_values_are_typed_errors() -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_micro_batches

    with pytest.raises(OptionTypeError, match=r"got dtype bool"):
        to_micro_batches(BATCH, np.array([False, True]))
    with pytest.raises(OptionError, match=r"has a value above the int64 range"):
        to_micro_batches(BATCH, np.array([0, 2**64 - 1], dtype=np.uint64))


@pytest.mark.parametrize(
    "indices",
    [np.array([2**64 - 1], dtype=np.uint64), np.array([True]), [[0], [1, 2]], None, "0"],
)
def test_indices_of_any_container_never_crash(indices: object) -> None:
    with pytest.raises(PlanError, match=r"`indices`"):
        take_rows(BATCH, indices)  # type: ignore[arg-type]
