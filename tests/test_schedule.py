"""Tests of arrow_split._schedule: equality with the reference, invariants, pinned cases, errors."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from arrow_split import (
    OptionTypeError,
    Plan,
    PlanMismatchError,
    RankSchedule,
    RolloutBatch,
    Schedule,
    ScheduleConfig,
    karmarkar_karp,
    plan_schedule,
    schedule_for_rank,
    shard_for_rank,
    split,
    take,
)
from arrow_split.compat.miles._convert import miles_schedule_fields
from arrow_split.errors import PlanError, PlanTypeError
from tests.error_facts import raises_facts
from tests.reference_schedule import reference_karmarkar_karp, reference_schedule

Case = tuple[list[int], list[int], int, ScheduleConfig, list[Any] | None]


# --- strategies -----------------------------------------------------------------------------


@st.composite
def _rollout_ids(draw: st.DrawFn, sizes: list[int]) -> list[int]:
    """One id per sample: rollouts of the given sizes, relabelled, maybe interleaved."""
    labels = draw(
        st.lists(
            st.integers(-(2**40), 2**40), min_size=len(sizes), max_size=len(sizes), unique=True
        )
    )
    ids = [labels[r] for r, size in enumerate(sizes) for _ in range(size)]
    return draw(st.permutations(ids)) if draw(st.booleans()) else ids


@st.composite
def _weights(draw: st.DrawFn, n: int) -> list[Any]:
    if draw(st.booleans()):
        return draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    values = st.floats(0, 1e6, allow_nan=False, allow_infinity=False)
    return draw(st.lists(values | st.sampled_from([0.0, 0.1, 2.5]), min_size=n, max_size=n))


@st.composite
def schedule_cases(draw: st.DrawFn) -> Case:
    """Inputs of every kind: both packings, both distributions, partial steps, ties, VPP."""
    dp_size = draw(st.integers(1, 16))
    dynamic = draw(st.booleans())
    vpp = draw(st.sampled_from([None, 1, 2])) if dp_size <= 4 else None
    group = draw(st.integers(1, 3)) if vpp == 2 else None
    align = dp_size * (group or 1)
    steps = draw(st.integers(1, 2))
    micro_batch_size = draw(st.integers(1, 3))
    if dynamic or draw(st.integers(0, 4)) == 0:
        gbs = draw(st.integers(1, 2 * align + 2))
        sizes = draw(st.lists(st.integers(1, 3), min_size=gbs * steps, max_size=gbs * steps))
        sizes += draw(st.lists(st.integers(1, 3), max_size=gbs))
    else:  # fixed chunks that align: one or two samples per rollout
        per = draw(st.integers(1, 2))
        gbs = max(1, align * micro_batch_size * draw(st.integers(1, 2)) // per)
        sizes = [per] * (gbs * steps)
    n = sum(sizes)
    low = draw(st.sampled_from([0, 1, 1, 1]))
    lengths = draw(
        st.lists(st.integers(low, draw(st.sampled_from([1, 3, 60, 4000]))), min_size=n, max_size=n)
    )
    flops = dynamic and draw(st.integers(0, 3)) == 0
    config = ScheduleConfig(
        global_batch_size=gbs,
        micro_batch_size=micro_batch_size,
        use_dynamic_batch_size=dynamic,
        max_tokens_per_gpu=draw(st.sampled_from([1, 8, 100, 2000, 10**6])) if dynamic else None,
        cp_size=draw(st.sampled_from([1, 1, 2])),
        vpp_size=vpp,
        microbatch_group_size_per_vp_stage=group,
        balance_data=draw(st.booleans()),
        balance_by_flops=flops,
        allow_partial_train_step=draw(st.booleans()),
    )
    weights = draw(_weights(n)) if flops else None
    return lengths, draw(_rollout_ids(sizes)), dp_size, config, weights


# --- helpers --------------------------------------------------------------------------------


def to_miles_fields(rank: RankSchedule) -> dict[str, Any]:
    """What miles puts in a rank's shard: its rows as ``partition``, then the schedule's keys."""
    return {"partition": rank.rows.tolist(), **miles_schedule_fields(rank)}


def _as_miles(schedule: Schedule) -> tuple[Any, ...]:
    fields = [to_miles_fields(rank) for rank in schedule.ranks]
    return (
        [f["partition"] for f in fields],
        [f["micro_batch_indices"] for f in fields],
        fields[0]["num_microbatches"],
        fields[0]["num_rollouts"],
    )


def _plan_or_none(case: Case) -> Schedule | None:
    lengths, ids, dp_size, config, weights = case
    try:
        return plan_schedule(lengths, ids, dp_size, config, weights=weights)
    except PlanError:
        return None


def _micro_batches(rank: RankSchedule) -> list[np.ndarray]:
    offsets = rank.micro_batch_offsets
    return [rank.rows[a:b] for a, b in pairwise(offsets.tolist())]


def _step_of_rows(schedule: Schedule) -> dict[int, int]:
    """Map every scheduled row to its step, walking each rank's micro-batches step by step."""
    step_of: dict[int, int] = {}
    for rank in schedule.ranks:
        batches = iter(_micro_batches(rank))
        for step, count in enumerate(schedule.num_microbatches):
            for _ in range(count):
                step_of.update(dict.fromkeys(next(batches).tolist(), step))
    return step_of


