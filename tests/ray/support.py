"""Helpers shared by the Ray test modules: bounded polling, the store's free bytes, failures."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import ray

from arrow_split import ArrowSplitError
from arrow_split.ray import process_rollout_data

__all__ = ["cross_node_bytes", "rollout_failure", "store_bytes_free", "wait_until"]


def wait_until(condition: Callable[[], bool], timeout_s: float = 20.0) -> bool:
    """Poll ``condition`` every 0.1 s until it holds or ``timeout_s`` passes; return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def store_bytes_free() -> float:
    """Free bytes of the object store, as Ray reports them (freed objects return asynchronously)."""
    return float(ray.available_resources().get("object_store_memory", 0.0))


def rollout_failure(refs: Any, dp_rank: int, dp_size: int, **kwargs: Any) -> tuple[str, str]:
    """Call ``process_rollout_data``; return the library error's class and message, or blanks."""
    try:
        process_rollout_data(refs, dp_rank, dp_size, **kwargs)
    except ArrowSplitError as exc:
        return type(exc).__name__, str(exc)
    return "", ""


def cross_node_bytes(refs: Iterable[Any], *, timeout_s: float = 10.0) -> int:
    """Bytes that crossed nodes to place the copies of these objects, from Ray's own records.

    The sum over distinct live objects of ``object_size * (nodes holding a copy - 1)``; an
    object that travels inline counts 0. One lookup per object (a lookup of objects with several
    owners can misbehave in Ray 2.60).
    """
    total = 0
    for ref in {ref.hex(): ref for ref in refs}.values():
        found = ray.experimental.get_object_locations([ref], timeout_ms=int(timeout_s * 1000))
        location = found.get(ref)
        if location:
            copies = len(location.get("node_ids") or ())
            total += int(location.get("object_size") or 0) * max(copies - 1, 0)
    return total
