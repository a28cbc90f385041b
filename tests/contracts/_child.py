"""Run a batch of seeded hostile calls of the crash-prone entry points, in a child process.

``python -m tests.contracts._child GROUP EXAMPLES``: prints each case to stderr before the call, so
that a crash of the interpreter leaves its reproducer as the last line; exits 0 when every case
kept the contract, 1 with the failing case otherwise.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arrow_split
from tests.contracts._groups import FOLDER, trip_ray
from tests.contracts._groups import GROUPS as MORE_GROUPS
from tests.contracts.hostile import (
    CALLS,
    check_contract,
    hostile_arrays,
    hostile_ints,
    hostile_values,
)

BATCH = arrow_split.RolloutBatch.from_train_data(
    {
        "tokens": [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10]],
        "response_lengths": [2, 1, 1, 3],
        "loss_masks": [[1, 0], [1], [0], [1, 1, 1]],
        "rollout_log_probs": [[-0.1, -0.2], [-0.3], [-0.4], [-0.5, -0.6, -0.7]],
        "rewards": [1.0, 0.0, 0.5, 0.25],
    }
)


def _case(name: str, *args: Any, **kwargs: Any) -> None:
    print(f"CASE {name} args={args!r:.300} kwargs={kwargs!r:.300}", file=sys.stderr, flush=True)


def _offsets(offsets: object) -> None:
    from arrow_split.torch import to_micro_batches

    _case("to_micro_batches", BATCH, offsets)
    check_contract(to_micro_batches, BATCH, offsets)


def _tensors(layout: object, pad_value: object, multiple: object) -> None:
    from arrow_split.torch import to_tensors

    _case("to_tensors", layout=layout, pad_value=pad_value, pad_to_multiple_of=multiple)
    check_contract(
        to_tensors, BATCH, layout=layout, pad_value=pad_value, pad_to_multiple_of=multiple
    )


def _indices(indices: object) -> None:
    _case("take_rows", BATCH, indices)
    check_contract(arrow_split.take_rows, BATCH, indices)


def _shard(dp_rank: object, dp_size: object, balance: object) -> None:
    _case("shard_for_rank", BATCH, dp_rank, dp_size, balance_data=balance)
    check_contract(arrow_split.shard_for_rank, BATCH, dp_rank, dp_size, balance_data=balance)
    _case("pad_to_dp", BATCH, dp_size)
    check_contract(arrow_split.pad_to_dp, BATCH, dp_size)


def _plan(lengths: object, dp_size: object, balance: object) -> None:
    _case("plan_partitions", lengths, dp_size, balance_data=balance)
    check_contract(arrow_split.plan_partitions, lengths, dp_size, balance_data=balance)
    _case("plan_fingerprint", lengths, dp_size, balance_data=balance)
    check_contract(arrow_split.plan_fingerprint, lengths, dp_size, balance_data=balance)


small_sizes = hostile_ints(low=-2, high=6).filter(lambda v: not isinstance(v, int) or v < 2**20)
GROUPS: dict[str, tuple[Callable[..., None], tuple[st.SearchStrategy[Any], ...]]] = {
    "offsets": (_offsets, (st.one_of(hostile_arrays(max_size=6), hostile_values()),)),
    "tensors": (
        _tensors,
        (
            st.sampled_from(["packed", "padded", "nested", "per_sample", "PACKED", None, 1]),
            st.one_of(hostile_ints(), st.just(np.float32(1.5))),
            st.one_of(st.none(), hostile_ints()),  # refused above 2**20, bounded below
        ),
    ),
    "indices": (_indices, (st.one_of(hostile_arrays(max_size=6), hostile_values()),)),
    "shard": (_shard, (hostile_ints(), small_sizes, hostile_values())),
    "plan": (_plan, (st.one_of(hostile_arrays(), hostile_values()), small_sizes, hostile_values())),
    **MORE_GROUPS,
}


def main(group: str, examples: int) -> None:
    """Run ``examples`` seeded cases of ``group``."""
    faulthandler.enable()
    os.chdir(FOLDER)  # a hostile relative path ("False") is written there, not in the repository
    if group in ("ray", "ray_prefetch", "miles", "wire"):
        trip_ray()
    function, strategies = GROUPS[group]
    test = settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )(given(*strategies)(function))
    test()
    print(f"OK {group} {examples} cases, {CALLS[0]} calls", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