# --- equality with the reference ------------------------------------------------------------


@given(schedule_cases())
@settings(max_examples=150)
def test_schedule_equals_the_reference(case: Case) -> None:
    lengths, ids, dp_size, config, weights = case
    try:
        expected = reference_schedule(lengths, ids, dp_size, config, weights)
    except ValueError:
        with pytest.raises(PlanError):
            plan_schedule(lengths, ids, dp_size, config, weights=weights)
        return
    if any(not batch for rank in expected[1] for batch in rank):
        # The reference leaves an empty micro-batch (zero-token samples split apart): refused.
        with pytest.raises(PlanError):
            plan_schedule(lengths, ids, dp_size, config, weights=weights)
        return
    assert _as_miles(plan_schedule(lengths, ids, dp_size, config, weights=weights)) == expected


@st.composite
def kk_cases(draw: st.DrawFn) -> tuple[list[Any], int, bool]:
    k = draw(st.integers(1, 12))
    equal_size = draw(st.booleans())
    top = draw(st.sampled_from([0, 2, 9, 10**6]))
    count = k * draw(st.integers(1, 6)) if equal_size else draw(st.integers(k, 6 * k))
    values: list[Any] = draw(st.lists(st.integers(0, top), min_size=count, max_size=count))
    if draw(st.booleans()):
        values = [v * 0.3 + draw(st.sampled_from([0.0, 0.1, 0.7])) for v in values]
    return values, k, equal_size


