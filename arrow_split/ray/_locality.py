"""Node-aware delayed split: take a rank's rows on a node that holds the batch.

Ray moves an object between nodes whole. With the plain delayed split, every node that hosts a
rank pulls the WHOLE batch into its object store before its ranks take their rows, so the bytes
that cross nodes grow with the number of nodes. :func:`arrow_split.ray.process_rollout_data`
therefore chooses where a rank's take runs (its ``locality`` keyword, see :data:`Locality`):

``"local"``
    The plain delayed split: fetch the batch to this rank's node (once per node: the ranks of a
    node share its copy) and take here.
``"holder"``
    Always take on a node that holds the batch: a helper actor there maps the batch zero-copy,
    takes this rank's rows and returns them; only the shard crosses nodes.
``"auto"`` (the default)
    Take here, zero-copy, when this rank's node holds a copy; else as ``"holder"``. On a
    one-node cluster it takes here without asking where the batch is.

What crosses nodes in one step, for a batch put on node H and ranks on N other nodes: eager, each
rank's shard once (about one batch in all); ``"local"``, the whole batch once per node;
``"auto"`` and ``"holder"``, each rank's shard once, as eager.

Where the holder's take runs: one helper actor per holding node (named
``arrow_split.holder.<node id>`` in the job's namespace, no CPU, up to 8 takes at once on
threads), created by the first rank that needs it, rather than one task per rank (a burst of
zero-CPU tasks makes a raylet start a worker process for each). Ray ties an actor to the process
that created it: when that rank's process dies the helper dies too, and the next call that finds
it gone starts another (each call retries once on a fresh helper, then takes locally).

Per-process state, and its reset. A process keeps the handles of the helpers it used (by node
id) and its last count of live nodes (trusted for 10 seconds). Both belong to one Ray session:
they are dropped when the session changes (a ``ray.shutdown()`` then ``ray.init()``), and
:func:`clear_caches` drops them on demand.

Lifetimes. The helper's reply (the shard) is an object owned by the calling rank; the rank
fetches it once, copies it into fresh buffers (so its shard is writable and pins nothing, as with
a local delayed take) and drops the reference, which frees the object. The helper keeps no view
of the batch after a take.

Failures. The location lookup has a timeout; when it fails, when no node holds a copy (small
objects travel inline with the reference) or when the helper cannot be reached twice in a row,
the rank takes locally, which reports a lost batch as a :class:`TransportError` naming the rank.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, get_args

try:
    import ray
    from ray import exceptions as ray_exceptions
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:
    msg = "arrow_split.ray needs Ray; install it with `pip install arrow-split[ray]`"
    raise ImportError(msg) from None

import numpy as np

from arrow_split import ArrowSplitError, OptionError, RolloutBatch, Shard, shard_for_rank, take_rows

if TYPE_CHECKING:
    from ray import ObjectRef

__all__ = [
    "HELPER_NAME_PREFIX",
    "Locality",
    "check_locality",
    "clear_caches",
    "pick_holder",
    "take_on_holder",
]

Locality = Literal["auto", "local", "holder"]
"""Where a rank takes its rows from a delayed batch (see the module docstring)."""

HELPER_NAME_PREFIX = "arrow_split.holder."
"""The name of a node's take helper is this prefix and the node's hex id."""
_HELPER_THREADS = 8
_LOOKUP_TIMEOUT_MS = 10_000
_ATTEMPTS = 2
# How long a rank trusts its last count of live nodes: on one node every copy is local, so
# "auto" skips the location lookup (an RPC to the batch's owner).
_NODE_COUNT_TTL_S = 10.0

# Errors after which the helper, or its reply, is gone: start a fresh helper and try again.
_HelperGoneError = (
    ray_exceptions.RayActorError,
    ray_exceptions.ActorUnschedulableError,
    ray_exceptions.ObjectLostError,
)

OnFetch = Callable[["ObjectRef[Any]"], None]
"""A callback given each reference a rank fetched to its process (an opt-in measuring hook)."""


@dataclasses.dataclass
class _Caches:
    """The helper handles and node count, valid for one Ray session only."""

    session: str = ""
    helpers: dict[str, Any] = dataclasses.field(default_factory=dict)
    node_count: tuple[float, int] | None = None

    def current(self) -> _Caches:
        session = str(ray.get_runtime_context().get_job_id())
        if session != self.session:
            self.session, self.helpers, self.node_count = session, {}, None
        return self


_caches = _Caches()


def clear_caches() -> None:
    """Forget this process's helper handles and node count (they are rebuilt on demand)."""
    _caches.session, _caches.helpers, _caches.node_count = "", {}, None


