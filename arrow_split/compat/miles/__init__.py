"""A drop-in for miles' DP split: miles' six functions with miles' signatures, args and results.

miles' signatures live only here, for :func:`install` and code written against miles (the
functions of the same names in ``arrow_split`` and ``arrow_split.ray`` are the library's own).
Only :func:`split_train_data_by_dp` and :func:`process_rollout_data` need Ray. What differs
from miles on purpose, and why: docs/miles.md.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from arrow_split import (
    KNOWN_COLUMNS,
    ColumnSpec,
    OptionError,
    PlanError,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
)
from arrow_split._args import (
    as_callback,
    as_flag,
    as_index_array,
    check_dp_rank,
    check_dp_size,
    describe,
)
from arrow_split.compat.miles._convert import (
    FlopsFn,
    RolloutShard,
    ShardParts,
    check_flops,
    plan_shards,
    rollout_dict,
    scheduled_shards,
    to_batch,
)
from arrow_split.compat.miles._fields import (
    SCHEDULE_CONFIG_KEYS,
    arg_flag,
    check_args,
    check_config_keys,
    config_dp_size,
    has_full_schedule_config,
    optional_dp_size,
    step_batch_size,
    witness_ids_of,
)
from arrow_split.compat.miles._handoff import (
    ArrowRef,
    StoreGetResult,
    fetch_delayed,
    fetch_eager,
    put_delayed,
    put_eager,
)
from arrow_split.compat.miles._install import (
    Installation,
    UnpatchedBindingWarning,
    as_specs,
    current_installation,
    patch,
)
from arrow_split.compat.miles._prefetch import MilesPrefetcher
from arrow_split.compat.miles._setup import ENV_VAR, environment, install_once, runtime_env, watch
from arrow_split.errors import mistake
from arrow_split.schema import MEDIA_REFS, TOTAL_LENGTHS, role_column

__all__ = [
    "ArrowRef",
    "ENV_VAR",
    "FlopsFn",
    "Installation",
    "MilesPrefetcher",
    "OnBatchLengths",
    "RolloutShard",
    "SCHEDULE_CONFIG_KEYS",
    "StoreGetResult",
    "UnpatchedBindingWarning",
    "can_schedule_on_rollout_side",
    "current_installation",
    "environment",
    "install",
    "prefetcher",
    "process_rollout_data",
    "process_rollout_data_shard",
    "runtime_env",
    "setup_worker",
    "split_train_data_by_dp",
    "split_train_data_by_dp_raw",
    "split_train_data_by_dp_scheduled_raw",
    "watch_imports",
]

OnBatchLengths = Callable[[list[int]], None]
"""Called with the whole batch's total lengths as a rank completes its shard (miles' metrics)."""

# The key of the rollout layout (see arrow_split.TrainDataLayout) that the actor layout drops.
_PARTITION = "partition"


def split_train_data_by_dp_raw(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    *,
    dp_size: int,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
) -> list[dict[str, Any]]:
    """Split the train data into one rollout-layout dict per rank (``args.balance_data``).

    ``specs`` declares unknown keys, ``strict_keys`` refuses them, ``pad_to_dp`` pads the batch.
    """
    balance_data = arg_flag(args, "balance_data", required=True)
    size = check_dp_size(dp_size)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, size))
    parts = plan_shards(batch, size, balance_data)
    return [rollout_dict(shard, extras) for shard, _, extras in parts]


def _options(strict_keys: bool, pad_to_dp: bool, dp_size: int | None) -> dict[str, Any]:
    """``to_batch``'s keywords."""
    pad = as_flag("pad_to_dp", pad_to_dp) and dp_size is not None
    return {
        "strict_keys": as_flag("strict_keys", strict_keys),
        "pad_dp_size": dp_size if pad else None,
    }


def can_schedule_on_rollout_side(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    train_parallel_config: Mapping[str, Any] | None,
) -> bool:
    """Whether the rollout side can plan the whole micro-batch schedule, as miles decides it.

    Yes with a full parallel config, no multi-LoRA, no multimodal rows, and rollout ids enough for
    one step.
    """
    check_args(args)
    optional_dp_size(train_parallel_config)  # parsed as every door parses it
    if not has_full_schedule_config(train_parallel_config):
        return False
    if arg_flag(args, "multi_lora"):
        return False
    name = str(role_column(KNOWN_COLUMNS, "rollout_id"))
    if isinstance(data, RolloutBatch):
        keys = {*data.column_names, *data.batch_globals}
        batch_globals: Mapping[str, object] = data.batch_globals
        rollout_ids = data.role_values("rollout_id")
    elif isinstance(data, Mapping):
        keys, batch_globals, rollout_ids = set(data), data, data.get(name)
    else:
        msg = f"`data` must be a train-data dict or a RolloutBatch, got {type(data).__name__}"
        raise SchemaTypeError(msg, key="data")
    # media loaded on the train side is planned there
    if rollout_ids is None or {role_column(KNOWN_COLUMNS, "extra_rows"), MEDIA_REFS} & keys:
        return False
    wanted = step_batch_size(args, batch_globals)
    return len(np.unique(as_index_array(name, rollout_ids))) >= wanted


