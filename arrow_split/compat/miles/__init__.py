"""A drop-in for miles' DP split: miles' six functions with miles' signatures, args and results.

miles' signatures live only here (for :func:`install` and code written against miles);
``arrow_split`` and ``arrow_split.ray`` have their own functions of the same names, returning
Shard, RolloutBatch or ObjectRef (docs/miles.md, "One name, one function"). The rollout-side
functions (the ``_raw`` splits, :func:`can_schedule_on_rollout_side`,
:func:`process_rollout_data_shard`) need no Ray. Where the drop-in differs from miles on purpose
(train data validated before anything is put, no key dropped, ``data`` never mutated, typed
errors, ``pad_to_dp``, unknown keys inferred with a warning): docs/miles.md.
"""

from __future__ import annotations

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
from arrow_split._args import as_flag, as_index_array, check_dp_rank, check_dp_size
from arrow_split.compat.miles._convert import (
    SCHEDULE_CONFIG_KEYS,
    FlopsFn,
    RolloutShard,
    ShardParts,
    arg_flag,
    check_args,
    check_flops,
    has_full_schedule_config,
    plan_shards,
    rollout_dict,
    scheduled_shards,
    step_batch_size,
    to_batch,
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
    patch,
)
from arrow_split.schema import TOTAL_LENGTHS, role_column

__all__ = [
    "ArrowRef",
    "FlopsFn",
    "Installation",
    "OnBatchLengths",
    "RolloutShard",
    "SCHEDULE_CONFIG_KEYS",
    "StoreGetResult",
    "UnpatchedBindingWarning",
    "can_schedule_on_rollout_side",
    "install",
    "process_rollout_data",
    "process_rollout_data_shard",
    "split_train_data_by_dp",
    "split_train_data_by_dp_raw",
    "split_train_data_by_dp_scheduled_raw",
]

OnBatchLengths = Callable[[list[int]], None]
"""Called with the whole batch's total lengths when a rank completes its shard (miles keeps them
for its throughput metrics; :func:`install` passes that hook)."""

# The keys of the rollout layout (see arrow_split.TrainDataLayout) that the actor layout rewrites.
_PARTITION = "partition"
_TOTAL_LENGTHS = TOTAL_LENGTHS


def _dp_size_of(train_parallel_config: Mapping[str, Any] | None) -> int:
    if not isinstance(train_parallel_config, Mapping) or "dp_size" not in train_parallel_config:
        msg = (
            "`train_parallel_config` must name `dp_size` (the number of data-parallel ranks), "
            f"got {train_parallel_config!r}"
        )
        raise OptionError(msg)
    return check_dp_size(train_parallel_config["dp_size"])


def split_train_data_by_dp_raw(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    *,
    dp_size: int,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
) -> list[dict[str, Any]]:
    """Split the train data into one rollout-layout dict per rank (strided or balanced).

    ``args.balance_data`` picks the plan; a batch with adapter slots has each rank's rows stably
    sorted by slot and carries ``n_adapters`` (``args.multi_lora_n_adapters``). ``specs``,
    ``strict_keys`` and ``pad_to_dp``: see the module docstring.
    """
    balance_data = arg_flag(args, "balance_data", required=True)
    size = check_dp_size(dp_size)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, size))
    parts = plan_shards(batch, size, balance_data)
    return [rollout_dict(shard, extras) for shard, _, extras in parts]


