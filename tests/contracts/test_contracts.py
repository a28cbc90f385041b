"""The contract suite: seeded hostile calls of every public entry point, in a subprocess.

Each group runs its cases in one child process (``_child.py``): a crash of the interpreter fails
the test and prints the case that caused it. A call keeps the contract when it returns a correct
result or raises the library's typed error, and leaves its arguments as they were.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from arrow_split import OptionError, OptionTypeError, RolloutBatch, take_rows
from tests.error_facts import raises_facts

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = 250 if os.environ.get("ARROW_SPLIT_HYPOTHESIS_PROFILE") == "ci" else 100
CORE_GROUPS = [
    "indices", "shard", "plan", "train_data", "builder", "dump", "api", "testing", "rank_bytes",
    "stores",
]  # fmt: skip
LEAF_GROUPS = {
    "offsets": "torch", "tensors": "torch", "blocks": "torch",
    "ray": "ray", "ray_prefetch": "ray", "miles": "ray", "wire": "ray",
}  # fmt: skip

# Every public name, and the contract groups whose calls reach it (classes through their
# constructor or methods); the names that are not entry points are listed apart.
COVERED = {
    "arrow_split": {
        "ColumnSpec": "api",
        "RolloutBatch": "train_data dump api",  # from_train_data, read, write, make_plan, equals
        "RolloutBatchBuilder": "builder train_data",  # append, extend, set_global, finish, journal
        "ScheduleConfig": "api",
        "karmarkar_karp": "api",
        "partition_for_rank": "api",
        "plan_fingerprint": "plan",
        "plan_partitions": "plan",
        "plan_schedule": "api",
        "schedule_for_rank": "api",
        "pad_to_dp": "shard",
        "shard_for_rank": "shard",
        "split": "api",
        "take": "api",
        "split_train_data_by_dp_raw": "api dump",
        "take_rows": "indices",
        "describe_journal": "dump",
        "register_column": "api",
        "write_dashboard_columns": "dump",
    },
    "arrow_split.testing": {
        "RolloutConfig": "testing",
        "assert_batches_equal": "testing train_data",
        "assert_shards_equal": "testing",
        "iter_sample_groups": "testing",
        "make_lengths": "testing",
        "make_multimodal_train_data": "testing",
        "make_train_data": "testing",
    },
    "arrow_split.torch": {
        "to_micro_batches": "offsets",
        "to_tensors": "tensors",
        "TensorBlock": "blocks",
        "expert_tensors": "blocks",
    },
    "arrow_split.ray": {
        "process_rollout_data": "ray",
        "split_train_data_by_dp": "ray",
        "RolloutPrefetcher": "ray_prefetch",
        "fill_rank_block": "ray_prefetch",
        "can_free": "wire",
        "fetch": "wire",
        "free": "wire",
        "ref_from_bytes": "wire",
        "ref_from_json": "wire",
        "ref_to_bytes": "wire",
        "ref_to_json": "wire",
    },
    "arrow_split.routing": {
        "ParallelPlace": "rank_bytes",
        "expert_id_dtype": "rank_bytes",
        "take_expert_slice": "rank_bytes",
    },
    "arrow_split.block": {"RankBlock": "rank_bytes ray_prefetch"},
    "arrow_split.prefetch": {"Prefetcher": "rank_bytes"},
    "arrow_split.stores": {
        "MemoryStore": "stores",
        "StoredBatchRef": "stores",  # from_json, to_json
        "put_batch": "stores",
        "remove_batch": "stores",
        "take_rank": "stores",
    },
    "arrow_split.compat.miles": {
        "can_schedule_on_rollout_side": "miles",
        "process_rollout_data": "miles",
        "process_rollout_data_shard": "miles",
        "split_train_data_by_dp": "miles",
        "split_train_data_by_dp_raw": "miles",
        "split_train_data_by_dp_scheduled_raw": "miles",
        "runtime_env": "wire",
        "environment": "wire",
        "current_installation": "wire",
        "prefetcher": "wire",
    },
}
NOT_ENTRY_POINTS = {
    # values, type aliases and results: made by the library, not called with user input
    "ColumnKind", "ColumnValues", "KNOWN_COLUMNS", "Plan", "PlanKey", "RankSchedule", "Role",
    "Schedule", "Shard", "SplitMethod", "TrainDataLayout", "__version__", "ColumnSet",
    "WORKLOADS", "TensorLayout", "HELPER_NAME_PREFIX", "Locality", "OnFetch", "ArrowRef",
    "FlopsFn", "Installation", "OnBatchLengths", "RolloutShard", "SCHEDULE_CONFIG_KEYS",
    "JournalSync", "OnDuplicate", "TrainData", "RolloutTrainData", "ActorTrainData",
    "StoreGetResult", "WIRE_FORMAT", "ENV_VAR",
    "MilesPrefetcher",  # made by `prefetcher` (the wire group); tested on its own too
    "setup_worker",  # installs the drop-in: tests/ray/test_miles_job.py runs it in a Ray job
    "watch_imports",  # no argument: installs once miles is imported (test_miles_job.py)
    "clear_caches",  # takes no argument
    "warm_up",  # its one option, reserve_bytes: tests/ray/test_warm.py
    "install",  # patches miles: tests/test_compat_miles.py covers its arguments
    "KillReport",
    "run_kill_test",  # SIGKILLs writers: its arguments in test_unbounded_cost.py
    "TokenLists",  # holds a sample's values as given: checked where from_train_data takes it
    "ExpertSlice", "BlockColumn", "FilledBlock", "Event", "Fillable", "BlockLayout",
    "ExpertLayout",  # results and protocols of the rank's own bytes (issue 42)
    "ByteStore", "Read",  # the store protocol a backend implements, and a read's result
}  # fmt: skip


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
@pytest.mark.parametrize("group", CORE_GROUPS)
def test_core_entry_points_keep_their_contract(group: str) -> None:
    _run_child(group)


@pytest.mark.slow
@pytest.mark.parametrize("group", sorted(LEAF_GROUPS))
def test_leaf_entry_points_keep_their_contract(group: str) -> None:
    pytest.importorskip(LEAF_GROUPS[group])  # the Ray groups trip a wire instead of starting Ray
    _run_child(group)


def _is_error(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, Exception)


def test_every_public_entry_point_is_in_a_contract_group() -> None:
    from tests.contracts._groups import GROUPS

    groups = {*GROUPS, "indices", "shard", "plan", "offsets", "tensors"}
    assert set(CORE_GROUPS) | set(LEAF_GROUPS) == groups
    for module_name, covered in COVERED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # a leaf whose dependency is not installed here
            continue
        names = {n for n in module.__all__ if not _is_error(getattr(module, n))}
        assert names - NOT_ENTRY_POINTS == set(covered), (module_name, names ^ set(covered))
        for where in covered.values():
            assert set(where.split()) <= groups
    assert len(groups) * EXAMPLES >= 1000  # thousands of cases per CI run


BATCH = RolloutBatch.from_train_data({"tokens": [[1], [2], [3], [4]]})


@pytest.mark.torch
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_offsets_of_unsigned_dtype_never_crash(dtype: type) -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_micro_batches

    decreasing = np.array([0, 3, 1, 4], dtype=dtype)
    with raises_facts(OptionError, key="micro_batch_offsets"):
        to_micro_batches(BATCH, decreasing)
    rising = np.array([0, 1, 4], dtype=dtype)
    assert len(to_micro_batches(BATCH, rising)) == 2


@pytest.mark.torch
def test_offsets_of_bool_or_huge_values_are_typed_errors() -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_micro_batches

    with raises_facts(OptionTypeError, key="micro_batch_offsets"):
        to_micro_batches(BATCH, np.array([False, True]))
    with raises_facts(OptionError, key="micro_batch_offsets"):
        to_micro_batches(BATCH, np.array([0, 2**64 - 1], dtype=np.uint64))


@pytest.mark.parametrize(
    ("indices", "error"),
    [
        (np.array([2**64 - 1], dtype=np.uint64), OptionError),  # a value past int64
        (np.array([True]), OptionTypeError),
        ([[0], [1, 2]], OptionTypeError),
        (None, OptionTypeError),
        ("0", OptionTypeError),
    ],
)
def test_indices_of_any_container_never_crash(indices: object, error: type[Exception]) -> None:
    # the classes of every door's rows (they were PlanErrors)
    with raises_facts(error, key="indices") as caught:
        take_rows(BATCH, indices)  # type: ignore[arg-type]
    assert type(caught.value) is error
