"""miles' hand-off through Ray's object store: the puts, the gets and their reference types.

Eager: one :class:`RolloutShard` per rank, all put or none (miles #2248/#2286). Delayed: the
whole batch once, each rank gathers its own rows. References come back in the installed miles'
type (``Box``-shaped :class:`ArrowRef` before #2542, ``_RayStoreObjectRef`` after).
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import arrow_split.compat.miles._install as _install
from arrow_split import (
    ArrowSplitError,
    ColumnSpec,
    NotARolloutBatchError,
    OptionError,
    OptionTypeError,
    PlanError,
    PlanMismatchError,
    RolloutBatch,
    Shard,
    TransportError,
)
from arrow_split._args import describe
from arrow_split.compat.miles._convert import RolloutShard, ShardParts, rollout_dict, to_batch
from arrow_split.compat.miles._fields import arg_flag
from arrow_split.compat.miles._mooncake import stored_ref, take_stored
from arrow_split.compat.miles._store import store_instance
from arrow_split.errors import mistake

__all__ = ["ArrowRef", "StoreGetResult", "fetch_delayed", "fetch_eager", "put_delayed", "put_eager"]


@dataclass(frozen=True, slots=True)
class ArrowRef:
    """A reference to a batch arrow_split put, shaped like miles' ``Box`` (``inner``).

    Wrapped, Ray hands it to an actor method unresolved. ``step`` is the put's sequence number in
    the process that put it (one per rollout step in a miles job), named in a rank's errors. It
    survives pickle and cloudpickle, and :meth:`to_json` / :meth:`from_json` carry it as plain
    JSON to a process that holds nothing else (docs/miles.md, "References on the wire").
    """

    inner: Any
    step: int | None = None

    @property
    def payload(self) -> Any:
        """The Ray reference, under the name miles' newer reference type gives it."""
        return self.inner

    def to_json(self) -> str:
        """The reference as a JSON document; the object stays pinned until freed (see docs)."""
        from arrow_split.ray import ref_to_json

        return ref_to_json(self.inner, step=self.step)

    @classmethod
    def from_json(cls, text: str | bytes) -> ArrowRef:
        """The reference :meth:`to_json` wrote (decoding never runs code from the text)."""
        from arrow_split.ray import ref_from_json

        object_ref, members = ref_from_json(text)
        step = members.get("step")
        if step is not None and (type(step) is not int or step < 0):
            msg = f"the reference {object_ref.hex()}: `step` must be an int >= 0 or null"
            raise OptionError(msg)
        return cls(object_ref, step)

    def __reduce__(self) -> tuple[Any, ...]:
        # a Ray reference pickled by plain pickle loses its owner's address; Ray's own form
        # keeps it (and, as for any reference serialized out of band, pins the object)
        if type(self.inner).__module__.startswith("ray"):
            from arrow_split.ray import ref_to_bytes

            return (_ref_from_wire, (ref_to_bytes(self.inner), self.step))
        return (ArrowRef, (self.inner, self.step))


def _ref_from_wire(payload: bytes, step: int | None) -> ArrowRef:
    from arrow_split.ray import ref_from_bytes

    return ArrowRef(ref_from_bytes(payload), step)


_LOG = logging.getLogger("arrow_split.compat.miles")
_PUTS = itertools.count(1)  # this process's delayed puts, numbered from 1


def wrap_ref(ray_ref: Any, step: int | None = None) -> Any:
    """A Ray reference in the installed miles' reference type (``ArrowRef`` before install)."""
    factory = _install.REF_FACTORY
    return ArrowRef(ray_ref, step) if factory is None else factory(ray_ref)


def unwrap(ref: object) -> Any:
    """The Ray reference in a reference of either shape (``inner`` or ``payload``), or itself."""
    for attribute in ("inner", "payload"):
        if hasattr(ref, attribute):
            return getattr(ref, attribute)
    return ref


