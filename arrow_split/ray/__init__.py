"""Ray leaf: put a rollout batch into the object store; each data-parallel rank takes its own rows.

:func:`split_train_data_by_dp` on the driver, :func:`process_rollout_data` on each train actor;
see :mod:`arrow_split.ray._handoff` for the two hand-offs (eager and delayed), lifetimes and
ownership, :mod:`arrow_split.ray._locality` for the node-aware delayed split and
:func:`warm_up` (:mod:`arrow_split.ray._warm`) for a train actor's first step. This leaf imports
the public core only.
"""

from __future__ import annotations

from arrow_split.ray._handoff import process_rollout_data, split_train_data_by_dp
from arrow_split.ray._locality import HELPER_NAME_PREFIX, Locality, OnFetch, clear_caches
from arrow_split.ray._warm import warm_up

__all__ = [
    "HELPER_NAME_PREFIX",
    "Locality",
    "OnFetch",
    "clear_caches",
    "process_rollout_data",
    "split_train_data_by_dp",
    "warm_up",
]
