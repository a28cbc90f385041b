"""Tests of arrow_split.plan and its balanced planner: exact cover, layout, reference, digests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from arrow_split import split_train_data_by_dp_raw
from arrow_split._args import MAX_DP_SIZE, check_dp_rank, check_dp_size, check_lengths
from arrow_split.errors import PlanError
from arrow_split.plan import (
    Plan,
    partition_for_rank,
    plan_fingerprint,
    plan_partitions,
)
from arrow_split.plan import _karmarkar_karp as karmarkar_karp_module
from arrow_split.plan._karmarkar_karp import kk_partitions
from tests.error_facts import raises_facts
from tests.reference_plan import reference_partitions

REPO_ROOT = Path(__file__).resolve().parent.parent

# Lengths from a few scales: all-zero, tiny (many ties), realistic and huge. The packed sort key
# overflows only near the int64 limit; an explicit @example below covers that fallback.
MAX_LENGTHS = st.sampled_from([0, 1, 3, 100, 8192, 2**40, 2**52])

# With dp_size 3, two merged states tie on (spread, first set's sum, count) and only the first
# row of their first sets decides which one the queue pops first.
TIED_MERGED_STATES = [11, 1, 21, 0, 11, 0, 1, 20, 20, 10, 21, 10]


@st.composite
def balanced_cases(draw: st.DrawFn) -> tuple[list[int], int]:
    dp_size = draw(st.integers(1, 32))
    per_rank = draw(st.integers(1, 16))
    max_length = draw(MAX_LENGTHS)
    size = dp_size * per_rank
    lengths = draw(st.lists(st.integers(0, max_length), min_size=size, max_size=size))
    return lengths, dp_size


@st.composite
def strided_cases(draw: st.DrawFn) -> tuple[list[int], int]:
    dp_size = draw(st.integers(1, 24))
    lengths = draw(st.lists(st.integers(0, draw(MAX_LENGTHS)), max_size=60))
    return lengths, dp_size


def _assert_exact_cover(parts: list[np.ndarray], n: int) -> None:
    rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert rows.size == n
    if n:
        assert rows.min() >= 0
    np.testing.assert_array_equal(np.bincount(rows, minlength=n), np.ones(n, dtype=np.int64))


def _assert_well_formed(parts: list[np.ndarray], dp_size: int) -> None:
    assert len(parts) == dp_size
    for part in parts:
        assert part.dtype == np.int64
        assert part.ndim == 1
        assert part.flags.c_contiguous
        assert part.flags.owndata
        assert np.all(np.diff(part) > 0)


def _assert_same_as_reference(parts: list[np.ndarray], expected: list[list[int]]) -> None:
    assert len(parts) == len(expected)
    for part, rows in zip(parts, expected, strict=True):
        np.testing.assert_array_equal(part, np.asarray(rows, dtype=np.int64))


@pytest.mark.parametrize(
    ("lengths", "expected"),
    [
        # States {2: 9, 0: 5} (spread 4) and {1: 3, 3: 1} (spread 2): the first pops first, its
        # heavier set takes row 3 (10 tokens), its lighter set row 1 (8 tokens).
        ([5, 3, 9, 1], [[2, 3], [0, 1]]),
        # All spreads 0: the state whose first set holds the larger row (3) pops first; both
        # merged sets weigh 8 and the one that starts with row 3 comes first.
        ([4, 4, 4, 4], [[0, 3], [1, 2]]),
    ],
)
def test_balanced_hand_worked_examples(lengths: list[int], expected: list[list[int]]) -> None:
    assert reference_partitions(lengths, 2, True) == expected
    _assert_same_as_reference(plan_partitions(lengths, 2, balance_data=True), expected)


# The explicit edge cases: n == dp_size, ties, capped lengths, dp_size 1, dp_size == n == 512,
# zero lengths, lengths near the int64 limit, and both sides of the tuple/array merge switch.
@given(balanced_cases())
@example(([5, 3, 9, 1], 4))
@example(([7] * 24, 4))
@example(([8192] * 40 + [10, 20, 30, 40, 50, 60, 70, 80], 8))
@example(([3, 1, 2, 2, 9], 1))
@example(([i % 7 for i in range(512)], 512))
@example(([0] * 16, 4))
@example(([2**60, 5, 2**60, 7, 1, 0, 2**59, 3], 2))
@example(([(i * 37) % 11 for i in range(90)], 9))
@example(([(i * 37) % 11 for i in range(90)], 10))
@example((TIED_MERGED_STATES, 3))
def test_balanced_matches_reference(case: tuple[list[int], int]) -> None:
    lengths, dp_size = case
    parts = plan_partitions(lengths, dp_size, balance_data=True)
    _assert_well_formed(parts, dp_size)
    _assert_exact_cover(parts, len(lengths))
    assert {part.size for part in parts} == {len(lengths) // dp_size}
    _assert_same_as_reference(parts, reference_partitions(lengths, dp_size, True))


@pytest.mark.parametrize("array_merge_min_sets", [1, 10**9], ids=["arrays", "tuples"])
@given(case=balanced_cases())
@example(case=([7] * 24, 4))
@example(case=([i % 7 for i in range(512)], 512))
@example(case=(TIED_MERGED_STATES, 3))
def test_balanced_merge_representations_agree(
    array_merge_min_sets: int, case: tuple[list[int], int]
) -> None:
    lengths, dp_size = case
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(karmarkar_karp_module, "_ARRAY_MERGE_MIN_SETS", array_merge_min_sets)
        parts = plan_partitions(lengths, dp_size, balance_data=True)
    _assert_same_as_reference(parts, reference_partitions(lengths, dp_size, True))


@given(strided_cases())
@example(([], 4))
@example(([1, 2, 3], 8))
@example(([5, 3, 9, 1], 4))
@example(([0] * 7, 1))
@example(([1] * 512, 512))
def test_strided_layout(case: tuple[list[int], int]) -> None:
    lengths, dp_size = case
    n = len(lengths)
    parts = plan_partitions(lengths, dp_size, balance_data=False)
    _assert_well_formed(parts, dp_size)
    _assert_exact_cover(parts, n)
    for rank, part in enumerate(parts):
        np.testing.assert_array_equal(part, np.arange(rank, n, dp_size, dtype=np.int64))
    assert max(part.size for part in parts) - min(part.size for part in parts) <= 1
    _assert_same_as_reference(parts, reference_partitions(lengths, dp_size, False))


@given(st.one_of(balanced_cases(), strided_cases()), st.booleans())
@example(([5, 3, 9, 1], 4), True)
@example(([], 3), False)
def test_partition_for_rank_matches_plan(case: tuple[list[int], int], balance_data: bool) -> None:
    lengths, dp_size = case
    if balance_data and (not lengths or len(lengths) % dp_size):
        balance_data = False
    parts = plan_partitions(lengths, dp_size, balance_data=balance_data)
    for rank in range(dp_size):
        shard_rows = partition_for_rank(lengths, rank, dp_size, balance_data=balance_data)
        assert shard_rows.dtype == np.int64
        np.testing.assert_array_equal(shard_rows, parts[rank])


def test_inputs_of_any_integer_container_give_the_same_plan() -> None:
    lengths = [40, 3, 17, 17, 0, 250, 9, 64]
    expected = plan_partitions(lengths, 4, balance_data=True)
    for same in (
        tuple(lengths),
        np.asarray(lengths, dtype=np.int32),
        np.asarray(lengths, np.uint16),
    ):
        numpy_dp_size: Any = np.int64(4)
        _assert_same_as_reference(
            plan_partitions(same, numpy_dp_size, balance_data=True), [p.tolist() for p in expected]
        )
        assert plan_fingerprint(same, 4, balance_data=True) == plan_fingerprint(
            lengths, 4, balance_data=True
        )


@given(balanced_cases())
@example(([0] * 16, 4))
@example(([7], 1))
def test_fingerprint_tracks_every_input(case: tuple[list[int], int]) -> None:
    lengths, dp_size = case
    fingerprint = plan_fingerprint(lengths, dp_size, balance_data=True)
    assert len(fingerprint) == 16
    assert int(fingerprint, 16) >= 0
    assert fingerprint == plan_fingerprint(list(lengths), dp_size, balance_data=True)
    assert fingerprint != plan_fingerprint(lengths, dp_size, balance_data=False)
    changed = [*lengths[:-1], lengths[-1] + 1]
    assert fingerprint != plan_fingerprint(changed, dp_size, balance_data=True)
    strided = plan_fingerprint(lengths, dp_size, balance_data=False)
    assert strided != plan_fingerprint(lengths, dp_size + 1, balance_data=False)
    assert strided != plan_fingerprint([*lengths, 0], dp_size, balance_data=False)


def test_fingerprint_is_pinned() -> None:
    # A change of these digests changes what ranks exchange: bump the format on purpose only.
    lengths = [3, 1, 4, 1, 5, 9, 2, 6]
    assert plan_fingerprint(lengths, 4, balance_data=True) == "93856064ef248253"
    assert plan_fingerprint(lengths, 4, balance_data=False) == "4651dc2a0afacea4"
    assert plan_fingerprint([], 4, balance_data=False) == "f669b58a1ac65bef"
    big_endian = np.array(lengths, dtype=">i8")
    assert plan_fingerprint(big_endian, 4, balance_data=True) == "93856064ef248253"


def test_validators_return_plain_values() -> None:
    assert check_dp_size(np.int32(8)) == 8
    assert type(check_dp_size(np.int32(8))) is int
    assert check_dp_rank(np.uint8(3), 4) == 3
    empties: list[npt.ArrayLike] = [[], (), np.zeros(0), np.zeros(0, dtype=bool)]
    for empty in empties:
        converted = check_lengths(empty)
        assert converted.dtype == np.int64
        assert converted.shape == (0,)
    converted = check_lengths(np.array([5, 0, 7], dtype=np.uint8))
    assert converted.dtype == np.int64
    assert converted.flags.c_contiguous
    np.testing.assert_array_equal(converted, [5, 0, 7])
    np.testing.assert_array_equal(check_lengths(np.arange(10)[::3]), [0, 3, 6, 9])


def test_strided_plan_of_empty_batch_has_empty_ranks() -> None:
    parts = plan_partitions([], 3, balance_data=False)
    assert [part.size for part in parts] == [0, 0, 0]
    assert partition_for_rank([], 2, 3, balance_data=False).size == 0


_CHILD_SCRIPT = """
import json, sys
import numpy as np
from arrow_split.plan import plan_fingerprint, plan_partitions
lengths = np.random.default_rng(20240611).integers(0, 9000, 4096)
out = {}
for balance_data in (True, False):
    parts = plan_partitions(lengths, 64, balance_data=balance_data)
    out[str(balance_data)] = {
        "parts": [part.tolist() for part in parts],
        "fingerprint": plan_fingerprint(lengths, 64, balance_data=balance_data),
    }