def check_locality(locality: object) -> Locality:
    """Return ``locality`` if it is one of :data:`Locality`, else raise an OptionError."""
    choices: tuple[Locality, ...] = get_args(Locality)
    for choice in choices:
        if locality == choice and isinstance(locality, str):
            return choice
    msg = (
        f"invalid `locality`: {locality!r}; expected one of: "
        f"{', '.join(repr(choice) for choice in choices)}"
    )
    raise OptionError(msg)


def pick_holder(ref: ObjectRef[Any], dp_rank: int, locality: Locality) -> str | None:
    """The node where this rank should take its rows, or ``None`` to take here.

    Ranks spread over the holding nodes by rank when the batch has several copies.
    """
    if locality == "local" or (locality == "auto" and _live_nodes() == 1):
        return None
    holders = _holder_nodes(ref)
    if not holders:
        return None
    here = str(ray.get_runtime_context().get_node_id())
    if here in holders:
        return None if locality == "auto" else here
    return holders[dp_rank % len(holders)]


def _live_nodes() -> int:
    """The number of live nodes in the cluster, counted at most every ``_NODE_COUNT_TTL_S``."""
    caches = _caches.current()
    now = time.monotonic()
    if caches.node_count is None or now - caches.node_count[0] > _NODE_COUNT_TTL_S:
        nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
        caches.node_count = (now, len([node for node in nodes if node.get("Alive")]))
    return caches.node_count[1]


def _holder_nodes(ref: ObjectRef[Any]) -> list[str]:
    """The ids of the nodes whose object store holds a copy of ``ref`` (``[]`` if unknown)."""
    try:
        locations = ray.experimental.get_object_locations([ref], timeout_ms=_LOOKUP_TIMEOUT_MS)
    except ray_exceptions.RayError:
        return []
    location = locations.get(ref)
    return sorted(location.get("node_ids") or ()) if location else []


def take_on_holder(
    ref: ObjectRef[Any],
    node_id: str,
    request: dict[str, Any],
    on_fetch: OnFetch | None,
) -> Shard | None:
    """The rank's shard, taken on ``node_id`` and copied into fresh buffers here.

    ``request`` holds the keywords of :func:`arrow_split.shard_for_rank` (``dp_rank``,
    ``dp_size``, ``balance_data``, ``resplit``). Returns ``None`` when the caller should take
    locally instead: the helper could not be reached twice in a row, the batch is gone, or the
    reference holds something other than a whole batch (the local path then raises the
    library's error, naming the rank).

    Raises
    ------
    ArrowSplitError
        The take itself failed on the holder (a plan the batch cannot meet, a plan mismatch).
    """
    for _ in range(_ATTEMPTS):
        helper = _helper_on(node_id)
        try:
            shard_ref = helper.take.remote({"ref": ref}, request)
            shard = ray.get(shard_ref)
        except ray_exceptions.RayTaskError as exc:
            if isinstance(exc.cause, ArrowSplitError):
                raise exc.cause from None
            if not isinstance(exc, ray_exceptions.ObjectLostError):
                raise
            return None  # the batch itself is lost: the local take reports it
        except _HelperGoneError:
            _caches.current().helpers.pop(node_id, None)
            continue
        if shard is None:
            return None
        if on_fetch is not None:
            on_fetch(shard_ref)
        # An identity take copies the shard out of the object store into fresh buffers.
        return take_rows(shard, np.arange(shard.num_samples, dtype=np.int64))
    return None


def _helper_on(node_id: str) -> Any:
    """The take helper of ``node_id``: this process's handle, or a new or existing actor."""
    helpers = _caches.current().helpers
    helper = helpers.get(node_id)
    if helper is None:
        helper = _HolderTake.options(  # type: ignore[attr-defined]
            name=HELPER_NAME_PREFIX + node_id,
            get_if_exists=True,
            max_concurrency=_HELPER_THREADS,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote()
        helpers[node_id] = helper
    return helper


@ray.remote(num_cpus=0)
class _HolderTake:
    """Takes ranks' rows from batches its node holds; one per node, shared by every rank."""

    def take(self, boxed: dict[str, Any], request: dict[str, Any]) -> Shard | None:
        batch = ray.get(boxed["ref"])
        if not isinstance(batch, RolloutBatch):
            return None
        return shard_for_rank(batch, **request)
