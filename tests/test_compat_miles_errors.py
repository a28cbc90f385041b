"""One rule per miles field: every door of the drop-in judges a field of `args`, of the train
parallel config or of the data the same way, with the class :data:`MISTAKES` gives the mistake
and a key naming miles' field (``args.<field>``, ``train_parallel_config[<key>]``).

No Ray is started here: every check runs before anything is put or fetched.
"""

from __future__ import annotations

from argparse import Namespace
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from arrow_split import (
    ArrowSplitError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanTypeError,
    ScheduleConfig,
    SchemaError,
    SchemaTypeError,
)
from arrow_split.compat import miles
from tests.error_facts import raises_facts
from tests.test_compat_miles import FULL_CONFIG, make_args, make_data, schedule_data

DATA = schedule_data([2] * 8, list(range(8)))


def _scheduled(args: Namespace, config: Any = FULL_CONFIG, data: Any = DATA) -> Any:
    return miles.split_train_data_by_dp_scheduled_raw(args, data, train_parallel_config=config)


def _raised(call: Callable[[], object]) -> ArrowSplitError:
    with pytest.raises(ArrowSplitError) as caught:
        call()
    return caught.value


# --- process_rollout_data parses every option at the door, in either mode ---------------------


@pytest.mark.parametrize("delayed", [False, True])
@pytest.mark.parametrize(
    ("options", "error", "key"),
    [
        ({"strict_keys": "False"}, OptionTypeError, "strict_keys"),
        ({"pad_to_dp": 0}, OptionTypeError, "pad_to_dp"),
        ({"specs": [1]}, SchemaTypeError, "specs[0]"),
    ],
)
def test_process_rollout_data_parses_its_options_in_either_mode(
    delayed: bool, options: dict[str, Any], error: type[Exception], key: str
) -> None:
    args = make_args(delay_split_train_data_by_dp=delayed)
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=1)[0]
    ref = make_data([3, 4]) if delayed else [shard]
    with raises_facts(error, key=key):
        miles.process_rollout_data(args, ref, 0, 1, **options)


# --- args: a missing field, a field of the wrong type or out of range ------------------------


def _without(name: str, **fields: Any) -> Namespace:
    args = make_args(**fields)
    delattr(args, name)
    return args


@pytest.mark.parametrize(
    ("name", "call"),
    [
        (
            "balance_data",
            lambda: miles.split_train_data_by_dp_raw(_without("balance_data"), DATA, dp_size=2),
        ),
        ("balance_data", lambda: _scheduled(_without("balance_data"))),
        ("use_dynamic_batch_size", lambda: _scheduled(_without("use_dynamic_batch_size"))),
        ("global_batch_size", lambda: _scheduled(_without("global_batch_size"))),
        (
            "global_batch_size",
            lambda: miles.can_schedule_on_rollout_side(
                _without("global_batch_size"), DATA, FULL_CONFIG
            ),
        ),
        ("micro_batch_size", lambda: _scheduled(_without("micro_batch_size"))),
    ],
)
def test_a_missing_args_field_is_named_with_the_flag_that_sets_it(
    name: str, call: Callable[[], object]
) -> None:
    with raises_facts(OptionError, key=f"args.{name}", mistake="option_value") as caught:
        call()
    assert type(caught.value) is OptionError
    assert f"`--{name.replace('_', '-')}`" in str(caught.value.fix)


def test_micro_batch_size_is_not_needed_with_a_token_budget() -> None:
    args = _without("micro_batch_size", use_dynamic_batch_size=True, max_tokens_per_gpu=8)
    assert len(_scheduled(args)) == 2


@pytest.mark.parametrize(
    ("fields", "config", "key", "core"),
    [
        ({"global_batch_size": 0}, {}, "args.global_batch_size", {"global_batch_size": 0}),
        ({"global_batch_size": "8"}, {}, "args.global_batch_size", {"global_batch_size": "8"}),
        ({"micro_batch_size": None}, {}, "args.micro_batch_size", {"micro_batch_size": None}),
        ({"micro_batch_size": 1.0}, {}, "args.micro_batch_size", {"micro_batch_size": 1.0}),
        (
            {"use_dynamic_batch_size": True, "max_tokens_per_gpu": 0},
            {},
            "args.max_tokens_per_gpu",
            {"use_dynamic_batch_size": True, "max_tokens_per_gpu": 0},
        ),
        (
            {"use_dynamic_batch_size": True},
            {},
            "args.use_dynamic_batch_size",
            {"use_dynamic_batch_size": True},
        ),
        ({}, {"cp_size": 0}, "train_parallel_config[cp_size]", {"cp_size": 0}),
        ({}, {"cp_size": None}, "train_parallel_config[cp_size]", {"cp_size": None}),
        ({}, {"vpp_size": 1.5}, "train_parallel_config[vpp_size]", {"vpp_size": 1.5}),
        (
            {},
            {"vpp_size": 2, "microbatch_group_size_per_vp_stage": 0},
            "train_parallel_config[microbatch_group_size_per_vp_stage]",
            {"vpp_size": 2, "microbatch_group_size_per_vp_stage": 0},
        ),
    ],
)
def test_a_schedule_field_gets_the_core_class_under_miles_name(
    fields: dict[str, Any], config: dict[str, Any], key: str, core: dict[str, Any]
) -> None:
    expected = _raised(lambda: ScheduleConfig(**{"global_batch_size": 8, **core}))
    with raises_facts(type(expected), key=key, mistake=expected.mistake) as caught:
        _scheduled(make_args(**fields), {**FULL_CONFIG, **config})
    assert type(caught.value) is type(expected)


