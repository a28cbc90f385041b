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

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np

import arrow_split.compat.miles._install as _install
from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    ColumnSpec,
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanMismatchError,
    RolloutBatch,
    SchemaError,
    SchemaTypeError,
    Shard,
    TransportError,
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
        options = _KeyOptions(
            specs, as_flag("strict_keys", strict_keys), as_flag("pad_to_dp", pad_to_dp)
        )
        rollout_data, result = _fetch_delayed(
            args, rollout_data_ref, rank, size, witness_ids, options
        )
    else:
        _check_no_witness(witness_info)
        rollout_data, result = _fetch_eager(rollout_data_ref, rank, size)
    shard = process_rollout_data_shard(args, rollout_data, on_batch_lengths=on_batch_lengths)
    return shard, result


class ArrowRef:
    """A reference to what arrow_split put, shaped like miles' ``Box``.

    Its ``inner`` is the Ray reference; wrapped, Ray hands it to an actor method unresolved.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    @property
    def inner(self) -> Any:
        """The Ray object reference."""
        return self._inner

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArrowRef, (self._inner,))

    def __repr__(self) -> str:
        return f"ArrowRef({self._inner!r})"


def _wrap_ref(ray_ref: Any) -> Any:
    """A Ray reference in the installed miles' reference type (``ArrowRef`` before install)."""
    factory = _install.REF_FACTORY
    return ArrowRef(ray_ref) if factory is None else factory(ray_ref)


class StoreGetResult:
    """What a rank fetched, with miles' get-result interface.

    ``value``, and a context manager whose exit releases it.

    ``value`` is the rank's :class:`~arrow_split.Shard`. Releasing drops this object's reference
    to it; the store frees the object once nothing else refers to it (per-sample numpy arrays of
    the returned dict are views of an eager shard and keep it alive while they live).
    """

    __slots__ = ("_value",)

    def __init__(self, value: Shard | None) -> None:
        self._value = value

    @property
    def value(self) -> Shard | None:
        """The fetched shard, or ``None`` once released."""
        return self._value

    def release(self) -> None:
        """Drop the reference to the fetched value (idempotent)."""
        self._value = None

    def __enter__(self) -> Shard | None:
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def put_eager(parts: Iterable[tuple[Shard, int, dict[str, Any]]], dp_size: int) -> list[Any]:
    """Put one :class:`RolloutShard` per rank; one shard is built and put at a time.

    All or nothing (miles #2248/#2286): when a put fails, the references already made are
    dropped, which frees their objects (this process owns them), and a
    :class:`~arrow_split.TransportError` names the rank whose put failed.
    """
    import ray

    refs: list[Any] = []
    rank = 0
    try:
        for shard, rank, extras in parts:
            value = RolloutShard(shard, rank, dp_size, extras)
            refs.append(ray.put(value))
    except ArrowSplitError:
        raise  # a shard that could not be taken: the caller's error, nothing to report
    except Exception as exc:
        done = len(refs)
        refs.clear()  # the only references: dropping them frees the objects already put
        reason = next(iter(str(exc).splitlines()), "")
        msg = (
            f"the put of dp_rank {rank}'s shard ({rank + 1} of {dp_size}) failed "
            f"({type(exc).__name__}: {reason}); the {done} shards already put were freed and "
            "nothing of this step is in the store: make room (or lower the step's size) and "
            "split again"
        )
        raise TransportError(msg) from exc
    return [_wrap_ref(ref) for ref in refs]


def put_delayed(batch: RolloutBatch, dp_size: int | None, balance_data: bool) -> Any:
    """Put the whole batch once (with its plan when ``dp_size`` is known)."""
    import ray

    from arrow_split.ray import split_train_data_by_dp as put_batch

    if dp_size is None:
        return _wrap_ref(ray.put(batch))
    return _wrap_ref(put_batch(batch, dp_size, balance_data=balance_data, delay=True))


def _unwrap(ref: object) -> Any:
    """The Ray reference in a reference of either shape (``inner`` or ``payload``), or itself."""
    for attribute in ("inner", "payload"):
        if hasattr(ref, attribute):
            return getattr(ref, attribute)
    return ref


