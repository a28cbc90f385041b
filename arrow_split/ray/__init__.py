"""Ray leaf: put a rollout batch into the object store; each data-parallel rank takes its own rows.

:func:`split_train_data_by_dp` on the driver, :func:`process_rollout_data` in each train actor
(after :func:`warm_up` in its ``__init__``); docs/ray.md is the guide.
"""

from __future__ import annotations

try:  # the dependency, before the modules that use it
    import ray as _ray  # noqa: F401
except ImportError:
    msg = "arrow_split.ray needs Ray; install it with `pip install arrow-split[ray]`"
    raise ImportError(msg) from None

from arrow_split.ray._block import Fillable, fill_rank_block
from arrow_split.ray._handoff import process_rollout_data, split_train_data_by_dp, warm_up
from arrow_split.ray._nodes import HELPER_NAME_PREFIX, Locality, OnFetch, clear_caches, fetch
from arrow_split.ray._prefetch import RolloutPrefetcher
from arrow_split.ray._wire import (
    WIRE_FORMAT,
    can_free,
    free,
    ref_from_bytes,
    ref_from_json,
    ref_to_bytes,
    ref_to_json,
)

__all__ = [
    "Fillable",
    "HELPER_NAME_PREFIX",
    "Locality",
    "OnFetch",
    "RolloutPrefetcher",
    "WIRE_FORMAT",
    "can_free",
    "clear_caches",
    "fetch",
    "fill_rank_block",
    "free",
    "process_rollout_data",
    "ref_from_bytes",
    "ref_from_json",
    "ref_to_bytes",
    "ref_to_json",
    "split_train_data_by_dp",
    "warm_up",
]
