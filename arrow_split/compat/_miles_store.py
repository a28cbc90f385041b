"""The Ray side of the miles drop-in: references of the installed miles' type, and get results.

miles' ``StoreObjectRef`` was ``Box`` (the Ray reference read through ``.inner``) at the commit
this drop-in first followed; miles #2542 makes it a pydantic union whose Ray member is
``_RayStoreObjectRef(payload=...)``. The drop-in returns whichever the installed miles defines:
:func:`~arrow_split.compat.miles.install` detects it (:func:`ref_factory_of`) and sets
:data:`REF_FACTORY` (``undo()`` puts it back); without ``install()`` references are
:class:`ArrowRef`, ``Box``-shaped. Either shape (and a bare Ray reference) is read back.

Ray is imported when a function here is called, never when the module is imported, so the
rollout-side functions of :mod:`arrow_split.compat.miles` work without Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, NamedTuple

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
from arrow_split.compat._miles_args import arg_flag
from arrow_split.compat._miles_shards import RolloutShard, rollout_dict, to_batch

__all__ = [
    "ArrowRef",
    "KeyOptions",
    "REF_FACTORY",
    "StoreGetResult",
    "check_no_witness",
    "fetch_delayed",
    "fetch_eager",
    "put_delayed",
    "put_eager",
    "ref_factory_of",
    "wrap_ref",
]


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


RefFactory = Callable[[Any], Any]

REF_FACTORY: RefFactory = ArrowRef
"""What wraps each Ray reference the drop-in returns (``install()`` sets it, see above)."""


def ref_factory_of(object_store: object) -> RefFactory:
    """The reference type of miles' ``miles.utils.object_store`` module (or :class:`ArrowRef`).

    A module with ``_RayStoreObjectRef`` (miles #2542 on) gets that class, built with
    ``payload=``; any other (``StoreObjectRef = Box``) gets the ``Box``-shaped :class:`ArrowRef`.
    """
    pydantic_ref = getattr(object_store, "_RayStoreObjectRef", None)
    if pydantic_ref is None:
        return ArrowRef

    def wrap(ray_ref: Any) -> Any:
        return pydantic_ref(payload=ray_ref)

    wrap.__qualname__ = f"{pydantic_ref.__name__}(payload=...)"
    return wrap


def wrap_ref(ray_ref: Any) -> Any:
    """A Ray reference in the reference type of the installed miles (:data:`REF_FACTORY`)."""
    return REF_FACTORY(ray_ref)


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
    return [wrap_ref(ref) for ref in refs]


def put_delayed(batch: RolloutBatch, dp_size: int | None, balance_data: bool) -> Any:
    """Put the whole batch once (with its plan when ``dp_size`` is known)."""
    import ray

    from arrow_split.ray import split_train_data_by_dp

    if dp_size is None:
        return wrap_ref(ray.put(batch))
    return wrap_ref(split_train_data_by_dp(batch, dp_size, balance_data=balance_data, delay=True))


def _unwrap(ref: object) -> Any:
    """The Ray reference in a reference of either shape (``inner`` or ``payload``), or itself."""
    for attribute in ("inner", "payload"):
        if hasattr(ref, attribute):
            return getattr(ref, attribute)
    return ref


def fetch_eager(
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


class KeyOptions(NamedTuple):
    """How a delayed rank converts and splits: specs, unknown keys refused, padding."""

    specs: Iterable[ColumnSpec]
    strict_keys: bool
    pad_to_dp: bool


def fetch_delayed(
    args: Any,
    ref: object,
    dp_rank: int,
    dp_size: int,
    witness_ids: Sequence[int] | None,
    options: KeyOptions,
) -> tuple[dict[str, Any], StoreGetResult]:
    """Take this rank's rows of the whole batch; return its rollout-layout dict and get result.

    An :class:`ArrowRef` holds a RolloutBatch: only this rank's rows are gathered (on a node that
    holds the batch if this one does not). Any other reference (miles' pydantic reference, or
    miles' own delayed put of the dict) is fetched here: a batch is mapped from this node's
    store (zero-copy) and this rank's rows taken; a dict is converted, validated as any batch.
    """
    import ray

    from arrow_split.ray import process_rollout_data

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
    shard = process_rollout_data(
        target,
        dp_rank,
        dp_size,
        balance_data=balance_data,
        resplit=True,  # miles splits for the train side's own `dp_size`, whatever was put
        witness_ids=witness_ids,
        pad_to_dp=options.pad_to_dp,
    )
    return rollout_dict(shard, {}), StoreGetResult(shard)


def check_no_witness(witness_info: object) -> None:
    """Eager shards already hold their witness ids: miles refuses witness info there too."""
    if witness_info is not None:
        msg = (
            "`witness_info` is only used with `args.delay_split_train_data_by_dp`: eager shards "
            "were split on the rollout side, so attach witness ids there (`seq_witness_ids`)"
        )
        raise OptionError(msg)
