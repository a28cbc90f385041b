"""A stored batch's reference read like any input: damage is a typed error naming the member.

What the JSON shows wrong, :meth:`StoredBatchRef.from_json` refuses; what it cannot (a sample
count and an index size changed together, other plan bounds), the take finds in the stored
index, which holds the digest of the reference the put returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import (
    ArrowSplitError,
    ColumnSpec,
    NotARolloutBatchError,
    RolloutBatch,
    shard_for_rank,
)
from arrow_split.stores import MemoryStore, StoredBatchRef, put_batch, take_rank
from arrow_split.testing import assert_shards_equal
from tests.error_facts import raises_facts

Edit = Callable[[dict[str, Any]], object]


DATA = {
    "tokens": [[1, 2, 3], [4], [5, 6]],
    "rewards": [1.0, 2.0, 3.0],
    "metadata": [{"a": 1}, None, {"a": 1}],  # pickles, each distinct one once: a dictionary
}
BATCH = RolloutBatch.from_train_data(
    DATA, specs=[ColumnSpec("metadata", "per_sample_object", codec="pickle")]
)


def _put() -> tuple[MemoryStore, StoredBatchRef]:
    store = MemoryStore()
    return store, put_batch(store, BATCH, BATCH.make_plan(2, balance_data=False), step=0)


def _without_plan(members: dict[str, Any], num_samples: int) -> None:
    """The sample count changed, with an index size and no plan that fit it."""
    members.update(num_samples=num_samples, plan=None)
    members["index"][1] = 16 + 16 * num_samples


@pytest.mark.parametrize(
    ("edit", "member"),
    [
        (lambda members: members["columns"][0].update(children=[]), "columns"),
        (lambda members: members["columns"][0].update(buffers=[]), "columns"),
        (lambda members: members["columns"][1]["buffers"].append(None), "columns"),
        (lambda members: members["columns"][1]["buffers"][1].__setitem__(1, -8), "columns"),
        (lambda members: members["columns"][0].update(entries=-3), "columns"),
        (lambda members: members["columns"][0].update(entries=2), "columns"),  # no dictionary
        (lambda members: members["columns"].pop(), "columns"),
        (lambda members: _without_plan(members, -1), "num_samples"),
        (lambda members: _without_plan(members, 2**33), "columns"),  # buffers of 3 rows
        (lambda members: members["plan"]["bounds"].__setitem__(1, 2**64), "plan"),
        (lambda members: members["plan"].update(bounds=[0, 2, 1, 3]), "plan"),
        (lambda members: members["plan"].update(dp_size=0), "plan"),
        (lambda members: members["plan"].update(method="random"), "plan"),
        (lambda members: members["plan"].pop("bounds"), "plan"),
        (lambda members: members.update(step=-5), "step"),
        (lambda members: members.update(schema="!!!!"), "schema"),
        (lambda members: members["index"].__setitem__(1, 0), "index"),
        (lambda members: members["index"].__setitem__(0, "elsewhere/index"), "prefix"),
    ],
)
def test_a_damaged_reference_is_refused_naming_the_member(edit: Edit, member: str) -> None:
    _, ref = _put()
    members = json.loads(ref.to_json())
    edit(members)
    with raises_facts(NotARolloutBatchError, key=member, mistake="not_a_batch"):
        StoredBatchRef.from_json(json.dumps(members))


@pytest.mark.parametrize(("depth", "member"), [(400, "columns"), (100_000, "ref")])
def test_columns_nested_deep_are_refused(depth: int, member: str) -> None:
    _, ref = _put()
    nested = '{"buffers":[],"entries":0,"children":[' * depth + "]}" * depth
    text = ref.to_json().replace('"columns":[', f'"columns":[{nested},')
    with raises_facts(NotARolloutBatchError, key=member):  # not a RecursionError
        StoredBatchRef.from_json(text)


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "null", "[]", "1e999", ""])
def test_text_that_is_no_json_object_is_refused_as_the_reference(text: str) -> None:
    with raises_facts(NotARolloutBatchError, key="ref"):
        StoredBatchRef.from_json(text)


@pytest.mark.parametrize(
    "edit",
    [
        lambda members: _without_plan(members, 0),  # fits: no rows, an index of its header
        lambda members: _without_plan(members, 2),
        lambda members: members["plan"].update(bounds=[0, 1, 3]),  # the put's are [0, 2, 3]
        lambda members: members["plan"].update(fingerprint="0" * 16),
        lambda members: members.update(step=1),
    ],
)
def test_damage_the_json_cannot_show_is_found_by_the_take(edit: Edit) -> None:
    store, ref = _put()
    members = json.loads(ref.to_json())
    edit(members)
    damaged = StoredBatchRef.from_json(json.dumps(members))
    for rank in range(2):
        with raises_facts(NotARolloutBatchError, key="ref", dp_rank=rank, step=damaged.step):
            take_rank(store, damaged, rank, 2, balance_data=False, resplit=True)
    assert take_rank(store, ref, 1, 2).partition.tolist() == [1]  # the put's own: taken


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=4,
)


def _places(value: object, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in a JSON tree (the root's is empty)."""
    if isinstance(value, dict):
        return [path, *(p for k, v in value.items() for p in _places(v, (*path, k)))]
    if isinstance(value, list):
        return [path, *(p for i, v in enumerate(value) for p in _places(v, (*path, i)))]
    return [path]


@given(st.data())
def test_any_value_replaced_is_refused_typed_or_changes_nothing(data: st.DataObject) -> None:
    store, ref = _put()
    members = json.loads(ref.to_json())
    path = data.draw(st.sampled_from(_places(members)[1:]))
    parent = members
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = data.draw(JSON_VALUES)
    try:
        damaged = StoredBatchRef.from_json(json.dumps(members))
    except NotARolloutBatchError:
        return
    for rank in range(2):
        try:
            shard = take_rank(store, damaged, rank, 2, balance_data=False, resplit=True)
        except ArrowSplitError:
            continue
        assert_shards_equal(shard, shard_for_rank(BATCH, rank, 2, balance_data=False))