def split_train_data_by_dp_scheduled_raw(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    *,
    train_parallel_config: Mapping[str, Any],
    specs: Iterable[ColumnSpec] = (),
    flops: FlopsFn | None = None,
    strict_keys: bool = False,
    pad_to_dp: bool = False,
) -> list[dict[str, Any]]:
    """Split by the rollout-side micro-batch schedule: rows in micro-batch order, miles' keys.

    ``flops`` gives per-sample workloads for ``args.balance_by_flops``.
    """
    check_flops(flops)
    dp_size = config_dp_size(train_parallel_config)
    check_config_keys(train_parallel_config, SCHEDULE_CONFIG_KEYS)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
    parts = scheduled_shards(args, batch, dp_size, train_parallel_config, flops)
    return [rollout_dict(shard, extras) for shard, _, extras in parts]


def split_train_data_by_dp(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    train_parallel_config: Mapping[str, Any] | None,
    *,
    specs: Iterable[ColumnSpec] = (),
    flops: FlopsFn | None = None,
    strict_keys: bool = False,
    pad_to_dp: bool = False,
) -> list[Any] | Any:
    """Put the train data into Ray's object store for the ranks; validated before any put.

    Eager: one reference per rank (the rollout-side schedule where it can be planned). With
    ``args.delay_split_train_data_by_dp``: one reference to the whole batch.
    """
    check_flops(flops)
    balance_data = arg_flag(args, "balance_data", required=True)
    if arg_flag(args, "delay_split_train_data_by_dp"):
        dp_size = optional_dp_size(train_parallel_config)
        batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
        if dp_size is not None:  # checked (plan included) before the put
            batch.make_plan(dp_size, balance_data=balance_data)
        return put_delayed(batch, dp_size, balance_data)
    dp_size = config_dp_size(train_parallel_config)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
    assert train_parallel_config is not None  # checked by config_dp_size
    if can_schedule_on_rollout_side(args, batch, train_parallel_config):
        parts: Iterable[ShardParts] = list(
            scheduled_shards(args, batch, dp_size, train_parallel_config, flops)
        )
    else:
        parts = plan_shards(batch, dp_size, balance_data)
    return put_eager(parts, dp_size)


def process_rollout_data_shard(
    args: Any,
    rollout_data: dict[str, Any],
    *,
    on_batch_lengths: OnBatchLengths | None = None,
) -> dict[str, Any]:
    """Complete a rank's shard in place: drop ``partition``, keep the rank's ``total_lengths``.

    ``on_batch_lengths`` gets the whole batch's. All is checked first: a failure changes nothing.
    """
    as_callback("on_batch_lengths", on_batch_lengths)
    if not isinstance(rollout_data, dict):
        msg = (
            f"`rollout_data` must be a rollout-layout dict, as `split_train_data_by_dp_raw` "
            f"returns it, got {type(rollout_data).__name__}"
        )
        raise SchemaTypeError(msg, key="rollout_data")
    missing = [key for key in (_PARTITION, TOTAL_LENGTHS) if key not in rollout_data]
    if missing:
        msg = (
            f"the shard lacks {', '.join(f'`{key}`' for key in missing)}; pass a rollout-layout "
            "dict, as `split_train_data_by_dp_raw` returns it"
        )
        raise SchemaError(msg, key=missing[0])
    partition = _shard_ints(
        _PARTITION, rollout_data[_PARTITION], "sample of the rank (its row in the batch)"
    )
    total_lengths = _shard_ints(
        TOTAL_LENGTHS, rollout_data[TOTAL_LENGTHS], "sample of the whole batch"
    )
    if total_lengths.size and int(total_lengths.min()) < 0:
        msg = f"`{TOTAL_LENGTHS}` holds {int(total_lengths.min())}; token counts are >= 0"
        raise SchemaError(msg, key=TOTAL_LENGTHS)
    outside = partition[(partition < 0) | (partition >= len(total_lengths))]
    if outside.size:
        msg = (
            f"`{_PARTITION}` holds row {outside[0]}, outside the {len(total_lengths)} samples "
            f"of `{TOTAL_LENGTHS}`; the shard and the batch lengths do not belong together"
        )
        raise PlanError(msg, key=_PARTITION)
    if on_batch_lengths is not None:
        on_batch_lengths(total_lengths.tolist())
    del rollout_data[_PARTITION]
    rollout_data[TOTAL_LENGTHS] = total_lengths[partition].tolist()
    return rollout_data