@pytest.mark.parametrize(
    ("dp_size", "error"), [("2", PlanTypeError), (2.0, PlanTypeError), (0, PlanError)]
)
def test_the_config_dp_size_is_parsed_as_every_dp_size_under_miles_name(
    dp_size: object, error: type[PlanError]
) -> None:
    config = {**FULL_CONFIG, "dp_size": dp_size}
    key = "train_parallel_config[dp_size]"
    calls = [
        lambda: _scheduled(make_args(), config),
        lambda: miles.can_schedule_on_rollout_side(make_args(), DATA, config),
        lambda: miles.split_train_data_by_dp(make_args(), DATA, config),
        lambda: miles.split_train_data_by_dp(
            make_args(delay_split_train_data_by_dp=True), DATA, config
        ),
    ]
    for call in calls:
        with raises_facts(error, key=key) as caught:
            call()
        assert type(caught.value) is error


@pytest.mark.parametrize("config", [[("dp_size", 2)], "dp_size", 2])
def test_a_config_that_is_no_mapping_is_a_type_error(config: object) -> None:
    calls = [
        lambda: _scheduled(make_args(), config),
        lambda: miles.can_schedule_on_rollout_side(make_args(), DATA, config),  # type: ignore[arg-type]
        lambda: miles.split_train_data_by_dp(make_args(), DATA, config),  # type: ignore[arg-type]
    ]
    for call in calls:
        with raises_facts(OptionTypeError, key="train_parallel_config", mistake="option_type"):
            call()
    assert not miles.can_schedule_on_rollout_side(make_args(), DATA, None)  # no config: no


# --- dynamic_global_batch_size: one verdict at every door --------------------------------------


def _doors(value: object) -> list[Callable[[], object]]:
    data = {**DATA, "dynamic_global_batch_size": value}
    return [
        lambda: miles.can_schedule_on_rollout_side(make_args(), data, FULL_CONFIG),
        lambda: miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2),
        lambda: _scheduled(make_args(), data=data),
    ]


@pytest.mark.parametrize("value", [np.array(8), 8.0, True, "8", None, 0, -1])
def test_a_step_batch_size_is_judged_alike_at_every_door(value: object) -> None:
    for call in _doors(value):
        with raises_facts(SchemaError, key="dynamic_global_batch_size") as caught:
            call()
        assert type(caught.value) is SchemaError


@pytest.mark.parametrize("value", [8, np.int64(8)])
def test_a_step_batch_size_is_accepted_alike_at_every_door(value: object) -> None:
    can, raw, scheduled = (call() for call in _doors(value))
    assert can is True
    assert len(raw) == len(scheduled) == 2


# --- the rank's references and its dict -------------------------------------------------------


def test_eager_references_of_the_wrong_kind_are_named() -> None:
    pytest.importorskip("ray")  # imported to tell a reference from a value; not started
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=1)[0]
    with raises_facts(PlanError, key="rollout_data_ref", mistake="plan") as caught:
        miles.process_rollout_data(make_args(), [shard], 0, 2)
    assert type(caught.value) is PlanError
    for refs in (shard, 3):
        with raises_facts(OptionTypeError, key="rollout_data_ref", mistake="option_type"):
            miles.process_rollout_data(make_args(), refs, 0, 1)


@pytest.mark.parametrize("key", ["partition", "total_lengths"])
@pytest.mark.parametrize("value", [[0, 1.0], ["0"], None, 4, [True]])
def test_a_rank_dict_value_of_the_wrong_type_is_one_class(key: str, value: object) -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=1)[0]
    shard[key] = value
    with raises_facts(SchemaTypeError, key=key, mistake="data_type") as caught:
        miles.process_rollout_data_shard(make_args(), shard)
    assert type(caught.value) is SchemaTypeError


def test_an_on_batch_lengths_that_is_not_callable_is_refused_first() -> None:
    shard = miles.split_train_data_by_dp_raw(make_args(), make_data([3, 4]), dp_size=1)[0]
    kept = dict(shard)
    with raises_facts(OptionTypeError, key="on_batch_lengths", mistake="option_type"):
        miles.process_rollout_data_shard(make_args(), shard, on_batch_lengths=3)  # type: ignore[arg-type]
    assert shard == kept  # nothing changed
    with raises_facts(OptionTypeError, key="on_batch_lengths"):
        miles.process_rollout_data(make_args(), [shard], 0, 1, on_batch_lengths=3)  # type: ignore[arg-type]
