"""miles' train data on arrow_split, without Ray: from miles' ``args`` and dict to each rank's dict.

``args`` is read once (:mod:`~arrow_split.compat.miles._fields`), a batch built, each rank's rows
picked (the plan or the rollout-side schedule) and rendered as miles' rollout-layout dict, or as
a :class:`RolloutShard` the eager hand-off puts.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa

from arrow_split import (
    KNOWN_COLUMNS,
    ArrowSplitError,
    ColumnSpec,
    OptionError,
    OptionTypeError,
    RankSchedule,
    RolloutBatch,
    ScheduleConfig,
    SchemaError,
    Shard,
    ValueRangeError,
    pad_to_dp,
    plan_schedule,
    take,
)
from arrow_split.compat.miles._fields import (
    arg_int,
    check_args,
    rollouts_per_step,
    schedule_config,
)
from arrow_split.compat.miles._keys import (
    from_miles_keys,
    infer_unknown_specs,
    miles_key_note,
    to_miles_keys,
)
from arrow_split.errors import mistake
from arrow_split.schema import TEACHER_GATHER_POSITIONS, TEACHER_RESPONSE_LENGTHS, role_column

__all__ = [
    "FlopsFn",
    "RANK_DICT_KEYS",
    "RolloutShard",
    "ShardParts",
    "check_flops",
    "miles_schedule_fields",
    "plan_shards",
    "rollout_dict",
    "scheduled_shards",
    "to_batch",
]
FlopsFn = Callable[[Sequence[int], Any], Sequence[float]]
"""``flops(total_lengths, args)``: one workload per sample, for ``args.balance_by_flops``."""

ShardParts = tuple[Shard, int, dict[str, Any]]
"""A rank's shard, its rank, and the extra keys miles puts beside it (the schedule's)."""


_SLOTS, _COUNT, _STEP_BATCH_SIZE, _ROLLOUT_ID = (
    str(role_column(KNOWN_COLUMNS, role))
    for role in ("adapter_slot", "adapter_count", "step_batch_size", "rollout_id")
)


def to_batch(
    args: Any,
    data: Mapping[str, Any] | RolloutBatch,
    specs: Iterable[ColumnSpec],
    *,
    strict_keys: bool = False,
    pad_dp_size: int | None = None,
) -> RolloutBatch:
    """Validate and convert miles' train data (never mutated), padded to ``pad_dp_size``.

    Adapter slots without a count get ``args.multi_lora_n_adapters``, as miles adds it to every
    shard; miles' keys are mapped by :mod:`~arrow_split.compat.miles._keys`.
    """
    check_args(args)
    batch = (
        data if isinstance(data, RolloutBatch) else _from_train_data(args, data, specs, strict_keys)
    )
    if _STEP_BATCH_SIZE in batch.batch_globals:  # judged as `can_schedule_on_rollout_side` does
        rollouts_per_step(batch.batch_globals[_STEP_BATCH_SIZE])
    return batch if pad_dp_size is None else pad_to_dp(batch, pad_dp_size)


def _from_train_data(
    args: Any, data: Mapping[str, Any], specs: Iterable[ColumnSpec], strict_keys: bool
) -> RolloutBatch:
    if isinstance(data, Mapping):
        if _SLOTS in data and _COUNT not in data:
            n_adapters = arg_int(args, "multi_lora_n_adapters")
            if n_adapters is not None:
                data = {**data, _COUNT: n_adapters}
        _check_no_rank_keys(data)
        data = from_miles_keys(data)
        specs = infer_unknown_specs(data, specs, strict_keys=strict_keys)
    try:
        batch = RolloutBatch.from_train_data(data, specs=specs)
    except ArrowSplitError as error:
        raise miles_key_note(error) from None
    _check_adapter_slots(batch)
    _check_gather_positions(batch)
    return batch


_POSITIONS, _TEACHER_LENGTHS = TEACHER_GATHER_POSITIONS, TEACHER_RESPONSE_LENGTHS


def _check_gather_positions(batch: RolloutBatch) -> None:
    """Each sample's teacher positions: strictly increasing, within its teacher response."""
    if _POSITIONS not in batch.column_names:
        return
    column = batch.column(_POSITIONS)
    offsets = np.asarray(column.offsets, dtype=np.int64)
    values = np.asarray(column.flatten(), dtype=np.int64)
    rows = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    steps = np.flatnonzero((np.diff(values) <= 0) & (rows[1:] == rows[:-1]))
    if steps.size:
        at = int(steps[0]) + 1
        sample, token = int(rows[at]), int(at - offsets[rows[at]])
        raise mistake(
            "value_range",
            key=_POSITIONS,
            sample=sample,
            position=token,
            expected="strictly increasing",
            got=f"{int(values[at])} after {int(values[at - 1])}",
            fix="map each response token to its own, later teacher position",
        )
    limit = (
        np.asarray(batch.column(_TEACHER_LENGTHS), dtype=np.int64)[rows]
        if _TEACHER_LENGTHS in batch.column_names
        else None
    )
    outside = np.flatnonzero((values < 0) | (values >= limit if limit is not None else False))
    if outside.size:
        at = int(outside[0])
        sample, token = int(rows[at]), int(at - offsets[rows[at]])
        bound = "" if limit is None else f" and < {int(limit[at])} (`{_TEACHER_LENGTHS}`)"
        raise mistake(
            "value_range",
            key=_POSITIONS,
            sample=sample,
            position=token,
            expected=f"inside the teacher response: >= 0{bound}",
            got=str(int(values[at])),
            fix="fix the position map",
        )