class StoreGetResult:
    """What a rank fetched, with miles' get-result interface: ``value``, a context manager.

    ``value`` is the rank's :class:`~arrow_split.Shard`; releasing (or leaving the ``with``)
    drops this object's reference to it, and the store frees it once nothing else refers to it
    (numpy arrays of the returned dict are views of an eager shard and keep it alive).
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

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def put_eager(parts: Iterable[ShardParts], dp_size: int) -> list[Any]:
    """Put one :class:`RolloutShard` per rank, one at a time; a failed put frees the others."""
    import ray

    refs: list[Any] = []
    rank = 0
    try:
        for shard, rank, extras in parts:
            refs.append(ray.put(RolloutShard(shard, rank, dp_size, extras)))
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
    return [wrap_ref(ref) for ref in refs]


def put_delayed(batch: RolloutBatch, dp_size: int | None, balance_data: bool) -> Any:
    """Put the whole batch once (with its plan when ``dp_size`` is known), numbered."""
    import ray

    from arrow_split.ray import split_train_data_by_dp as put_batch

    step = next(_PUTS)
    if dp_size is None:
        return wrap_ref(ray.put(batch), step)
    return wrap_ref(put_batch(batch, dp_size, balance_data=balance_data, delay=True), step)


_REFS = "rollout_data_ref"  # the argument of `process_rollout_data`


def fetch_eager(
    refs: Sequence[object], dp_rank: int, dp_size: int
) -> tuple[dict[str, Any], StoreGetResult]:
    """Fetch ``refs[dp_rank]`` alone; return its rollout-layout dict and the get result."""
    import ray

    expected = f"the list of `dp_size` ({dp_size}) references `split_train_data_by_dp` returned"
    fix = "with `args.delay_split_train_data_by_dp`, pass the one delayed reference"
    if not isinstance(refs, (list, tuple)):  # a wrong type, as every argument's
        got = describe(refs)
        raise mistake("option_type", key=_REFS, expected=expected, got=got, fix=fix)
    if len(refs) != dp_size:  # another split's list: no rank of this one
        got = f"{len(refs)} references"
        raise mistake("plan", key=_REFS, expected=expected, got=got, fix=fix)
    for index, item in enumerate(refs):
        if not isinstance(unwrap(item), (ray.ObjectRef, RolloutShard, Mapping)):
            msg = (
                f"`rollout_data_ref[{index}]` must be a reference `split_train_data_by_dp` "
                f"returned, got {type(item).__name__} {item!r:.40}"
            )
            raise OptionTypeError(msg, key=f"{_REFS}[{index}]")
    item = unwrap(refs[dp_rank])
    value = ray.get(item) if isinstance(item, ray.ObjectRef) else item
    if isinstance(value, RolloutShard):
        if (value.dp_rank, value.dp_size) != (dp_rank, dp_size):
            msg = (
                f"`{_REFS}[{dp_rank}]` holds rank {value.dp_rank}'s rows of a {value.dp_size}-rank "
                f"split, not rank {dp_rank}'s of {dp_size}; pass the list in the order "
                "`split_train_data_by_dp` returned it, with the same `dp_size`"
            )
            raise PlanMismatchError(msg, key=f"{_REFS}[{dp_rank}]")
        return value.to_dict(), StoreGetResult(value.shard)
    if isinstance(value, Mapping):  # a shard miles' own store put: its dict, as miles reads it
        return dict(value), StoreGetResult(None)
    msg = f"`{_REFS}[{dp_rank}]` holds a {type(value).__name__}, not a rank's shard"
    raise NotARolloutBatchError(msg, key=f"{_REFS}[{dp_rank}]")


def fetch_delayed(
    args: Any,
    ref: object,
    dp_rank: int,
    dp_size: int,
    *,
    witness_ids: Sequence[int] | None,
    specs: Iterable[ColumnSpec],
    strict_keys: bool,
    pad_to_dp: bool,
) -> tuple[dict[str, Any], StoreGetResult]:
    """Take this rank's rows of the whole batch; return its rollout-layout dict and get result."""
    import ray

    from arrow_split.ray import fetch
    from arrow_split.ray import process_rollout_data as take_rank

    balance_data = arg_flag(args, "balance_data", required=True)
    stored = stored_ref(ref)
    if stored is not None:  # the drop-in's put in Mooncake: this rank reads only its rows
        options = {"balance_data": balance_data, "pad_to_dp": pad_to_dp}
        instance = store_instance()
        shard = take_stored(instance, stored, dp_rank, dp_size, witness_ids=witness_ids, **options)
        return rollout_dict(shard, {}), StoreGetResult(shard)
    step = None
    target: object = ref
    if isinstance(ref, ArrowRef):  # what arrow_split put: a batch, taken where it lives
        target, step = ref.inner, ref.step
    elif not isinstance(ref, (RolloutBatch, Mapping)):
        if not isinstance(unwrap(ref), ray.ObjectRef):
            msg = (
                f"`rollout_data_ref` must be the reference `split_train_data_by_dp` returned, "
                f"got {type(ref).__name__} {ref!r:.40}"
            )
            raise OptionTypeError(msg, key=_REFS)
        # miles' reference type: a batch or a dict, fetched here
        target = fetch(unwrap(ref), f"dp_rank {dp_rank}", "the delayed reference", None)
    if isinstance(target, RolloutShard):
        msg = (
            "the delayed reference holds one rank's shard, not the whole batch; pass the "
            "reference `split_train_data_by_dp` returned with `args.delay_split_train_data_by_dp`"
        )
        raise PlanError(msg, key=_REFS)
    if isinstance(target, Mapping):
        _note_whole_dict()
        target = to_batch(args, target, specs, strict_keys=strict_keys)
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
        step=step,
        pad_to_dp=pad_to_dp,
    )
    return rollout_dict(shard, {}), StoreGetResult(shard)


@functools.cache  # once per process
def _note_whole_dict() -> None:
    """Log that a rank converts a whole dict (the put was not the drop-in's)."""
    _LOG.warning(
        "arrow_split: a delayed batch arrived as miles' own dict, so this rank converts all "
        'of it; install the drop-in in the process that puts (docs/miles.md, "Every '
        'process of a job") so that the put stores one Arrow batch'
    )
