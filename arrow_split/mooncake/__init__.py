"""Mooncake leaf: the hand-off through Mooncake's distributed store, a rank reading only its rows.

A driver puts a step's batch once as its Arrow buffers (:func:`put_batch`); a rank anywhere,
with or without Ray, takes its shard from the JSON reference (:func:`take_rank`), reading only
the byte ranges of its rows into registered memory; the driver removes the batch after the step
(:func:`remove`). docs/mooncake.md is the guide.
"""

from __future__ import annotations

try:  # the dependency, before the modules that use it
    import mooncake.store as _store  # noqa: F401
except ImportError as exc:
    msg = (
        "arrow_split.mooncake needs Mooncake's store; install it with "
        f"`pip install arrow-split[mooncake]` (and the system's libibverbs1): {exc}"
    )
    raise ImportError(msg) from None

from arrow_split.mooncake._client import MooncakeClient, MooncakeStore, connect
from arrow_split.mooncake._handoff import MooncakeBatchRef, put_batch, remove, take_rank
from arrow_split.mooncake._master import LocalMaster, local_master

__all__ = [
    "LocalMaster",
    "MooncakeBatchRef",
    "MooncakeClient",
    "MooncakeStore",
    "connect",
    "local_master",
    "put_batch",
    "remove",
    "take_rank",
]
