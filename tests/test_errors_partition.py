"""Every error message of arrow_split.partition, pinned with ``pytest.raises(..., match=...)``."""

from __future__ import annotations

import re

import numpy as np
import pytest

from arrow_split.errors import PlanError, PlanTypeError
from arrow_split.partition import (
    check_lengths,
    partition_for_rank,
    plan_fingerprint,
    plan_partitions,
)


@pytest.mark.parametrize("dp_size", [0, -3, np.int64(0)])
def test_dp_size_not_positive(dp_size: object) -> None:
    message = f"`dp_size` must be a positive int, got {dp_size!r}"
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_partitions([1, 2, 3, 4], dp_size, balance_data=False)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("dp_size", "kind"), [(True, "bool"), (2.0, "float"), ("4", "str"), (None, "NoneType")]
)
def test_dp_size_wrong_type(dp_size: object, kind: str) -> None:
    message = f"`dp_size` must be a positive int, got {dp_size!r} of type {kind}"
    with pytest.raises(PlanTypeError, match=re.escape(message)):
        plan_partitions([1, 2, 3, 4], dp_size, balance_data=True)  # type: ignore[arg-type]


def test_plan_type_error_is_a_type_error_and_a_plan_error() -> None:
    with pytest.raises(TypeError, match=re.escape("`dp_size` must be a positive int, got False")):
        plan_fingerprint([1, 2], False, balance_data=False)
    with pytest.raises(PlanError, match=re.escape("`dp_size` must be a positive int, got 1.5")):
        plan_fingerprint([1, 2], 1.5, balance_data=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("dp_rank", [4, -1, 100])
def test_dp_rank_out_of_range(dp_rank: int) -> None:
    message = f"`dp_rank` must be in [0, 4), got {dp_rank}; `dp_size` is 4"
    with pytest.raises(PlanError, match=re.escape(message)):
        partition_for_rank([1, 2, 3, 4], dp_rank, 4, balance_data=False)


@pytest.mark.parametrize(
    ("dp_rank", "kind"), [(True, "bool"), (1.0, "float"), ("0", "str"), (None, "NoneType")]
)
def test_dp_rank_wrong_type(dp_rank: object, kind: str) -> None:
    message = f"`dp_rank` must be an int in [0, 4), got {dp_rank!r} of type {kind}"
    with pytest.raises(PlanTypeError, match=re.escape(message)):
        partition_for_rank([1, 2, 3, 4], dp_rank, 4, balance_data=True)  # type: ignore[arg-type]


def test_dp_rank_checks_dp_size_first() -> None:
    with pytest.raises(PlanError, match=re.escape("`dp_size` must be a positive int, got 0")):
        partition_for_rank([1, 2], 0, 0, balance_data=False)


def test_balanced_not_divisible() -> None:
    message = (
        "balanced partitioning needs a multiple of `dp_size` (4) samples, got 10; "
        "drop 2 samples or pad with 2, or use `balance_data=False`"
    )
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_partitions(list(range(10)), 4, balance_data=True)


@pytest.mark.parametrize("n", [0, 3])
def test_balanced_fewer_samples_than_ranks(n: int) -> None:
    message = (
        f"balanced partitioning needs at least `dp_size` (8) samples, got {n}; "
        f"pad the batch with {8 - n} samples or use `balance_data=False`"
    )
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_partitions([5] * n, 8, balance_data=True)


def test_balanced_errors_also_from_rank_and_fingerprint() -> None:
    message = "balanced partitioning needs a multiple of `dp_size` (3) samples, got 4"
    with pytest.raises(PlanError, match=re.escape(message)):
        partition_for_rank([1, 2, 3, 4], 0, 3, balance_data=True)
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_fingerprint([1, 2, 3, 4], 3, balance_data=True)


@pytest.mark.parametrize(
    ("total_lengths", "dtype"),
    [([1.0, 2.0], "float64"), ([True, False], "bool"), (["3", "4"], "<U1"), ([1, None], "object")],
)
def test_lengths_not_integers(total_lengths: list[object], dtype: str) -> None:
    message = (
        f"`total_lengths` must hold integers, got dtype {dtype}; "
        "pass token counts, e.g. `np.asarray(lengths, dtype=np.int64)`"
    )
    with pytest.raises(PlanTypeError, match=re.escape(message)):
        check_lengths(total_lengths)


@pytest.mark.parametrize(("total_lengths", "shape"), [([[1, 2], [3, 4]], "(2, 2)"), (7, "()")])
def test_lengths_not_one_dimensional(total_lengths: object, shape: str) -> None:
    message = f"`total_lengths` must be 1-D (one length per sample), got shape {shape}"
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_partitions(total_lengths, 2, balance_data=False)  # type: ignore[arg-type]


def test_lengths_ragged() -> None:
    message = "`total_lengths` must be a 1-D sequence of non-negative ints; numpy says:"
    with pytest.raises(PlanError, match=re.escape(message)):
        check_lengths([[1, 2], [3]])


def test_lengths_negative() -> None:
    message = "`total_lengths` must be non-negative, got -2 at sample 1 (2 negative in all)"
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_partitions([4, -2, 3, -1], 2, balance_data=True)


def test_lengths_beyond_int64() -> None:
    too_big = np.array([2**63], dtype=np.uint64)
    message = f"`total_lengths` holds {2**63}, more than int64 can hold"
    with pytest.raises(PlanError, match=re.escape(message)):
        check_lengths(too_big)


def test_lengths_total_beyond_int64() -> None:
    message = f"`total_lengths` sums to {3 * 2**62} tokens, more than int64 can hold"
    with pytest.raises(PlanError, match=re.escape(message)):
        plan_fingerprint([2**62, 2**62, 2**62], 1, balance_data=False)