def _shard_ints(key: str, value: object, each: str) -> np.ndarray:
    """A rank dict's ``key`` (a list, a tuple or a 1-D array of ints) as int64.

    A value of another type is a :class:`SchemaTypeError` (``data_type``), for either key.
    """
    try:
        ndim = np.ndim(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # ragged
        ndim = -1
    expected = f"one int per {each}, as `split_train_data_by_dp_raw` returns it"
    if isinstance(value, (str, bytes, Mapping)) or ndim != 1:
        raise mistake("data_type", key=key, expected=expected, got=describe(value))
    try:
        return as_index_array(key, value)
    except OptionError:  # strings, floats, bools: not ints
        raise mistake("data_type", key=key, expected=expected, got=describe(value)) from None


def process_rollout_data(
    args: Any,
    rollout_data_ref: Any,
    dp_rank: int,
    dp_size: int,
    witness_info: Any = None,
    *,
    specs: Iterable[ColumnSpec] = (),
    on_batch_lengths: OnBatchLengths | None = None,
    strict_keys: bool = False,
    pad_to_dp: bool = False,
) -> tuple[dict[str, Any], StoreGetResult]:
    """Return this rank's actor-layout dict and the get result, as miles' train side does.

    ``rollout_data_ref``: the eager list (only this rank's item is fetched) or the delayed
    reference (only this rank's rows are gathered; ``witness_info.witness_ids`` adds
    ``seq_witness_ids``). ``specs``, ``strict_keys``: for a dict miles' own store put. Every
    argument is checked first, in either mode.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    declared = as_specs(specs)  # every option parsed here, whichever mode reads it
    strict, pad = as_flag("strict_keys", strict_keys), as_flag("pad_to_dp", pad_to_dp)
    as_callback("on_batch_lengths", on_batch_lengths)
    if arg_flag(args, "delay_split_train_data_by_dp"):
        rollout_data, result = fetch_delayed(
            args,
            rollout_data_ref,
            rank,
            size,
            witness_ids=witness_ids_of(witness_info),
            specs=declared,
            strict_keys=strict,
            pad_to_dp=pad,
        )
    elif witness_info is not None:  # eager shards were split with their witness ids already
        msg = (
            "`witness_info` is only used with `args.delay_split_train_data_by_dp`: eager shards "
            "were split on the rollout side, so attach witness ids there (`seq_witness_ids`)"
        )
        raise OptionError(msg, key="witness_info")
    else:
        rollout_data, result = fetch_eager(rollout_data_ref, rank, size)
    shard = process_rollout_data_shard(args, rollout_data, on_batch_lengths=on_batch_lengths)
    return shard, result


def install(
    *,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
    verbose: bool = False,
) -> Installation:
    """Bind the six drop-ins wherever the importable miles binds its own; ``undo()`` reverts.

    ``specs``, ``strict_keys`` and ``pad_to_dp`` are passed to every function that takes them;
    ``verbose`` also prints the summary (always logged at INFO). Returns the
    :class:`Installation`; a holder it cannot rebind gets an :class:`UnpatchedBindingWarning`.
    Raises ImportError without miles, InstallError (all put back) if a binding is refused.
    """
    return patch(
        _DROP_INS,
        specs=as_specs(specs),
        strict_keys=as_flag("strict_keys", strict_keys),
        pad_to_dp=as_flag("pad_to_dp", pad_to_dp),
        verbose=as_flag("verbose", verbose),
        # miles' patched store puts the whole batch, planned by each rank for its size
        put_batch=functools.partial(put_delayed, dp_size=None, balance_data=False),
    )


def setup_worker() -> Installation:
    """Install the drop-in in this process with ``ARROW_SPLIT_MILES``'s options (once).

    Ray's ``worker_process_setup_hook`` (see :func:`runtime_env`); a second call with the same
    options returns the installation already made.
    """
    return install_once(install)


def watch_imports() -> None:
    """Install the drop-in right after miles' conversion or data module is first imported.

    ``arrow_split_miles.pth`` calls it where ``ARROW_SPLIT_MILES`` is set.
    """
    watch(setup_worker)


def prefetcher(
    args: Any,
    dp_rank: int,
    dp_size: int,
    *,
    lookahead: int = 1,
    convert: Callable[[dict[str, Any]], Any] | None = None,
    **options: Any,
) -> MilesPrefetcher:
    """A train rank's prefetcher: the next rollout's :func:`process_rollout_data` while it trains.

    ``submit(rollout_id, rollout_data_ref, witness_info)`` as soon as the reference is known;
    ``get_rollout_data(rollout_id)`` where miles calls its own returns ``(rollout_data,
    get_result)``, raising the fetch's error there. ``convert`` runs on the fetch's thread with
    each dict (the actor's conversion to tensors); ``options`` are
    :func:`process_rollout_data`'s (``specs``, ``strict_keys``, ``pad_to_dp``), checked here.
    """
    return MilesPrefetcher(
        args,
        dp_rank,
        dp_size,
        lookahead=lookahead,
        convert=convert,
        process=process_rollout_data,
        **options,
    )


_DROP_INS: dict[str, Callable[..., Any]] = {
    "can_schedule_on_rollout_side": can_schedule_on_rollout_side,
    "process_rollout_data": process_rollout_data,
    "process_rollout_data_shard": process_rollout_data_shard,
    "split_train_data_by_dp": split_train_data_by_dp,
    "split_train_data_by_dp_raw": split_train_data_by_dp_raw,
    "split_train_data_by_dp_scheduled_raw": split_train_data_by_dp_scheduled_raw,
}
