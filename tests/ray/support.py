"""Helpers shared by the Ray test modules: bounded polling, the store's free bytes, failures."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray

from arrow_split import ArrowSplitError
from arrow_split.ray import process_rollout_data

__all__ = ["rollout_failure", "store_bytes_free", "wait_until"]


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
