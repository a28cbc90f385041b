"""miles' ``args`` namespace and train parallel config, each field read once at the door.

Fields are parsed with :mod:`arrow_split._args`' rules, into the class :data:`MISTAKES
<arrow_split.errors.MISTAKES>` gives the mistake; errors name miles' field, ``args.<field>`` or
``train_parallel_config[<key>]``. A required field that is missing is an :class:`OptionError`
that names the flag of miles' argument parser that sets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    OptionTypeError,
    RolloutBatch,
    ScheduleConfig,
)
from arrow_split._args import as_flag, as_int, check_dp_size, check_positive_int, describe
from arrow_split.errors import mistake
from arrow_split.schema import role_column

__all__ = [
    "SCHEDULE_CONFIG_KEYS",
    "arg_flag",
    "arg_int",
    "check_args",
    "check_config_keys",
    "config_dp_size",
    "has_full_schedule_config",
    "optional_dp_size",
    "rollouts_per_step",
    "schedule_config",
    "step_batch_size",
    "witness_ids_of",
]

_STEP_BATCH_SIZE = str(role_column(KNOWN_COLUMNS, "step_batch_size"))

_MISSING = object()
_CONFIG = "train_parallel_config"

SCHEDULE_CONFIG_KEYS = ("dp_size", "cp_size", "vpp_size", "microbatch_group_size_per_vp_stage")
"""The keys of miles' train parallel config that the rollout-side schedule needs, all of them."""


def check_args(args: object) -> None:
    """Refuse an ``args`` that cannot be miles' argument namespace (no attributes to read)."""
    if args is None or isinstance(args, (Mapping, str, bytes, int, float, list, tuple)):
        msg = (
            f"`args` must be miles' argument namespace (an `argparse.Namespace`), got "
            f"{describe(args)}; pass the `args` miles' functions receive, or "
            "`argparse.Namespace(balance_data=False, ...)`"
        )
        raise OptionTypeError(msg, key="args")


def _field(args: object, name: str, *, required: bool) -> object:
    """``args.<name>`` as given; a missing one is ``None``, or an error naming it if required."""
    check_args(args)
    value = getattr(args, name, _MISSING)
    if value is _MISSING and required:
        flag = "--" + name.replace("_", "-")
        fix = f"miles' argument parser sets it (`{flag}`): pass miles' `args`, or set `args.{name}`"
        msg = f"`args` has no field `{name}`"
        raise mistake("option_value", msg, key=f"args.{name}", got="no such field", fix=fix)
    return None if value is _MISSING else value


def arg_flag(args: object, name: str, *, required: bool = False) -> bool:
    """``args.<name>`` as a bool; a missing optional field is ``False``."""
    value = _field(args, name, required=required)
    return False if value is None and not required else as_flag(f"args.{name}", value)


def arg_int(args: object, name: str, *, required: bool = False) -> int | None:
    """``args.<name>`` as an int >= 1; a missing (or ``None``) optional field is ``None``."""
    value = _field(args, name, required=required)
    return None if value is None else as_int(f"args.{name}", value, minimum=1)


def config_dp_size(train_parallel_config: object) -> int:
    """``train_parallel_config["dp_size"]``, parsed as every door parses a ``dp_size``.

    A config that is no mapping is an :class:`OptionTypeError`, one without ``dp_size`` an
    :class:`OptionError`; the key names the config's entry.
    """
    if not isinstance(train_parallel_config, Mapping):
        expected = "a mapping of miles' train parallel config (`dp_size`, `cp_size`, ...)"
        got = describe(train_parallel_config)
        raise mistake("option_type", key=_CONFIG, expected=expected, got=got)
    check_config_keys(train_parallel_config, ("dp_size",))
    try:
        return check_dp_size(train_parallel_config["dp_size"])
    except ArrowSplitError as error:  # the rule of every `dp_size`, miles' name
        raise error.replaced(key=f"{_CONFIG}[dp_size]") from None


def optional_dp_size(train_parallel_config: object) -> int | None:
    """:func:`config_dp_size`, or ``None`` for no config or a config without ``dp_size``."""
    if train_parallel_config is None or (
        isinstance(train_parallel_config, Mapping) and "dp_size" not in train_parallel_config
    ):
        return None
    return config_dp_size(train_parallel_config)


