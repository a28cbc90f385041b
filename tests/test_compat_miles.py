"""The miles drop-in without Ray: both layouts, schedule keys, multi-LoRA, install().

Expected partitions marked "miles" were produced by miles' own functions on the same input; the
property test compares the drop-in with a plain-Python restatement of miles' split.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arrow_split import (
    ColumnSpec,
    OptionError,
    PlanError,
    RaggedLengthError,
    RolloutBatch,
    ScheduleConfig,
    SchemaError,
    ValueRangeError,
    plan_partitions,
    plan_schedule,
)
from arrow_split.compat import miles
from arrow_split.compat.miles import RolloutShard, StoreGetResult
from arrow_split.testing.strategies import train_data
from tests.error_facts import assert_facts, raises_facts

FULL_CONFIG = {
    "dp_size": 2,
    "cp_size": 1,
    "vpp_size": 1,
    "microbatch_group_size_per_vp_stage": None,
}
LENGTHS = [7, 3, 12, 5, 9, 14, 2, 8, 11, 6, 4, 13, 10, 1, 15, 16]
SLOTS = [1, 0, 2, 1, 0, 0, 2, 1, 1, 2, 0, 1, 2, 0, 0, 1]


def make_args(**overrides: Any) -> Namespace:
    fields: dict[str, Any] = {
        "balance_data": False,
        "delay_split_train_data_by_dp": False,
        "multi_lora": False,
        "multi_lora_n_adapters": None,
        "global_batch_size": 8,
        "micro_batch_size": 1,
        "use_dynamic_batch_size": False,
        "max_tokens_per_gpu": None,
    }
    fields.update(overrides)
    return Namespace(**fields)


def make_data(lengths: list[int], **extra: Any) -> dict[str, Any]:
    responses = [max(1, n // 2) for n in lengths]
    data: dict[str, Any] = {
        "tokens": [list(range(n)) for n in lengths],
        "response_lengths": responses,
        "loss_masks": [[1] * r for r in responses],
        "rewards": [float(i) / 4 for i in range(len(lengths))],
        "truncated": [i % 2 for i in range(len(lengths))],
        "sample_indices": list(range(len(lengths))),
    }
    data.update(extra)
    return data


def schedule_data(lengths: list[int], rollout_ids: list[int]) -> dict[str, Any]:
    return {"tokens": [list(range(n)) for n in lengths], "rollout_ids": rollout_ids}


# --- the rollout layout ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("balance_data", "expected"),
    [
        # miles: each rank's rows of the plan, stably sorted by adapter slot
        (True, [[4, 0, 15, 6], [10, 14, 3, 12], [13, 7, 11, 2], [1, 5, 8, 9]]),
        (False, [[4, 0, 8, 12], [1, 5, 13, 9], [10, 14, 2, 6], [3, 7, 11, 15]]),
    ],
)
def test_multi_lora_rows_keys_and_order_match_miles(
    balance_data: bool, expected: list[list[int]]
) -> None:
    args = make_args(balance_data=balance_data, multi_lora_n_adapters=3)
    data = {
        "tokens": [list(range(n)) for n in LENGTHS],
        "adapter_slots": SLOTS,
        "step_slots": [0],
        "step_adapter_names": ["a"],
        "step_adapter_batch_sizes": {0: 16},
    }
    shards = miles.split_train_data_by_dp_raw(args, data, dp_size=4)
    assert [shard["partition"] for shard in shards] == expected
    for shard in shards:
        assert shard["n_adapters"] == 3
        assert shard["step_adapter_batch_sizes"] == {0: 16}
        assert shard["adapter_slots"] == sorted(shard["adapter_slots"])
        assert shard["adapter_slots"] == [SLOTS[row] for row in shard["partition"]]


@pytest.mark.parametrize(
    ("balance_data", "expected"),
    [
        (True, [[0, 4, 6, 15], [3, 10, 12, 14], [2, 7, 11, 13], [1, 5, 8, 9]]),  # miles
        (False, [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]),
    ],
)
def test_plain_partitions_match_miles(balance_data: bool, expected: list[list[int]]) -> None:
    args = make_args(balance_data=balance_data, multi_lora_n_adapters=3)
    shards = miles.split_train_data_by_dp_raw(args, make_data(LENGTHS), dp_size=4)
    assert [shard["partition"] for shard in shards] == expected
    assert all("n_adapters" not in shard for shard in shards)


def test_rollout_layout_has_miles_keys_and_types() -> None:
    experts = [np.full((n - 1, 2, 3), n, dtype=np.int32) for n in (3, 4, 5, 6)]
    data = make_data(
        [3, 4, 5, 6],
        rollout_routed_experts=experts,
        raw_reward=[0.5, 1.5, 2.5, 3.5],
        dynamic_global_batch_size=4,
        metadata=[{"id": i} for i in range(4)],
        prompt=["a", "b", "c", "d"],
    )
    shard = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)[1]
    assert shard["partition"] == [1, 3]
    assert shard["total_lengths"] == [3, 4, 5, 6]  # the whole batch's, as miles ships it
    assert shard["tokens"] == [[0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    assert shard["truncated"] == [1, 1]
    assert all(type(value) is int for value in shard["truncated"])
    assert shard["rewards"] == [0.25, 0.75]
    assert shard["raw_reward"] == [0.5, 1.5, 2.5, 3.5]
    assert shard["dynamic_global_batch_size"] == 4
    assert shard["metadata"] == [{"id": 1}, {"id": 3}]  # kept: miles' split drops it
    assert shard["prompt"] == ["b", "d"]
    routed = shard["rollout_routed_experts"]
    assert [array.shape for array in routed] == [(3, 2, 3), (5, 2, 3)]
    assert all(isinstance(array, np.ndarray) and array.dtype == np.int32 for array in routed)
    assert routed[1].tolist() == experts[3].tolist()


def test_data_is_not_mutated() -> None:
    data = make_data([3, 4])
    before = {key: list(value) for key, value in data.items()}
    miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)
    assert data == before
    assert "total_lengths" not in data


def test_invalid_data_raises_the_library_error_where_miles_splits_silently() -> None:
    data = make_data([3, 4])
    data["loss_masks"] = [[1, 1, 1], [1, 1]]
    with pytest.raises(RaggedLengthError) as caught:
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)
    assert_facts(caught.value, {"key": "loss_masks", "sample": 0})


def test_strict_unknown_keys_need_a_spec_and_are_then_kept() -> None:
    data = make_data([3, 4], score=[0.5, 0.25])
    with pytest.raises(SchemaError) as caught:
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1, strict_keys=True)
    assert_facts(caught.value, {"key": "score"})
    spec = ColumnSpec("score", "per_sample_scalar", pa.float64())
    shard = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1, specs=[spec])[0]
    assert shard["score"] == [0.5, 0.25]


def test_adapter_slots_must_be_below_n_adapters() -> None:
    data = make_data([3, 4], adapter_slots=[0, 2])
    with pytest.raises(ValueRangeError) as caught:
        miles.split_train_data_by_dp_raw(make_args(multi_lora_n_adapters=2), data, dp_size=1)
    assert_facts(caught.value, {"key": "adapter_slots", "sample": 1})


@pytest.mark.parametrize(
    "sizes",
    [[16], {"a": 16}, {0: -1}, {0: True}],  # not a dict, a str key, -1, a bool value
)
def test_step_adapter_batch_sizes_is_a_dict_of_ints(sizes: object) -> None:
    data = make_data([3], adapter_slots=[0], step_adapter_batch_sizes=sizes)
    expected = "a dict of int keys to non-negative int values"
    with raises_facts(
        SchemaError, key="step_adapter_batch_sizes", expected=expected, got=repr(sizes)
    ):
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1)


def test_an_unset_adapter_count_is_not_added() -> None:
    data = make_data([3, 4], adapter_slots=[0, 2])
    shard = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1)[0]
    assert "n_adapters" not in shard


def test_balanced_split_of_an_indivisible_batch_is_a_plan_error() -> None:
    with pytest.raises(PlanError):
        miles.split_train_data_by_dp_raw(
            make_args(balance_data=True), make_data([3] * 5), dp_size=2
        )


GLOBAL_KEYS = ("raw_reward", "dynamic_global_batch_size", "step_adapter_names")


def _reference_split(data: dict[str, Any], dp_size: int, balance_data: bool) -> list[dict]:
    """miles' split restated in plain Python: copy each rank's rows, ship globals whole."""
    lengths = [len(tokens) for tokens in data["tokens"]]
    if balance_data:
        partitions = [p.tolist() for p in plan_partitions(lengths, dp_size, balance_data=True)]
    else:
        partitions = [list(range(r, len(lengths), dp_size)) for r in range(dp_size)]
    shards = []
    for partition in partitions:
        shard: dict[str, Any] = {"partition": partition, "total_lengths": lengths}
        for key, values in data.items():
            per_sample = key not in (
                "raw_reward",
                "dynamic_global_batch_size",
                "step_adapter_names",
            )
            shard[key] = [values[row] for row in partition] if per_sample else values
        shards.append(shard)
    return shards


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, np.generic):
        return value.item()
    return value


@settings(max_examples=25)
@given(data=train_data(max_samples=12, cap=8), dp_size=st.integers(1, 4), balance=st.booleans())
def test_the_raw_split_equals_miles_split_restated(
    data: dict[str, Any], dp_size: int, balance: bool
) -> None:
    n = len(data["tokens"])
    balance = balance and n % dp_size == 0 and n >= dp_size
    got = miles.split_train_data_by_dp_raw(make_args(balance_data=balance), data, dp_size=dp_size)
    expected = _reference_split(data, dp_size, balance)
    assert [_plain(shard) for shard in got] == [_plain(shard) for shard in expected]


# --- the train side -------------------------------------------------------------------------


def test_process_rollout_data_shard_gives_the_actor_layout() -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4, 5, 6]), dp_size=2)[1]
    seen: list[list[int]] = []
    actor = miles.process_rollout_data_shard(make_args(), shard, on_batch_lengths=seen.append)
    assert actor is shard  # completed in place, as miles does
    assert "partition" not in actor
    assert actor["total_lengths"] == [4, 6]
    assert seen == [[3, 4, 5, 6]]


def test_process_rollout_data_shard_errors() -> None:
    with raises_facts(SchemaError, key="partition"):
        miles.process_rollout_data_shard(make_args(), {"total_lengths": [1]})
    with pytest.raises(PlanError) as caught:
        miles.process_rollout_data_shard(make_args(), {"partition": [3], "total_lengths": [1, 2]})
    assert_facts(caught.value, {"key": "partition"})


def test_witness_info_is_refused_in_eager_mode() -> None:
    witness = Namespace(witness_ids=[1, 2])
    with pytest.raises(OptionError) as caught:
        miles.process_rollout_data(make_args(), [object(), object()], 0, 2, witness)
    assert_facts(caught.value, {"key": "witness_info"})


def test_process_rollout_data_checks_the_rank_first() -> None:
    with pytest.raises(PlanError) as caught:
        miles.process_rollout_data(make_args(), [object(), object()], 2, 2)
    assert_facts(caught.value, {"key": "dp_rank"})


# --- the rollout-side schedule --------------------------------------------------------------


def test_can_schedule_on_rollout_side() -> None:
    args = make_args()
    data = schedule_data([2] * 8, list(range(8)))
    assert miles.can_schedule_on_rollout_side(args, data, FULL_CONFIG)
    assert miles.can_schedule_on_rollout_side(args, RolloutBatch.from_train_data(data), FULL_CONFIG)
    assert not miles.can_schedule_on_rollout_side(args, data, {"dp_size": 2})
    assert not miles.can_schedule_on_rollout_side(args, data, {})
    assert not miles.can_schedule_on_rollout_side(args, data, None)
    assert not miles.can_schedule_on_rollout_side(make_args(multi_lora=True), data, FULL_CONFIG)
    with_media = {**data, "multimodal_train_inputs": [None] * 8}
    assert not miles.can_schedule_on_rollout_side(args, with_media, FULL_CONFIG)
    without_ids = {"tokens": data["tokens"]}
    assert not miles.can_schedule_on_rollout_side(args, without_ids, FULL_CONFIG)
    few = schedule_data([2] * 6, list(range(6)))
    assert not miles.can_schedule_on_rollout_side(args, few, FULL_CONFIG)
    assert miles.can_schedule_on_rollout_side(
        args, {**few, "dynamic_global_batch_size": 6}, FULL_CONFIG
    )


@pytest.mark.parametrize(
    ("balance_data", "expected"),
    [
        (  # miles: (partition, micro_batch_indices) per rank
            False,
            [
                ([0, 1, 4, 8, 5, 9], [[0, 1], [2], [3], [4, 5]]),
                ([2, 3, 7, 6], [[0], [1], [2], [3]]),
            ],
        ),
        (
            True,
            [
                ([0, 1, 3, 7, 5, 9], [[0, 1], [2], [3], [4, 5]]),
                ([2, 4, 8, 6], [[0], [1], [2], [3]]),
            ],
        ),
    ],
)
def test_scheduled_split_matches_miles(
    balance_data: bool, expected: list[tuple[list[int], list[list[int]]]]
) -> None:
    args = make_args(
        balance_data=balance_data,
        global_batch_size=4,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=6,
    )
    data = schedule_data([5, 1, 4, 2, 3, 3, 2, 4, 6, 1], [0, 1, 1, 2, 3, 4, 5, 5, 6, 7])
    shards = miles.split_train_data_by_dp_scheduled_raw(
        args, data, train_parallel_config=FULL_CONFIG
    )
    assert [(s["partition"], s["micro_batch_indices"]) for s in shards] == expected
    for shard in shards:
        assert shard["num_microbatches"] == [2, 2]
        assert shard["num_rollouts"] == [4, 4]
        assert shard["tokens"] == [data["tokens"][row] for row in shard["partition"]]


def test_scheduled_split_static_chunks_and_dynamic_step_size() -> None:
    args = make_args(micro_batch_size=2)
    data = {**schedule_data([2] * 16, list(range(16))), "dynamic_global_batch_size": 8}
    shards = miles.split_train_data_by_dp_scheduled_raw(
        args, data, train_parallel_config=FULL_CONFIG
    )
    schedule = plan_schedule(
        [2] * 16, list(range(16)), 2, ScheduleConfig(global_batch_size=8, micro_batch_size=2)
    )
    for shard, rank in zip(shards, schedule.ranks, strict=True):
        assert shard["partition"] == rank.rows.tolist()
        assert shard["num_microbatches"] == [2, 2]
        assert shard["num_rollouts"] == [8, 8]
        assert shard["dynamic_global_batch_size"] == 8
        flat = [i for micro_batch in shard["micro_batch_indices"] for i in micro_batch]
        assert flat == list(range(len(shard["tokens"])))


def test_balance_by_flops_needs_a_flops_function() -> None:
    args = make_args(
        global_batch_size=4,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=8,
        balance_by_flops=True,
    )
    data = schedule_data([2, 3, 4, 5, 6, 7, 8, 9], list(range(8)))
    with pytest.raises(OptionError) as caught:
        miles.split_train_data_by_dp_scheduled_raw(args, data, train_parallel_config=FULL_CONFIG)
    assert_facts(caught.value, {"key": "args.balance_by_flops"})
    calls: list[list[int]] = []

    def flops(lengths: Any, _args: Any) -> list[float]:
        calls.append(list(lengths))
        return [float(n) ** 2 for n in lengths]

    shards = miles.split_train_data_by_dp_scheduled_raw(
        args, data, train_parallel_config=FULL_CONFIG, flops=flops
    )
    assert calls == [[2, 3, 4, 5, 6, 7, 8, 9]]
    assert sorted(row for shard in shards for row in shard["partition"]) == list(range(8))


def test_scheduled_split_errors() -> None:
    args = make_args()
    with raises_facts(SchemaError, key="rollout_ids"):
        miles.split_train_data_by_dp_scheduled_raw(
            args, {"tokens": [[1]] * 8}, train_parallel_config=FULL_CONFIG
        )
    with raises_facts(OptionError, key="train_parallel_config[cp_size]"):
        miles.split_train_data_by_dp_scheduled_raw(
            args, schedule_data([1] * 8, list(range(8))), train_parallel_config={"dp_size": 2}
        )
    with raises_facts(OptionError, key="train_parallel_config[dp_size]"):
        miles.split_train_data_by_dp_scheduled_raw(
            args, schedule_data([1] * 8, list(range(8))), train_parallel_config={}
        )


# --- what the eager hand-off puts, and the get result ---------------------------------------


def test_rollout_shard_reads_like_the_dict_and_pickles_as_arrow() -> None:
    batch = RolloutBatch.from_train_data(make_data([3, 4, 5]))
    from arrow_split import split_train_data_by_dp_raw

    core = split_train_data_by_dp_raw(batch, 2, balance_data=False)[0]
    shard = RolloutShard(core, 0, 2, {"num_rollouts": [3]})
    expected = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4, 5]), dp_size=2)[0]
    assert dict(shard) == {**expected, "num_rollouts": [3]}
    assert shard["partition"] == [0, 2]
    assert len(shard) == len(expected) + 1
    fresh = shard.to_dict()
    fresh["tokens"].append([9])
    assert len(shard["tokens"]) == 2
    again = pickle.loads(pickle.dumps(shard))
    assert again.shard.equals(core)
    assert (again.dp_rank, again.dp_size, again.extras) == (0, 2, {"num_rollouts": [3]})
    assert "RolloutShard(dp_rank=0, dp_size=2, 2 samples" in repr(shard)


def test_store_get_result_releases_on_exit() -> None:
    batch = RolloutBatch.from_train_data(make_data([3]))
    from arrow_split import split_train_data_by_dp_raw

    core = split_train_data_by_dp_raw(batch, 1, balance_data=False)[0]
    result = StoreGetResult(core)
    with result as value:
        assert value is core
    assert result.value is None


def test_the_rollout_side_functions_leave_ray_and_torch_out() -> None:
    code = (
        "import sys; from arrow_split.compat import miles; from argparse import Namespace; "
        "miles.split_train_data_by_dp_raw(Namespace(balance_data=False), "
        "{'tokens': [[1, 2], [3]]}, dp_size=2); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'torch', 'miles'}))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert output.strip() == "[]"


# --- install() ------------------------------------------------------------------------------

_FAKE_MILES = {
    "miles/__init__.py": "",
    "miles/ray/__init__.py": "",
    "miles/ray/rollout/__init__.py": "",
    "miles/utils/__init__.py": "",
    "miles/ray/rollout/train_data_conversion.py": """
        def split_train_data_by_dp(args, data, train_parallel_config): return "miles"
        def split_train_data_by_dp_raw(args, data, *, dp_size): return "miles"
        def split_train_data_by_dp_scheduled_raw(args, data, *, train_parallel_config):
            return "miles"
        def can_schedule_on_rollout_side(args, data, train_parallel_config): return "miles"
        def process_rollout_data_shard(args, rollout_data): return "miles"
    """,
    "miles/utils/data.py": """
        from miles.ray.rollout.train_data_conversion import split_train_data_by_dp_raw
        def process_rollout_data(args, rollout_data_ref, dp_rank, dp_size, witness_info):
            return "miles"
    """,
    "miles/ray/rollout/rollout_manager.py": """
        from miles.ray.rollout.train_data_conversion import split_train_data_by_dp
    """,
    "miles/utils/timer.py": """
        class Timer:
            _instance = None
            def __new__(cls):
                if cls._instance is None:
                    cls._instance = super().__new__(cls)
                return cls._instance
    """,
}


@pytest.fixture
def fake_miles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for relative, text in _FAKE_MILES.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [name for name in sys.modules if name == "miles" or name.startswith("miles.")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    for name in [name for name in sys.modules if name == "miles" or name.startswith("miles.")]:
        del sys.modules[name]


def test_install_patches_every_binding_and_undoes(fake_miles: Path) -> None:
    import miles.ray.rollout.rollout_manager as manager
    import miles.ray.rollout.train_data_conversion as conversion
    import miles.utils.data as data_module
    from miles.utils.timer import Timer

    installation = miles.install()
    assert set(installation.patched) == {
        "miles.ray.rollout.train_data_conversion.can_schedule_on_rollout_side",
        "miles.ray.rollout.train_data_conversion.process_rollout_data_shard",
        "miles.ray.rollout.train_data_conversion.split_train_data_by_dp",
        "miles.ray.rollout.train_data_conversion.split_train_data_by_dp_raw",
        "miles.ray.rollout.train_data_conversion.split_train_data_by_dp_scheduled_raw",
        "miles.utils.data.process_rollout_data",
        "miles.utils.data.split_train_data_by_dp_raw",
        "miles.ray.rollout.rollout_manager.split_train_data_by_dp",
    }
    assert installation.skipped == (
        "miles.backends.training_utils.data.process_rollout_data",
        "miles.utils.object_store",  # this miles has no store: its delayed put stays its own
    )
    assert manager.split_train_data_by_dp.func is miles.split_train_data_by_dp  # a fresh wrapper
    shards = data_module.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=2)
    assert shards[1]["partition"] == [1]
    actor = conversion.process_rollout_data_shard(make_args(), shards[1])
    assert actor["total_lengths"] == [4]
    assert Timer().seq_lens == [3, 4]  # miles' throughput metrics still get the batch lengths
    assert repr(installation).startswith("Installation(patched=['miles.ray.rollout.")
    installation.undo()
    assert conversion.split_train_data_by_dp_raw(None, None, dp_size=1) == "miles"
    assert data_module.process_rollout_data(None, None, 0, 1, None) == "miles"
    assert manager.split_train_data_by_dp(None, None, None) == "miles"


def test_install_binds_specs_and_prints(
    fake_miles: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import miles.ray.rollout.train_data_conversion as conversion

    spec = ColumnSpec("score", "per_sample_scalar", pa.float64())
    installation = miles.install(specs=[spec], verbose=True)
    try:
        shard = conversion.split_train_data_by_dp_raw(
            make_args(), make_data([3], score=[0.5]), dp_size=1
        )[0]
        assert shard["score"] == [0.5]
        assert "arrow_split.compat.miles patched 7 names" in capsys.readouterr().out
    finally:
        installation.undo()


def test_install_without_miles_is_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "miles", None)
    with pytest.raises(ImportError, match=r"install\(\) patches an importable miles, but"):
        miles.install()


_MILES_MODULES = (
    "miles.ray.rollout.train_data_conversion",
    "miles.utils.data",
    "miles.ray.rollout.rollout_manager",
)


@pytest.mark.parametrize("imported_first", [0, 1, 2, 3])
def test_undo_restores_every_name_whatever_was_imported_first(
    fake_miles: Path, imported_first: int
) -> None:
    import importlib

    for name in _MILES_MODULES[:imported_first]:
        importlib.import_module(name)
    installation = miles.install()
    manager = importlib.import_module("miles.ray.rollout.rollout_manager")
    data_module = importlib.import_module("miles.utils.data")
    assert manager.split_train_data_by_dp.func is miles.split_train_data_by_dp
    installation.undo()
    assert manager.split_train_data_by_dp(None, None, None) == "miles"
    assert data_module.split_train_data_by_dp_raw(None, None, dp_size=1) == "miles"
    assert data_module.process_rollout_data(None, None, 0, 1, None) == "miles"