json.dump(out, sys.stdout)
"""


@pytest.mark.slow
def test_plan_is_the_same_in_fresh_processes_with_other_hash_seeds() -> None:
    outputs = []
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
        completed = subprocess.run(
            [sys.executable, "-c", _CHILD_SCRIPT],
            capture_output=True,
            check=True,
            cwd=REPO_ROOT,
            env=env,
            text=True,
            timeout=120,
        )
        outputs.append(json.loads(completed.stdout))
    assert outputs[0] == outputs[1]
    lengths = np.random.default_rng(20240611).integers(0, 9000, 4096)
    here = plan_partitions(lengths, 64, balance_data=True)
    assert outputs[0]["True"]["parts"] == [part.tolist() for part in here]
    assert outputs[0]["True"]["fingerprint"] == plan_fingerprint(lengths, 64, balance_data=True)


@st.composite
def _equal_size_cases(draw: st.DrawFn) -> tuple[int, list[int]]:
    dp_size = draw(st.integers(1, 8))
    count = dp_size * draw(st.integers(1, 6))
    return dp_size, draw(st.lists(st.integers(0, 50), min_size=count, max_size=count))


@given(_equal_size_cases())
def test_the_balanced_plan_is_the_general_equal_size_karmarkar_karp(
    case: tuple[int, list[int]],
) -> None:
    # One algorithm run two ways: the balanced plan's fast states and the general states
    # (free sizes, float weights). They must agree part for part.
    dp_size, lengths = case
    general = kk_partitions(lengths, dp_size, equal_size=True, exact=True)
    planned = plan_partitions(lengths, dp_size, balance_data=True)
    assert [part.tolist() for part in planned] == [sorted(part) for part in general]


@pytest.mark.parametrize("dp_size", [MAX_DP_SIZE + 1, 10**9, 2**31 - 1, 2**63])
@pytest.mark.parametrize("balance_data", [False, True])
def test_a_dp_size_above_the_limit_is_refused_at_once(dp_size: int, balance_data: bool) -> None:
    # Without the limit, a strided plan of 2**31 - 1 ranks would allocate one array per rank.
    with raises_facts(
        PlanError, key="dp_size", expected=f"at most {MAX_DP_SIZE}", mistake="plan_value"
    ):
        Plan.build([1, 2, 3], dp_size, balance_data=balance_data)
    with raises_facts(
        PlanError, key="dp_size", expected=f"at most {MAX_DP_SIZE}", mistake="plan_value"
    ):
        split_train_data_by_dp_raw({"tokens": [[1], [2]]}, dp_size, balance_data=balance_data)


def test_the_largest_dp_size_plans_a_small_batch() -> None:
    plan = Plan.build([3, 1, 2], MAX_DP_SIZE, balance_data=False)
    assert [rows.tolist() for rows in plan.partitions[:4]] == [[0], [1], [2], []]
    assert sum(len(rows) for rows in plan.partitions) == 3
    with raises_facts(PlanError, key="dp_size", expected="at least 65536 samples", got="3"):
        Plan.build([3, 1, 2], MAX_DP_SIZE, balance_data=True)


def test_the_constructors_are_build() -> None:
    lengths = [5, 1, 4, 2, 3, 6]
    assert Plan.strided(lengths, 3) == Plan.build(lengths, 3, balance_data=False)
    assert Plan.balanced(lengths, 3) == Plan.build(lengths, 3, balance_data=True)