def _options(strict_keys: bool, pad_to_dp: bool, dp_size: int | None) -> dict[str, Any]:
    """``to_batch``'s keywords: strictness about unknown keys, the size to pad to (if any)."""
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

    It can when the backend gave its full parallel config, multi-LoRA is off, no sample has
    multimodal inputs, and the batch has rollout ids for at least one step of rollouts.
    """
    check_args(args)
    if not has_full_schedule_config(train_parallel_config):
        return False
    if arg_flag(args, "multi_lora"):
        return False
    name = role_column(KNOWN_COLUMNS, "rollout_id")
    if isinstance(data, RolloutBatch):
        keys = {*data.column_names, *data.batch_globals}
        batch_globals: Mapping[str, object] = data.batch_globals
        rollout_ids = data.role_values("rollout_id")
    elif isinstance(data, Mapping):
        keys, batch_globals = set(data), data
        rollout_ids = data.get(name) if name is not None else None
    else:
        msg = f"`data` must be a train-data dict or a RolloutBatch, got {type(data).__name__}"
        raise SchemaTypeError(msg)
    if role_column(KNOWN_COLUMNS, "extra_rows") in keys or rollout_ids is None:
        return False
    wanted = step_batch_size(args, batch_globals)
    return len(set(as_index_array(f"{name}", rollout_ids).tolist())) >= wanted


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
    """Split with the micro-batch schedule planned on the rollout side, exactly as miles does.

    Each dict holds the rank's rows in micro-batch order and miles' schedule keys. ``flops``
    gives per-sample workloads for ``args.balance_by_flops`` (:func:`install` passes miles' own).
    """
    check_flops(flops)
    dp_size = _dp_size_of(train_parallel_config)
    if not has_full_schedule_config(train_parallel_config):
        msg = (
            f"`train_parallel_config` must name every key of {SCHEDULE_CONFIG_KEYS} for the "
            f"rollout-side schedule, got {sorted(train_parallel_config)}; check "
            "`can_schedule_on_rollout_side` first"
        )
        raise OptionError(msg)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
    parts = scheduled_shards(args, batch, {**train_parallel_config, "dp_size": dp_size}, flops)
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
    """Put the train data into Ray's object store for the data-parallel ranks.

    Eager (default): one reference per rank, each to a :class:`RolloutShard`, planned by the
    rollout-side schedule when :func:`can_schedule_on_rollout_side` allows it, else strided or
    balanced. With ``args.delay_split_train_data_by_dp``: one reference to the whole batch (with
    its plan when the config names ``dp_size``); each rank takes its own rows. Everything is
    validated before anything is put. Call it on the driver, which then owns the objects.
    """
    check_flops(flops)
    balance_data = arg_flag(args, "balance_data", required=True)
    if arg_flag(args, "delay_split_train_data_by_dp"):
        config = {} if train_parallel_config is None else train_parallel_config
        dp_size = _dp_size_of(config) if "dp_size" in config else None
        batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
        if dp_size is not None:  # checked (plan included) before the put
            batch.make_plan(dp_size, balance_data=balance_data)
        return put_delayed(batch, dp_size, balance_data)
    dp_size = _dp_size_of(train_parallel_config)
    batch = to_batch(args, data, specs, **_options(strict_keys, pad_to_dp, dp_size))
    assert train_parallel_config is not None  # checked by _dp_size_of
    if can_schedule_on_rollout_side(args, batch, train_parallel_config):
        config = {**train_parallel_config, "dp_size": dp_size}
        parts: Iterable[ShardParts] = list(scheduled_shards(args, batch, config, flops))
    else:
        parts = plan_shards(batch, dp_size, balance_data)
    return put_eager(parts, dp_size)


def process_rollout_data_shard(
    args: Any,
    rollout_data: dict[str, Any],
    *,
    on_batch_lengths: OnBatchLengths | None = None,
) -> dict[str, Any]:
    """Complete a rank's shard on the train side, in place, as miles does.

    Pops ``partition`` and replaces the whole batch's ``total_lengths`` by those of the rank's
    rows; ``on_batch_lengths`` receives the whole batch's (miles' throughput metrics read them).
    Everything is checked, and ``on_batch_lengths`` called, before the dict is changed: a failure
    leaves it as it was.
    """
    if not isinstance(rollout_data, dict):
        msg = (
            f"`rollout_data` must be a rollout-layout dict, as `split_train_data_by_dp_raw` "
            f"returns it, got {type(rollout_data).__name__}"
        )
        raise SchemaTypeError(msg)
    missing = [key for key in (_PARTITION, _TOTAL_LENGTHS) if key not in rollout_data]
    if missing:
        msg = (
            f"the shard lacks {', '.join(f'`{key}`' for key in missing)}; pass a rollout-layout "
            "dict, as `split_train_data_by_dp_raw` returns it"
        )
        raise SchemaError(msg)
    partition = as_index_array(_PARTITION, rollout_data[_PARTITION]).tolist()
    total_lengths = _lengths_list(rollout_data[_TOTAL_LENGTHS])
    outside = [row for row in partition if not 0 <= row < len(total_lengths)]
    if outside:
        msg = (
            f"`{_PARTITION}` holds row {outside[0]}, outside the {len(total_lengths)} samples "
            f"of `{_TOTAL_LENGTHS}`; the shard and the batch lengths do not belong together"
        )
        raise PlanError(msg)
    rank_lengths = [total_lengths[row] for row in partition]
    if on_batch_lengths is not None:
        on_batch_lengths(list(total_lengths))
    del rollout_data[_PARTITION]
    rollout_data[_TOTAL_LENGTHS] = rank_lengths
    return rollout_data


def _lengths_list(total_lengths: object) -> list[Any]:
    """The whole batch's ``total_lengths`` as a list (a list, a tuple or a 1-D array)."""
    try:
        ndim = np.ndim(total_lengths)  # type: ignore[arg-type]
    except (TypeError, ValueError):  # ragged
        ndim = -1
    if isinstance(total_lengths, (str, bytes, Mapping)) or ndim != 1:
        msg = (
            f"`{_TOTAL_LENGTHS}` must be one int per sample of the whole batch, got "
            f"{type(total_lengths).__name__}"
        )
        raise SchemaTypeError(msg)
    try:
        lengths = as_index_array(_TOTAL_LENGTHS, total_lengths)
    except OptionError as error:  # strings, floats, bools: not token counts
        msg = f"`{_TOTAL_LENGTHS}` must be one int per sample of the whole batch: {error}"
        raise SchemaTypeError(msg) from None
    if lengths.size and int(lengths.min()) < 0:
        msg = f"`{_TOTAL_LENGTHS}` holds {int(lengths.min())}; token counts are >= 0"
        raise SchemaError(msg)
    return list(lengths.tolist())


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

    Eager: ``rollout_data_ref`` is the list :func:`split_train_data_by_dp` returned; only
    ``rollout_data_ref[dp_rank]`` is fetched. Delayed (``args.delay_split_train_data_by_dp``): one
    reference to the whole batch, put by :func:`split_train_data_by_dp` (only this rank's rows are
    gathered) or by miles' own store (the dict is fetched and validated); ``witness_info``
    (anything with ``witness_ids``, one per sample of the whole batch) adds ``seq_witness_ids``.
    ``specs``, ``strict_keys``: for a dict miles' own store put; ``pad_to_dp``: a delayed batch
    that is split here again (no plan for this ``dp_size``) is padded first.
    """
    size = check_dp_size(dp_size)
    rank = check_dp_rank(dp_rank, size)
    if arg_flag(args, "delay_split_train_data_by_dp"):
        witness_ids = witness_ids_of(witness_info)
        rollout_data, result = fetch_delayed(
            args,
            rollout_data_ref,
            rank,
            size,
            witness_ids=witness_ids,
            specs=specs,
            strict_keys=as_flag("strict_keys", strict_keys),
            pad_to_dp=as_flag("pad_to_dp", pad_to_dp),
        )
    else:
        _check_no_witness(witness_info)
        rollout_data, result = fetch_eager(rollout_data_ref, rank, size)
    shard = process_rollout_data_shard(args, rollout_data, on_batch_lengths=on_batch_lengths)
    return shard, result


def _check_no_witness(witness_info: object) -> None:
    """Eager shards already hold their witness ids: miles refuses witness info there too."""
    if witness_info is not None:
        msg = (
            "`witness_info` is only used with `args.delay_split_train_data_by_dp`: eager shards "
            "were split on the rollout side, so attach witness ids there (`seq_witness_ids`)"
        )
        raise OptionError(msg)


def install(
    *,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
    verbose: bool = False,
) -> Installation:
    """Patch this module's six functions into the importable miles; return what was patched.

    Every loaded module's global bound to one of miles' six functions (by identity) is bound to
    a fresh wrapper of the drop-in; ``undo()`` restores miles' own, in any order of several
    installations. A module that refuses a binding: everything is put back, InstallError.

    Parameters
    ----------
    specs
        Column specs for keys the library does not know, passed to every converting function.
    strict_keys
        Refuse a key neither known nor declared instead of inferring its spec with a warning.
    pad_to_dp
        Pad every split batch to a multiple of the DP size (:func:`arrow_split.pad_to_dp`).
    verbose
        Also print the summary (it is always logged at INFO).

    Returns
    -------
    Installation
        ``patched``, ``skipped`` (``"module.name"`` strings), ``ref_type`` (the reference type
        the drop-in now returns) and ``undo()``.

    Raises
    ------
    ImportError
        miles (or a module that defines these functions) is not importable.
    InstallError
        A module refused a binding.
    """
    return patch(
        _DROP_INS,
        specs=as_specs(specs),
        strict_keys=as_flag("strict_keys", strict_keys),
        pad_to_dp=as_flag("pad_to_dp", pad_to_dp),
        verbose=as_flag("verbose", verbose),
    )


_DROP_INS: dict[str, Callable[..., Any]] = {
    "can_schedule_on_rollout_side": can_schedule_on_rollout_side,
    "process_rollout_data": process_rollout_data,
    "process_rollout_data_shard": process_rollout_data_shard,
    "split_train_data_by_dp": split_train_data_by_dp,
    "split_train_data_by_dp_raw": split_train_data_by_dp_raw,
    "split_train_data_by_dp_scheduled_raw": split_train_data_by_dp_scheduled_raw,
}