@given(kk_cases())
@example(([0, 0, 0, 0], 2, False))
@example(([5, 5, 5, 5, 5, 5], 3, True))
def test_karmarkar_karp_equals_the_reference(case: tuple[list[Any], int, bool]) -> None:
    values, k, equal_size = case
    parts = karmarkar_karp(values, k, equal_size=equal_size)
    expected = reference_karmarkar_karp(values, k, equal_size)
    assert [part.tolist() for part in parts] == expected
    assert all(part.dtype == np.int64 for part in parts)
    if equal_size:
        assert {part.size for part in parts} == {len(values) // k}


# --- invariants -----------------------------------------------------------------------------


@given(schedule_cases())
def test_every_kept_row_is_in_exactly_one_micro_batch(case: Case) -> None:
    schedule = _plan_or_none(case)
    if schedule is None:
        return
    lengths, ids, _, _, _ = case
    rows = np.concatenate([rank.rows for rank in schedule.ranks] + [schedule.dropped_rows])
    np.testing.assert_array_equal(np.sort(rows), np.arange(len(lengths)))
    first_seen = list(dict.fromkeys(ids))
    kept = set(first_seen[: sum(schedule.num_rollouts)])
    assert schedule.dropped_rows.tolist() == [row for row, r in enumerate(ids) if r not in kept]
    for rank in schedule.ranks:
        assert rank.micro_batch_offsets[0] == 0
        assert rank.micro_batch_offsets[-1] == rank.rows.size
        assert np.all(np.diff(rank.micro_batch_offsets) > 0)  # no empty micro-batch
        assert rank.micro_batch_offsets.size == sum(schedule.num_microbatches) + 1


@given(schedule_cases())
def test_counts_are_aligned_and_rollouts_stay_in_one_step(case: Case) -> None:
    schedule = _plan_or_none(case)
    if schedule is None:
        return
    _, ids, _, config, _ = case
    assert len(schedule.num_microbatches) == len(schedule.num_rollouts)
    assert all(count % config.micro_batch_group == 0 for count in schedule.num_microbatches)
    assert all(count == config.global_batch_size for count in schedule.num_rollouts[:-1])
    step_of = _step_of_rows(schedule)
    steps_of_rollout: dict[int, set[int]] = {}
    for row, step in step_of.items():
        steps_of_rollout.setdefault(ids[row], set()).add(step)
    assert all(len(steps) == 1 for steps in steps_of_rollout.values())


@given(schedule_cases())
def test_token_budget_holds_unless_one_sample_exceeds_it(case: Case) -> None:
    schedule = _plan_or_none(case)
    lengths, _, _, config, _ = case
    if schedule is None or config.balance_by_flops or not config.use_dynamic_batch_size:
        return
    budget = config.max_tokens_per_micro_batch
    tokens = np.asarray(lengths, dtype=np.int64)
    for rank in schedule.ranks:
        for batch in _micro_batches(rank):
            assert tokens[batch].sum() <= budget or batch.size == 1


@given(schedule_cases())
@settings(max_examples=30)
def test_plans_are_deterministic_and_fingerprinted(case: Case) -> None:
    lengths, ids, dp_size, config, weights = case
    first = _plan_or_none(case)
    if first is None:
        return
    again = plan_schedule(np.asarray(lengths), np.asarray(ids), dp_size, config, weights=weights)
    assert _as_miles(first) == _as_miles(again)
    assert first.fingerprint() == again.fingerprint()
    assert len(first.fingerprint()) == 16
    int(first.fingerprint(), 16)
    other = replace(config, balance_data=not config.balance_data)
    assert _digest_or_none(lengths, ids, dp_size, other, weights) != first.fingerprint()


def _digest_or_none(
    lengths: Any, ids: Any, dp_size: int, config: ScheduleConfig, weights: Any
) -> str | None:
    try:
        return plan_schedule(lengths, ids, dp_size, config, weights=weights).fingerprint()
    except PlanError:
        return None


# --- pinned examples, worked out by hand ----------------------------------------------------


def _fields(rank: RankSchedule) -> tuple[list[int], list[int]]:
    return rank.rows.tolist(), rank.micro_batch_offsets.tolist()


def test_fixed_chunks_strided_16_samples_over_4_ranks() -> None:
    # 8 chunks of 2 samples; chunk j goes to rank j % 4.
    config = ScheduleConfig(global_batch_size=16, micro_batch_size=2)
    schedule = plan_schedule([10] * 16, list(range(16)), 4, config)
    assert [_fields(rank) for rank in schedule.ranks] == [
        ([0, 1, 8, 9], [0, 2, 4]),
        ([2, 3, 10, 11], [0, 2, 4]),
        ([4, 5, 12, 13], [0, 2, 4]),
        ([6, 7, 14, 15], [0, 2, 4]),
    ]
    assert schedule.num_microbatches == (2,)
    assert schedule.num_rollouts == (16,)
    assert to_miles_fields(schedule.ranks[1]) == {
        "partition": [2, 3, 10, 11],
        "micro_batch_indices": [[0, 1], [2, 3]],
        "num_microbatches": [2],
        "num_rollouts": [16],
    }


# First-fit decreasing under 10 tokens: [0] (15 tokens, alone), [1, 2, 3], [4, 5, 6], [7].
OVERSIZED = [15, 3, 3, 3, 3, 3, 3, 3]
DYNAMIC = ScheduleConfig(global_batch_size=8, use_dynamic_batch_size=True, max_tokens_per_gpu=10)


def test_first_fit_decreasing_strided() -> None:
    schedule = plan_schedule(OVERSIZED, list(range(8)), 2, DYNAMIC)
    assert _fields(schedule.ranks[0]) == ([0, 4, 5, 6], [0, 1, 4])
    assert _fields(schedule.ranks[1]) == ([1, 2, 3, 7], [0, 3, 4])
    assert schedule.num_microbatches == (2,)


def test_first_fit_decreasing_balanced_by_tokens() -> None:
    # Micro-batch sums 15, 9, 9, 3. KK: states {9 | 3} and {15 | 9} (ties on spread 6, the
    # larger first set is popped first), merged into {15+3, 9+9}; on equal sums and counts the
    # set whose first micro-batch is later (2) sorts first: rank 0 gets micro-batches 1 and 2.
    schedule = plan_schedule(OVERSIZED, list(range(8)), 2, replace(DYNAMIC, balance_data=True))
    assert _fields(schedule.ranks[0]) == ([1, 2, 3, 4, 5, 6], [0, 3, 6])
    assert _fields(schedule.ranks[1]) == ([0, 7], [0, 1, 2])


def test_splitting_reaches_the_rank_count() -> None:
    # One bin [3, 2, 1, 0] (10 tokens) split into [3, 0] + [2, 1], then the later of the two
    # 5-token bins, [2, 1], into [2] + [1], then [3, 0] into [3] + [0].
    config = ScheduleConfig(
        global_batch_size=4, use_dynamic_batch_size=True, max_tokens_per_gpu=100
    )
    schedule = plan_schedule([1, 2, 3, 4], [0, 1, 2, 3], 4, config)
    assert [rank.rows.tolist() for rank in schedule.ranks] == [[3], [2], [1], [0]]


def test_virtual_pipeline_aligns_to_the_micro_batch_group() -> None:
    config = ScheduleConfig(
        global_batch_size=16,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=8,
        vpp_size=2,
        microbatch_group_size_per_vp_stage=3,
    )
    schedule = plan_schedule([4] * 32, list(range(32)), 2, config)
    # 16 samples of 4 tokens per step pack into 8 micro-batches; 8 -> 12 (a multiple of 2 * 3).
    assert schedule.num_microbatches == (6, 6)


def test_rollouts_stay_together_and_trailing_ones_are_dropped() -> None:
    ids = [0, 0, 1, 2, 2, 3, 4, 4]
    config = ScheduleConfig(global_batch_size=2, use_dynamic_batch_size=True, max_tokens_per_gpu=12)
    schedule = plan_schedule([3] * 8, ids, 1, config)
    assert schedule.num_rollouts == (2, 2)
    assert schedule.dropped_rows.tolist() == [6, 7]
    assert _fields(schedule.ranks[0]) == ([0, 1, 2, 3, 4, 5], [0, 3, 6])
    partial = plan_schedule([3] * 8, ids, 1, replace(config, allow_partial_train_step=True))
    assert partial.num_rollouts == (2, 2, 1)
    assert partial.dropped_rows.tolist() == []
    assert _fields(partial.ranks[0]) == ([0, 1, 2, 3, 4, 5, 6, 7], [0, 3, 6, 8])


def test_interleaved_rollouts_keep_their_first_appearance_order() -> None:
    config = ScheduleConfig(global_batch_size=1, micro_batch_size=4)
    schedule = plan_schedule([1] * 5, [7, 3, 7, 3, 3], 1, config)
    assert _fields(schedule.ranks[0]) == ([0, 2, 1, 3, 4], [0, 2, 5])
    assert schedule.num_microbatches == (1, 1)


def test_a_partial_step_with_fewer_samples_than_ranks_is_dropped() -> None:
    config = ScheduleConfig(
        global_batch_size=2,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=12,
        allow_partial_train_step=True,
    )
    schedule = plan_schedule([3] * 5, [0, 0, 1, 1, 2], 2, config)
    assert schedule.num_rollouts == (2,)
    assert schedule.dropped_rows.tolist() == [4]


def test_partial_steps_need_dynamic_batch_size() -> None:
    config = ScheduleConfig(global_batch_size=2, micro_batch_size=1, allow_partial_train_step=True)
    assert plan_schedule([3] * 3, [0, 1, 2], 1, config).num_rollouts == (2,)


def test_balance_by_flops_packs_by_weight() -> None:
    # 4 samples, 100 tokens, budget 60: 2 micro-batches by unequal KK on the weights
    # [1, 2, 3, 10]: {10} and {1, 2, 3}; then one micro-batch per rank, heavier first.
    config = ScheduleConfig(
        global_batch_size=4,
        use_dynamic_batch_size=True,
        max_tokens_per_gpu=60,
        balance_by_flops=True,
    )
    schedule = plan_schedule([25] * 4, [0, 1, 2, 3], 2, config, weights=[1, 2, 3, 10])
    assert [rank.rows.tolist() for rank in schedule.ranks] == [[3], [0, 1, 2]]


def test_schedule_for_rank_is_one_rank_of_the_schedule() -> None:
    config = replace(DYNAMIC, balance_data=True)
    rank = schedule_for_rank(OVERSIZED, list(range(8)), 2, 1, config)
    assert _fields(rank) == ([0, 7], [0, 1, 2])
    assert rank.dp_rank == 1
    assert not rank.rows.flags.writeable


def test_fingerprint_reads_the_inputs_not_their_container() -> None:
    config = replace(DYNAMIC, balance_by_flops=True)
    digest = plan_schedule(OVERSIZED, list(range(8)), 2, config, weights=[1] * 8).fingerprint()
    same = plan_schedule(
        np.asarray(OVERSIZED, dtype=np.int32), np.arange(8), 2, config, weights=np.ones(8, int)
    ).fingerprint()
    assert digest == same
    floats = plan_schedule(OVERSIZED, list(range(8)), 2, config, weights=[1.0] * 8).fingerprint()
    assert floats != digest
    relabelled = plan_schedule(OVERSIZED, list(range(1, 9)), 2, config, weights=[1] * 8)
    assert relabelled.fingerprint() != digest


# --- a schedule is a plan -------------------------------------------------------------------


def _batch(lengths: list[int], rollout_ids: list[int]) -> RolloutBatch:
    return RolloutBatch.from_train_data(
        {"tokens": [list(range(n)) for n in lengths], "rollout_ids": rollout_ids}
    )


def test_a_schedule_is_a_plan_of_its_ranks_rows() -> None:
    schedule = plan_schedule(OVERSIZED, list(range(8)), 2, replace(DYNAMIC, balance_data=True))
    plan = schedule.plan
    assert isinstance(plan, Plan)
    assert (plan.method, plan.dp_size, plan.num_samples) == ("balanced", 2, 8)
    assert schedule.plan.key == plan.key == schedule.ranks[1].plan_key
    assert schedule.fingerprint() == plan.fingerprint == schedule.input_digest
    for rank in schedule.ranks:
        assert rank.rows is plan.partitions[rank.dp_rank]
    strided = plan_schedule(OVERSIZED, list(range(8)), 2, DYNAMIC).plan
    assert strided.method == "strided"
    assert strided.key != plan.key  # the config is part of the fingerprint


def test_scheduled_shards_carry_the_plan_key() -> None:
    ids = [0, 0, 1, 2, 2, 3, 4, 5]
    batch = _batch(OVERSIZED, ids)
    config = replace(DYNAMIC, global_batch_size=6)
    schedule = plan_schedule(batch.total_lengths, ids, 2, config)
    for rank in schedule.ranks:
        again = schedule_for_rank(batch.total_lengths, ids, 2, rank.dp_rank, config)
        assert again.plan_key == schedule.plan.key
        for shard in (
            again.take(batch),
            again.take(batch.with_plan(schedule.plan)),
            take(batch, schedule.plan, rank.dp_rank),
            split(batch, schedule.plan)[rank.dp_rank],
            shard_for_rank(batch.with_plan(schedule.plan), rank.dp_rank, 2, balance_data=None),
        ):
            assert shard.plan_key == schedule.plan.key
            assert shard.dp_rank == rank.dp_rank
            assert shard.partition.tolist() == rank.rows.tolist()


@pytest.mark.parametrize(
    ("dp_size", "config", "lengths"),
    [
        (2, replace(DYNAMIC, max_tokens_per_gpu=12), OVERSIZED),  # another config
        (4, DYNAMIC, OVERSIZED),  # another dp_size
        (2, DYNAMIC, [15, 3, 3, 3, 3, 3, 3, 4]),  # another batch
    ],
)
def test_a_rank_that_asks_for_another_schedule_gets_a_plan_mismatch(
    dp_size: int, config: ScheduleConfig, lengths: list[int]
) -> None:
    driver = plan_schedule(OVERSIZED, list(range(8)), 2, DYNAMIC)
    batch = _batch(OVERSIZED, list(range(8))).with_plan(driver.plan)
    rank = schedule_for_rank(lengths, list(range(8)), dp_size, 1, config)
    assert rank.plan_key != driver.plan.key
    with raises_facts(PlanMismatchError, key="schedule", got=rank.plan_key.fingerprint):
        rank.take(batch)


def test_a_schedule_of_another_batch_size_is_a_plan_mismatch() -> None:
    rank = schedule_for_rank(OVERSIZED, list(range(8)), 2, 0, DYNAMIC)
    with raises_facts(PlanMismatchError, key="schedule", got=rank.plan_key.fingerprint):
        rank.take(_batch([*OVERSIZED, 3], list(range(9))))


def test_a_rank_asking_for_another_dp_size_of_a_scheduled_batch_gets_a_plan_mismatch() -> None:
    schedule = plan_schedule(OVERSIZED, list(range(8)), 2, DYNAMIC)
    batch = _batch(OVERSIZED, list(range(8))).with_plan(schedule.plan)
    with raises_facts(PlanMismatchError, key="dp_size", expected="2", got="4"):
        shard_for_rank(batch, 0, 4, balance_data=None)


# --- errors ---------------------------------------------------------------------------------

STATIC = ScheduleConfig(global_batch_size=4)


@pytest.mark.parametrize(
    ("fields", "error", "key"),
    [
        ({"global_batch_size": 0}, PlanError, "global_batch_size"),
        ({"global_batch_size": 2.0}, PlanTypeError, "global_batch_size"),
        ({"global_batch_size": True}, PlanTypeError, "global_batch_size"),
        ({"global_batch_size": 1, "micro_batch_size": -1}, PlanError, "micro_batch_size"),
        ({"global_batch_size": 1, "cp_size": 0}, PlanError, "cp_size"),
        ({"global_batch_size": 1, "vpp_size": 0}, PlanError, "vpp_size"),
        (
            {"global_batch_size": 1, "microbatch_group_size_per_vp_stage": 0},
            PlanError,
            "microbatch_group_size_per_vp_stage",
        ),
        ({"global_batch_size": 1, "max_tokens_per_gpu": 0}, PlanError, "max_tokens_per_gpu"),
        ({"global_batch_size": 1, "balance_data": 1}, OptionTypeError, "balance_data"),
        (
            {"global_batch_size": 1, "use_dynamic_batch_size": True},
            PlanError,
            "use_dynamic_batch_size",
        ),
        ({"global_batch_size": 1, "balance_by_flops": True}, PlanError, "balance_by_flops"),
        ({"global_batch_size": 1, "vpp_size": 2}, PlanError, "vpp_size"),
    ],
)
def test_config_errors(fields: dict[str, Any], error: type[Exception], key: str) -> None:
    with raises_facts(error, key=key) as caught:
        ScheduleConfig(**fields)
    assert type(caught.value) is error


FLOPS = ScheduleConfig(
    global_batch_size=2, use_dynamic_batch_size=True, max_tokens_per_gpu=10, balance_by_flops=True
)


@pytest.mark.parametrize(
    ("arguments", "error", "facts"),
    [
        (([1, 2], [0, 1], 0, STATIC), PlanError, {"key": "dp_size", "got": "0"}),
        (([1, 2], [0, 1], 2.0, STATIC), PlanTypeError, {"key": "dp_size"}),
        (([1, 2], [0, 1], 1, {"global_batch_size": 1}), PlanTypeError, {"key": "config"}),
        (([1.5, 2], [0, 1], 1, STATIC), PlanTypeError, {"key": "total_lengths"}),
        (([[1, 2]], [0, 1], 1, STATIC), PlanError, {"key": "total_lengths", "got": "shape (1, 2)"}),
        (([[1, 2], [3]], [0], 1, STATIC), PlanError, {"key": "total_lengths"}),
        (
            ([1, -2], [0, 1], 1, STATIC),
            PlanError,
            {"key": "total_lengths", "sample": 1, "got": "-2"},
        ),
        (
            ([2**62, 2**62], [0, 1], 1, STATIC),
            PlanError,
            {"key": "total_lengths", "got": str(2**63)},
        ),
        ((np.array([2**63], np.uint64), [0], 1, STATIC), PlanError, {"key": "total_lengths"}),
        (([1, 2], [0], 1, STATIC), PlanError, {"key": "rollout_ids"}),
        (([1, 2], ["a", "b"], 1, STATIC), PlanTypeError, {"key": "rollout_ids"}),
        (([1, 2, 3], [0, 1, 2], 1, STATIC), PlanError, {"key": "global_batch_size", "got": "4"}),
        (
            ([1] * 4, [0, 0, 1, 1], 3, replace(STATIC, global_batch_size=1)),
            PlanError,
            {"key": "dp_size", "got": "3"},  # step 0 has 2 samples
        ),
        (
            ([1] * 6, list(range(6)), 2, ScheduleConfig(global_batch_size=6, micro_batch_size=2)),
            PlanError,
            {"key": "micro_batch_size", "got": "2"},  # 3 micro-batches for 2 ranks
        ),
    ],
)
def test_input_errors(
    arguments: tuple[Any, ...], error: type[Exception], facts: dict[str, Any]
) -> None:
    with raises_facts(error, **facts) as caught:
        plan_schedule(*arguments)
    assert type(caught.value) is error


def test_too_few_samples_for_the_micro_batch_group() -> None:
    config = replace(DYNAMIC, global_batch_size=3, vpp_size=2, microbatch_group_size_per_vp_stage=2)
    with raises_facts(PlanError, key="global_batch_size", expected="at least 4 samples"):
        plan_schedule([1, 1, 1], [0, 1, 2], 2, config)


def test_packing_that_cannot_be_split_to_the_rank_count() -> None:
    # Three 10-token samples fill three micro-batches; two ranks need four.
    config = replace(DYNAMIC, global_batch_size=3)
    with raises_facts(PlanError, key="global_batch_size", expected="4 micro-batches"):
        plan_schedule([10, 10, 10], [0, 1, 2], 2, config)


def test_splitting_zero_token_samples_would_leave_an_empty_micro_batch() -> None:
    config = replace(DYNAMIC, global_batch_size=2)
    with raises_facts(PlanError, key="total_lengths", expected="2 micro-batches"):
        plan_schedule([0, 0], [0, 1], 2, config)


@pytest.mark.parametrize(
    ("weights", "config", "error", "facts"),
    [
        (None, FLOPS, PlanError, {"key": "balance_by_flops"}),  # needs `weights`
        ([1, 2], DYNAMIC, PlanError, {"key": "balance_by_flops"}),  # weights without it
        ([1], FLOPS, PlanError, {"key": "weights"}),
        (["x", "y"], FLOPS, PlanTypeError, {"key": "weights"}),
        ([1.0, float("nan")], FLOPS, PlanError, {"key": "weights", "sample": 1, "got": "nan"}),
        ([1, -1], FLOPS, PlanError, {"key": "weights", "sample": 1, "got": "-1"}),
    ],
)
def test_weight_errors(
    weights: Any, config: ScheduleConfig, error: type[Exception], facts: dict[str, Any]
) -> None:
    with raises_facts(error, **facts) as caught:
        plan_schedule([1, 2], [0, 1], 1, config, weights=weights)
    assert type(caught.value) is error


@pytest.mark.parametrize(
    ("dp_rank", "error", "got"),
    [(2, PlanError, "2"), (-1, PlanError, "-1"), (1.0, PlanTypeError, "1.0 of type float")],
)
def test_dp_rank_errors(dp_rank: Any, error: type[Exception], got: str) -> None:
    with raises_facts(error, key="dp_rank", got=got) as caught:
        schedule_for_rank(OVERSIZED, list(range(8)), 2, dp_rank, DYNAMIC)
    assert type(caught.value) is error


@pytest.mark.parametrize(
    ("weights", "k", "equal_size", "error", "facts"),
    [
        ([1, 2], 0, False, PlanError, {"key": "k", "got": "0"}),
        ([1, 2], 2.0, False, PlanTypeError, {"key": "k", "got": "2.0 of type float"}),
        ([1, 2], 3, False, PlanError, {"key": "k", "expected": "<= 2", "got": "3"}),
        ([1, 2, 3], 2, True, PlanError, {"key": "equal_size"}),
        ([1, -2], 1, False, PlanError, {"key": "weights", "sample": 1}),
    ],
)
def test_karmarkar_karp_errors(
    weights: list[int], k: Any, equal_size: bool, error: type[Exception], facts: dict[str, Any]
) -> None:
    with raises_facts(error, **facts) as caught:
        karmarkar_karp(weights, k, equal_size=equal_size)
    assert type(caught.value) is error