RANK_DICT_KEYS = ("partition", "micro_batch_indices", "num_microbatches", "num_rollouts")


def _check_no_rank_keys(data: Mapping[str, Any]) -> None:
    """Refuse a data key that the rank dict's own key would silently replace."""
    for key in (key for key in RANK_DICT_KEYS if key in data):
        msg = (
            f"train data holds `{key}`, a key the split puts into each rank's dict itself "
            f"(it would be replaced silently); rename the key, e.g. `my_{key}`"
        )
        raise SchemaError(msg, key=key)


def _check_adapter_slots(batch: RolloutBatch) -> None:
    values = batch.role_values("adapter_slot")
    n_adapters = batch.batch_globals.get(_COUNT)
    if values is None or n_adapters is None or not len(values):
        return
    bad = np.flatnonzero((values < 0) | (values >= int(n_adapters)))  # type: ignore[call-overload]
    if bad.size:
        sample = int(bad[0])
        msg = (
            f"`{_SLOTS}` is {int(values[sample])} but `{_COUNT}` is {n_adapters}; "
            f"adapter slots must be in [0, {_COUNT}) (set `args.multi_lora_n_adapters` to the "
            "number of adapters)"
        )
        raise ValueRangeError(msg, key=_SLOTS, sample=sample)


def plan_shards(batch: RolloutBatch, dp_size: int, balance_data: bool) -> Iterator[ShardParts]:
    """The classic split, planned now; a rank's shard is taken as the iterator reaches it."""
    plan = batch.make_plan(dp_size, balance_data=balance_data)  # raises now
    return ((take(batch, plan, rank), rank, {}) for rank in range(dp_size))


def _weights(
    config: ScheduleConfig, lengths: np.ndarray, args: Any, flops: FlopsFn | None
) -> Sequence[float] | None:
    if not config.balance_by_flops:
        return None
    if flops is None:
        msg = (
            "`args.balance_by_flops` is set but no `flops` function was given; pass "
            "`flops=lambda total_lengths, args: [...]` (one workload per sample), or use "
            "`install()`, which passes miles' own FLOPs estimate"
        )
        raise OptionError(msg, key="args.balance_by_flops")
    return flops(lengths.tolist(), args)


