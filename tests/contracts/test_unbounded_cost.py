"""Unbounded cost from one argument: the work is bounded by the data, or the argument refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arrow_split import (
    ArrowSplitError,
    OptionError,
    PlanError,
    RolloutBatch,
    shard_for_rank,
    split_train_data_by_dp_raw,
)
from arrow_split._args import MAX_DP_SIZE
from tests.error_facts import raises_facts

BATCH = RolloutBatch.from_train_data(
    {"tokens": [[1, 2], [3]], "response_lengths": [1, 1], "loss_masks": [[1], [0]]}
)


@pytest.mark.parametrize("dp_size", [MAX_DP_SIZE + 1, 2**31 - 1, 10**9, np.int64(2**40)])
def test_unbounded_cost_a_huge_dp_size_is_refused_before_any_work(dp_size: object) -> None:
    with raises_facts(
        PlanError, key="dp_size", expected=f"at most {MAX_DP_SIZE}", mistake="plan_value"
    ):
        split_train_data_by_dp_raw(BATCH, dp_size, balance_data=False)  # type: ignore[arg-type]
    with raises_facts(
        PlanError, key="dp_size", expected=f"at most {MAX_DP_SIZE}", mistake="plan_value"
    ):
        shard_for_rank(BATCH, 0, dp_size, balance_data=False)  # type: ignore[arg-type]


def test_unbounded_cost_the_largest_dp_size_gives_one_shard_per_rank() -> None:
    shard = shard_for_rank(BATCH, MAX_DP_SIZE - 1, MAX_DP_SIZE, balance_data=False)
    assert len(shard) == 0  # a rank beyond the samples is empty; nothing else was built


@pytest.mark.torch
def test_unbounded_cost_a_huge_pad_multiple_is_refused() -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_tensors
    from arrow_split.torch._layouts import MAX_PAD_MULTIPLE

    for multiple in (MAX_PAD_MULTIPLE + 1, 2**31 - 1, 2**63):
        with raises_facts(  # an option out of range: OptionError (it was a ValueRangeError)
            OptionError,
            key="pad_to_multiple_of",
            expected=">= 1 and <= 1048576",
            mistake="option_value",
        ):
            to_tensors(BATCH, layout="padded", pad_to_multiple_of=multiple)
    one = RolloutBatch.from_train_data({"tokens": [[1, 2]]})
    padded = to_tensors(one, layout="padded", pad_to_multiple_of=MAX_PAD_MULTIPLE)
    assert tuple(padded["tokens"].shape) == (1, MAX_PAD_MULTIPLE)  # type: ignore[union-attr]


@pytest.mark.torch
def test_unbounded_cost_a_huge_unsigned_offset_is_a_typed_error() -> None:
    pytest.importorskip("torch")
    from arrow_split.torch import to_micro_batches

    with raises_facts(OptionError, key="micro_batch_offsets"):
        to_micro_batches(BATCH, np.array([0, 2**63, 2**64 - 1], dtype=np.uint64))


@pytest.mark.parametrize(
    ("kwargs", "facts"),
    [
        ({"kills": "3"}, {"key": "kills", "got": "str '3'", "mistake": "option_type"}),
        ({"kills": True}, {"key": "kills", "got": "bool True", "mistake": "option_type"}),
        ({"kills": -1}, {"key": "kills", "got": "-1", "mistake": "option_value"}),
        ({"kills": 10**9}, {"key": "kills", "expected": ">= 0 and <= 100000"}),
        ({"kills": 1, "groups": 0}, {"key": "groups", "got": "0", "mistake": "option_value"}),
        ({"kills": 1, "sync": "nope"}, {"key": "sync"}),
        ({"kills": 1, "folder": 3}, {"key": "folder"}),
    ],
)
def test_unbounded_cost_kill_test_arguments_are_parsed_first(
    kwargs: dict[str, object], facts: dict[str, Any]
) -> None:
    from arrow_split.testing import run_kill_test

    with raises_facts(ArrowSplitError, **facts):
        run_kill_test(**kwargs)  # type: ignore[arg-type]
