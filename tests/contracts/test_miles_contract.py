"""The miles drop-in under hostile ``args``, ``data`` and references: typed errors, no coercion.

No Ray is started here: every check named below runs before anything is put or fetched.
"""

from __future__ import annotations

import copy
from argparse import Namespace
from typing import Any

import numpy as np
import pytest

from arrow_split import (
    ArrowSplitError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanTypeError,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.compat import miles
from tests.error_facts import raises_facts

FLAGS = (
    "balance_data",
    "delay_split_train_data_by_dp",
    "multi_lora",
    "use_dynamic_batch_size",
    "balance_by_flops",
    "allow_partial_train_step",
)
CONFIG = {"dp_size": 2, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}


def _args(**fields: Any) -> Namespace:
    defaults: dict[str, Any] = dict.fromkeys(FLAGS, False)
    defaults.update(global_batch_size=2, micro_batch_size=1, max_tokens_per_gpu=None)
    return Namespace(**{**defaults, **fields})


def _data() -> dict[str, Any]:
    return {
        "tokens": [[1, 2], [3], [4, 5, 6], [7]],
        "response_lengths": [1, 1, 2, 1],
        "loss_masks": [[1], [1], [1, 0], [1]],
        "rollout_ids": [0, 0, 1, 1],
    }


def _rank_dicts(args: Namespace) -> list[dict[str, Any]]:
    return miles.split_train_data_by_dp_raw(args, _data(), dp_size=2)


def _outcome(call: Any) -> str:
    try:
        call()
    except ArrowSplitError as exc:  # another check of the same call may come first
        return f"{type(exc).__name__}: {exc}"
    return "accepted"


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("value", ["False", "True", 0, 1, 1.0, "", np.int64(1), [True]])
def test_silent_coercion_every_flag_refuses_what_is_not_a_bool(
    flag: str, value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_put(*args: object) -> None:
        raise AssertionError("a put was reached with a bad flag")

    monkeypatch.setattr(miles, "put_eager", no_put)
    monkeypatch.setattr(miles, "put_delayed", no_put)
    args = _args(**{flag: value})
    calls = [
        lambda: miles.split_train_data_by_dp_raw(args, _data(), dp_size=2),
        lambda: miles.split_train_data_by_dp_scheduled_raw(
            args, _data(), train_parallel_config=CONFIG
        ),
        lambda: miles.split_train_data_by_dp(args, _data(), CONFIG),
        lambda: miles.can_schedule_on_rollout_side(args, _data(), CONFIG),
    ]
    outcomes = [_outcome(call) for call in calls]
    assert f"OptionTypeError: `args.{flag}` must be a bool" in "\n".join(outcomes)


def test_silent_coercion_numpy_bools_are_bools() -> None:
    plain = _rank_dicts(_args(balance_data=False))
    numpy = _rank_dicts(_args(balance_data=np.bool_(False)))
    assert [d["partition"] for d in plain] == [d["partition"] for d in numpy]
    assert [d["partition"] for d in plain] == [[0, 2], [1, 3]]  # strided, not balanced


@pytest.mark.parametrize("args", [None, {}, {"balance_data": False}, "args", 3, [False]])
def test_untyped_errors_args_that_is_not_a_namespace(args: object) -> None:
    with raises_facts(OptionTypeError, key="args"):
        miles.split_train_data_by_dp_raw(args, _data(), dp_size=2)
    with raises_facts(OptionTypeError, key="args"):
        miles.can_schedule_on_rollout_side(args, _data(), CONFIG)


def test_untyped_errors_args_missing_a_field() -> None:
    with raises_facts(OptionError, key="args.balance_data", mistake="option_value"):
        miles.split_train_data_by_dp_raw(Namespace(), _data(), dp_size=2)
    args = Namespace(balance_data=False, use_dynamic_batch_size=False, micro_batch_size=1)
    with raises_facts(OptionError, key="args.global_batch_size", mistake="option_value"):
        miles.split_train_data_by_dp_scheduled_raw(args, _data(), train_parallel_config=CONFIG)


@pytest.mark.parametrize(
    ("size", "error"),
    [
        ("8", PlanTypeError),
        (8.0, PlanTypeError),
        (None, PlanTypeError),
        (True, PlanTypeError),
        (0, PlanError),
        (-1, PlanError),
    ],
)
def test_untyped_errors_global_batch_size_of_another_type(
    size: object, error: type[PlanError]
) -> None:
    # a planning number: the classes `ScheduleConfig(global_batch_size=...)` raises
    args = _args(global_batch_size=size)
    with raises_facts(error, key="args.global_batch_size") as caught:
        miles.can_schedule_on_rollout_side(args, _data(), CONFIG)
    assert type(caught.value) is error


@pytest.mark.parametrize("data", [None, 3, "tokens", [[1, 2]]])
def test_untyped_errors_data_that_is_not_a_dict(data: object) -> None:
    with pytest.raises(ArrowSplitError):
        miles.split_train_data_by_dp_raw(_args(), data, dp_size=2)  # type: ignore[arg-type]


@pytest.mark.parametrize("item", [3, None, "ref", 1.5, object()])
def test_untyped_errors_references_that_are_not_references(item: object) -> None:
    pytest.importorskip("ray")  # imported to tell a reference from a value; not started
    with raises_facts(OptionTypeError, key="rollout_data_ref[0]"):
        miles.process_rollout_data(_args(), [item, item], 0, 2)
    delayed = _args(delay_split_train_data_by_dp=True)
    if item is not None:
        with raises_facts(OptionTypeError, key="rollout_data_ref"):
            miles.process_rollout_data(delayed, item, 0, 2)


@pytest.mark.parametrize("witness_info", [Namespace(), {"witness_ids": [1]}, 3])
def test_untyped_errors_witness_info_without_witness_ids(witness_info: object) -> None:
    delayed = _args(delay_split_train_data_by_dp=True)
    with raises_facts(OptionTypeError, key="witness_info"):
        miles.process_rollout_data(delayed, _data(), 0, 2, witness_info)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"partition": [0, 1.0]}, SchemaTypeError),
        ({"partition": [0, 9]}, PlanError),
        ({"partition": None}, SchemaTypeError),
        ({"partition": ["0"]}, SchemaTypeError),
        ({"total_lengths": None}, SchemaTypeError),
        ({"total_lengths": 4}, SchemaTypeError),
    ],
)
def test_half_mutation_a_failed_shard_leaves_the_dict_as_it_was(
    change: dict[str, Any], error: type[Exception]
) -> None:
    shard = {**_rank_dicts(_args())[0], **change}
    before = copy.deepcopy(shard)
    with pytest.raises(error):
        miles.process_rollout_data_shard(_args(), shard)
    assert shard == before


def test_half_mutation_a_failing_callback_leaves_the_dict_as_it_was() -> None:
    shard = _rank_dicts(_args())[0]
    before = copy.deepcopy(shard)

    def fail(total_lengths: list[int]) -> None:
        raise RuntimeError("metrics down")

    with pytest.raises(RuntimeError, match="metrics down"):
        miles.process_rollout_data_shard(_args(), shard, on_batch_lengths=fail)
    assert shard == before
    done = miles.process_rollout_data_shard(_args(), shard)
    assert "partition" not in done
    assert done["total_lengths"] == [2, 3]


def test_half_mutation_a_shard_of_another_type_is_refused() -> None:
    with raises_facts(SchemaTypeError, key="rollout_data"):
        miles.process_rollout_data_shard(_args(), None)  # type: ignore[arg-type]
    with raises_facts(SchemaError, key="partition"):
        miles.process_rollout_data_shard(_args(), {"total_lengths": [1]})