def check_flops(flops: object) -> None:
    """Refuse a ``flops`` that is neither ``None`` nor callable (typed, at the door)."""
    if flops is not None and not callable(flops):
        msg = (
            "`flops` must be a function `flops(total_lengths, args)` returning one workload "
            f"per sample, got {type(flops).__name__}"
        )
        raise OptionTypeError(msg, key="flops")


def miles_schedule_fields(rank_schedule: RankSchedule) -> dict[str, Any]:
    """The schedule keys miles puts beside a rank's rows, with miles' values and types."""
    offsets = rank_schedule.micro_batch_offsets.tolist()
    return {
        "micro_batch_indices": [
            list(range(start, stop)) for start, stop in itertools.pairwise(offsets)
        ],
        "num_microbatches": list(rank_schedule.num_microbatches),
        "num_rollouts": list(rank_schedule.num_rollouts),
    }


def scheduled_shards(
    args: Any,
    batch: RolloutBatch,
    dp_size: int,
    train_parallel_config: Mapping[str, Any],
    flops: FlopsFn | None,
) -> Iterator[ShardParts]:
    """Each rank's rows in micro-batch order and miles' schedule keys; planned now, taken lazily."""
    rollout_ids = batch.role_values("rollout_id")
    if rollout_ids is None:
        msg = f"the rollout-side schedule needs `{_ROLLOUT_ID}` (one rollout id per sample)"
        raise SchemaError(msg, key=_ROLLOUT_ID)
    config = schedule_config(args, batch, train_parallel_config)
    lengths = batch.total_lengths
    schedule = plan_schedule(
        lengths,
        rollout_ids,
        dp_size,
        config,
        weights=_weights(config, lengths, args, flops),
    )
    return (
        (rank.take(batch), rank.dp_rank, miles_schedule_fields(rank)) for rank in schedule.ranks
    )


def rollout_dict(shard: Shard, extras: Mapping[str, Any]) -> dict[str, Any]:
    """A shard as miles' rollout-layout dict of fresh objects (numpy views for tensors).

    Flags stored as bool come back as 0/1 ints, as miles keeps them.
    """
    rollout = cast("dict[str, Any]", shard.to_train_data(layout="rollout"))  # a TypedDict
    train_data: dict[str, Any] = to_miles_keys(shard.rows, rollout)
    for name, spec in shard.specs.items():
        value_type = spec.value_type
        if value_type is not None and pa.types.is_boolean(value_type) and name in train_data:
            train_data[name] = [int(value) for value in train_data[name]]
    train_data.update(copy.deepcopy(dict(extras)))
    return train_data


class RolloutShard(Mapping[str, Any]):
    """One rank's shard read as miles' rollout-layout dict: read-only, decoded on first read.

    What the eager hand-off puts: it pickles as its Arrow shard (no Python lists). ``extras``
    (the schedule's keys) are copied into every dict; :meth:`to_dict` returns a fresh one.
    """

    __slots__ = ("_decoded", "dp_rank", "dp_size", "extras", "shard")

    def __init__(
        self, shard: Shard, dp_rank: int, dp_size: int, extras: Mapping[str, Any] | None = None
    ) -> None:
        self.shard = shard
        self.dp_rank = dp_rank
        self.dp_size = dp_size
        self.extras = dict(extras or {})
        self._decoded: dict[str, Any] | None = None

    def _dict(self) -> dict[str, Any]:
        if self._decoded is None:
            self._decoded = rollout_dict(self.shard, self.extras)
        return self._decoded

    def to_dict(self) -> dict[str, Any]:
        """A fresh dict of every key (decoded again: no list is shared with another call)."""
        return rollout_dict(self.shard, self.extras)

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __reduce__(self) -> tuple[Any, ...]:
        return (RolloutShard, (self.shard, self.dp_rank, self.dp_size, self.extras))

    def __repr__(self) -> str:
        return (
            f"RolloutShard(dp_rank={self.dp_rank}, dp_size={self.dp_size}, "
            f"{self.shard.num_samples} samples, extras=[{', '.join(self.extras)}])"
        )