def check_config_keys(config: Mapping[str, Any], names: Sequence[str]) -> None:
    """Refuse a train parallel config without one of ``names`` (the key: the first missing)."""
    missing = [name for name in names if name not in config]
    if missing:
        msg = (
            f"`{_CONFIG}` must name {', '.join(f'`{name}`' for name in names)}, got "
            f"{sorted(map(str, config))}"
        )
        fix = "pass miles' train parallel config; check `can_schedule_on_rollout_side` first"
        key = f"{_CONFIG}[{missing[0]}]"
        raise mistake("option_value", msg, key=key, got="no such key", fix=fix)


def has_full_schedule_config(train_parallel_config: Mapping[str, Any] | None) -> bool:
    """Whether the config names every key of :data:`SCHEDULE_CONFIG_KEYS` (values may be None)."""
    if not train_parallel_config:
        return False
    return all(key in train_parallel_config for key in SCHEDULE_CONFIG_KEYS)


def step_batch_size(args: Any, batch_globals: Mapping[str, object]) -> int:
    """Rollouts per step: the batch's own value if it sets one, else ``args.global_batch_size``."""
    if _STEP_BATCH_SIZE in batch_globals:  # a dict's value is not checked yet
        return rollouts_per_step(batch_globals[_STEP_BATCH_SIZE])
    value = _field(args, "global_batch_size", required=True)
    return check_positive_int("args.global_batch_size", value)


def rollouts_per_step(value: object) -> int:
    """A batch's ``dynamic_global_batch_size``: one int (the core's rule for it), here >= 1.

    The core takes any count >= 0; miles trains a step of that many rollouts and divides the
    step's loss by it, so every miles door refuses 0 (:class:`SchemaError`, as the core's).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise mistake("schema", key=_STEP_BATCH_SIZE, expected="one int", got=describe(value))
    if value < 1:
        fix = "miles divides the step's loss by this count of rollouts"
        expected, got = "one int >= 1", str(int(value))
        raise mistake("schema", key=_STEP_BATCH_SIZE, expected=expected, got=got, fix=fix)
    return int(value)


_ARGS_FIELDS = (
    "global_batch_size",
    "micro_batch_size",
    "use_dynamic_batch_size",
    "max_tokens_per_gpu",
    "balance_data",
    "balance_by_flops",
    "allow_partial_train_step",
)
# miles' name of each ScheduleConfig field, the key of an error about it
_MILES_NAMES = {
    **{name: f"args.{name}" for name in _ARGS_FIELDS},
    **{name: f"{_CONFIG}[{name}]" for name in SCHEDULE_CONFIG_KEYS},
}


def schedule_config(
    args: Any, batch: RolloutBatch, train_parallel_config: Mapping[str, Any]
) -> ScheduleConfig:
    """The schedule's parameters, read from miles' ``args`` and train parallel config.

    The config's keys but ``dp_size`` are :class:`~arrow_split.ScheduleConfig` fields, checked
    by it; its errors name miles' field (``args.micro_batch_size``,
    ``train_parallel_config[cp_size]``).
    """
    use_dynamic = arg_flag(args, "use_dynamic_batch_size", required=True)
    # the token-budget packing does not use `micro_batch_size`
    micro_batch_size = _field(args, "micro_batch_size", required=not use_dynamic)
    fields = {
        "global_batch_size": step_batch_size(args, batch.batch_globals),
        "micro_batch_size": 1 if micro_batch_size is None and use_dynamic else micro_batch_size,
        "use_dynamic_batch_size": use_dynamic,
        "max_tokens_per_gpu": _field(args, "max_tokens_per_gpu", required=False),
        "balance_data": arg_flag(args, "balance_data", required=True),
        "balance_by_flops": arg_flag(args, "balance_by_flops"),
        "allow_partial_train_step": arg_flag(args, "allow_partial_train_step"),
        **{key: train_parallel_config[key] for key in SCHEDULE_CONFIG_KEYS if key != "dp_size"},
    }
    try:
        return ScheduleConfig(**fields)  # each field checked by the config
    except ArrowSplitError as error:  # the core's rule and class, miles' name
        raise error.replaced(key=_MILES_NAMES.get(str(error.key), error.key)) from None


def witness_ids_of(witness_info: object) -> Any:
    """``witness_info.witness_ids``, or a typed error naming what was given instead."""
    if witness_info is None:
        return None
    witness_ids = getattr(witness_info, "witness_ids", _MISSING)
    if witness_ids is _MISSING:
        msg = (
            f"`witness_info` must have `witness_ids` (one int per sample of the whole batch), "
            f"got {describe(witness_info)}"
        )
        raise OptionTypeError(msg, key="witness_info")
    return witness_ids
