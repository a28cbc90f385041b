"""Faults: a writer SIGKILLed at random points, a full disk, a journal of this version on file.

The kill test here is a seeded subset (a few dozen kill points); the full run (hundreds) is
``python -m benchmarks.journal``, whose JSON is committed in ``docs/benchmarks/journal.json``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from arrow_split import ColumnSpec, RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import assert_batches_equal, run_kill_test

DATA = Path(__file__).resolve().parent / "data"
REPO_ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the kill test forks")


@pytest.mark.parametrize(("seed", "sync"), [(1, "os"), (2, "call")])
def test_a_killed_writer_loses_duplicates_and_tears_nothing(
    tmp_path: Path, seed: int, sync: str
) -> None:
    report = run_kill_test(24, seed=seed, groups=24, sync=sync, folder=str(tmp_path))
    assert report.kill_points == 24
    assert (report.lost, report.duplicated, report.torn) == (0, 0, 0), report
    assert report.acked_samples > 0


_FULL_DISK = textwrap.dedent(
    """
    import errno, os, resource, shutil, signal, sys
    from arrow_split import JournalError, RolloutBatch, RolloutBatchBuilder
    from arrow_split.testing import RolloutConfig, assert_batches_equal, iter_sample_groups

    folder, copy = sys.argv[1], sys.argv[2]
    config = RolloutConfig(16, 96.0, 384, prompt_tokens=(8, 64), seed=3)  # 4 groups of 4
    stream = list(iter_sample_groups(config, 4))
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    builder.extend(stream[0])
    builder.extend(stream[1])
    journal = os.path.join(folder, "step-000000.journal")
    size = os.path.getsize(journal)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for call, limit in ((lambda: builder.extend(stream[2]), size + 200), (builder.finish, 256)):
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
        try:
            call()
        except JournalError as error:
            assert error.errno == errno.EFBIG, error
            assert "free space" in str(error), error
        else:
            raise AssertionError("a write past the file size limit passed")
        assert len(builder) == 8
        assert os.path.getsize(journal) == size
        assert sorted(os.listdir(folder)) == ["journal.lock", "step-000000.journal"]
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    shutil.copytree(folder, copy)  # the lock is not copied: a copy is recovered
    expected = RolloutBatchBuilder()
    expected.extend(stream[0])
    expected.extend(stream[1])
    expected = expected.finish()
    recovered = RolloutBatchBuilder.recover(copy)
    assert_batches_equal(recovered.finish(), expected)
    recovered.close()
    assert_batches_equal(builder.finish(), expected)
    print("ok")
    """
)


def test_a_full_disk_is_a_journal_error_and_changes_nothing(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path / "journal"), str(tmp_path / "copy")],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def stored_journal_samples() -> tuple[list[dict[str, object]], dict[str, object]]:
    """What ``tests/data/journal_v1`` holds: two groups and a batch-global value."""
    groups: list[dict[str, object]] = [
        {
            "tokens": [[1, 2, 3, 4], [5, 6, 7]],
            "response_lengths": [2, 1],
            "loss_masks": [[1, 0], [1]],
            "rollout_log_probs": [[-0.5, -0.25], [-1.0]],
            "rewards": [1.0, 0.0],
            "sample_indices": [0, 1],
            "prompt": ["what is 2 + 2?", "what is 2 + 2?"],
            "metadata": [{"group": 0}, None],
            "raw_reward": [0.5, 0.25],
        },
        {
            "tokens": [[8, 9]],
            "response_lengths": [1],
            "loss_masks": [[1]],
            "rollout_log_probs": [[-2.0]],
            "rewards": [0.5],
            "sample_indices": [2],
            "prompt": [{"text": "not a str: the column falls back to pickle"}],
            "metadata": [{"group": 1}],
            "raw_reward": [1.0],
        },
    ]
    return groups, {"dynamic_global_batch_size": 3}


def write_stored_journal(folder: Path) -> None:
    """Write ``tests/data/journal_v1`` again (only when the format's version changes)."""
    groups, batch_globals = stored_journal_samples()
    builder = RolloutBatchBuilder(journal=folder, identity="sample_indices")
    for group in groups:
        builder.extend(group)
    for key, value in batch_globals.items():
        builder.set_global(key, value)
    builder.close()


def test_a_journal_of_version_1_is_recovered(tmp_path: Path) -> None:
    shutil.copytree(DATA / "journal_v1", tmp_path / "journal")
    groups, batch_globals = stored_journal_samples()
    train_data = {key: [v for group in groups for v in group[key]] for key in groups[0]}  # type: ignore[attr-defined]
    pickled = ColumnSpec("metadata", "per_sample_object", codec="pickle")  # version 1's default
    expected = RolloutBatch.from_train_data({**train_data, **batch_globals}, specs=[pickled])
    recovered = RolloutBatchBuilder.recover(tmp_path / "journal")
    assert len(recovered) == 3
    assert recovered.extend(groups[1]) == 0  # the identity key came back too
    batch = recovered.finish()
    assert batch.specs["prompt"].codec == "pickle"
    assert batch.specs["metadata"].codec == "pickle"  # the step goes on as its journal began
    assert_batches_equal(batch, expected)
    assert_batches_equal(RolloutBatch.read(tmp_path / "journal" / "step-000000.arrow"), expected)