def _fetch_eager(
    refs: Sequence[object], dp_rank: int, dp_size: int
) -> tuple[dict[str, Any], StoreGetResult]:
    """Fetch ``refs[dp_rank]`` alone; return its rollout-layout dict and the get result."""
    import ray

    if not isinstance(refs, (list, tuple)) or len(refs) != dp_size:
        got = f"{len(refs)} references" if isinstance(refs, (list, tuple)) else repr(refs)[:60]
        msg = (
            f"eager mode needs the list of `dp_size` ({dp_size}) references that "
            f"`split_train_data_by_dp` returned, got {got}; with "
            "`args.delay_split_train_data_by_dp` pass the one delayed reference"
        )
        raise PlanError(msg)
    for index, item in enumerate(refs):
        if not isinstance(_unwrap(item), (ray.ObjectRef, RolloutShard, Mapping)):
            msg = (
                f"`rollout_data_ref[{index}]` must be a reference `split_train_data_by_dp` "
                f"returned, got {type(item).__name__} {item!r:.40}"
            )
            raise OptionTypeError(msg)
    item = _unwrap(refs[dp_rank])
    value = ray.get(item) if isinstance(item, ray.ObjectRef) else item
    if isinstance(value, RolloutShard):
        if (value.dp_rank, value.dp_size) != (dp_rank, dp_size):
            msg = (
                f"`refs[{dp_rank}]` holds rank {value.dp_rank}'s rows of a {value.dp_size}-rank "
                f"split, not rank {dp_rank}'s of {dp_size}; pass the list in the order "
                "`split_train_data_by_dp` returned it, with the same `dp_size`"
            )
            raise PlanMismatchError(msg)
        return value.to_dict(), StoreGetResult(value.shard)
    if isinstance(value, Mapping):  # a shard miles' own store put: its dict, as miles reads it
        return dict(value), StoreGetResult(None)
    msg = f"`refs[{dp_rank}]` holds a {type(value).__name__}, not a rank's shard"
    raise NotARolloutBatchError(msg)


class _KeyOptions(NamedTuple):
    """How a delayed rank converts and splits: specs, unknown keys refused, padding."""

    specs: Iterable[ColumnSpec]
    strict_keys: bool
    pad_to_dp: bool


def _fetch_delayed(
    args: Any,
    ref: object,
    dp_rank: int,
    dp_size: int,
    witness_ids: Sequence[int] | None,
    options: _KeyOptions,
) -> tuple[dict[str, Any], StoreGetResult]:
    """Take this rank's rows of the whole batch; return its rollout-layout dict and get result.

    An :class:`ArrowRef` holds a RolloutBatch: only this rank's rows are gathered (on a node that
    holds the batch if this one does not). Any other reference (miles' pydantic reference, or
    miles' own delayed put of the dict) is fetched here: a batch is mapped from this node's
    store (zero-copy) and this rank's rows taken; a dict is converted, validated as any batch.
    """
    import ray

    from arrow_split.ray import process_rollout_data as take_rank

    balance_data = arg_flag(args, "balance_data", required=True)
    target: object
    if isinstance(ref, ArrowRef):
        target = ref.inner
    elif isinstance(ref, (RolloutBatch, Mapping)):
        target = ref
    elif isinstance(_unwrap(ref), ray.ObjectRef):
        target = ray.get(_unwrap(ref))
    else:
        msg = (
            f"`rollout_data_ref` must be the reference `split_train_data_by_dp` returned, got "
            f"{type(ref).__name__} {ref!r:.40}"
        )
        raise OptionTypeError(msg)
    if isinstance(target, RolloutShard):
        msg = (
            "the delayed reference holds one rank's shard, not the whole batch; pass the "
            "reference `split_train_data_by_dp` returned with `args.delay_split_train_data_by_dp`"
        )
        raise PlanError(msg)
    if isinstance(target, Mapping):
        target = to_batch(args, target, options.specs, strict_keys=options.strict_keys)
    elif not isinstance(target, (RolloutBatch, ray.ObjectRef)):
        msg = f"the delayed reference holds a {type(target).__name__}, not a train-data dict"
        raise NotARolloutBatchError(msg)
    shard = take_rank(
        target,
        dp_rank,
        dp_size,
        balance_data=balance_data,
        resplit=True,  # miles splits for the train side's own `dp_size`, whatever was put
        witness_ids=witness_ids,
        pad_to_dp=options.pad_to_dp,
    )
    return rollout_dict(shard, {}), StoreGetResult(shard)


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
