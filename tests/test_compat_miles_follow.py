"""The miles drop-in follows miles as it moves: unknown keys carried, padding, reference types.

Keys from miles' open PRs reach the rank with an inferred spec and one warning per key; a strict
switch restores the error; the core stays strict. References take the installed miles' shape.
"""

from __future__ import annotations

import textwrap
import warnings
from argparse import Namespace
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from arrow_split import ColumnSpec, PlanError, RolloutBatch, SchemaError, UnknownKeyWarning
from arrow_split.compat import miles
from arrow_split.compat.miles import _handoff
from arrow_split.compat.miles import _install as _miles_install
from arrow_split.compat.miles import _keys as _miles_convert
from tests.error_facts import assert_facts, raises_facts
from tests.test_compat_miles import fake_miles, make_args, make_data  # noqa: F401

# Keys nobody declared, with values of the shapes miles' keys have.
NEW_KEYS: dict[str, Any] = {
    "draft_tokens": [[5, 6, 7, 8], [9, 10], [11, 12, 13]],
    "draft_positions": [[0, 2], [1], [0, 1, 2]],
    "draft_lengths": [2, 1, 3],
    "queue_version": [3, 3, 4],
    "loss_weights": [[0.5], [1.0, 0.25], [1.0]],
    "token_bonus": [[0.5], [-1.0, 2.0], [0.0]],
}
EXPECTED_KINDS = {
    "draft_tokens": ("per_token", pa.int64()),
    "draft_positions": ("per_token", pa.int64()),
    "draft_lengths": ("per_sample_scalar", pa.int64()),
    "queue_version": ("per_sample_scalar", pa.int64()),
    "loss_weights": ("per_token", pa.float32()),
    "token_bonus": ("per_token", pa.float32()),
}


@pytest.fixture(autouse=True)
def fresh_warnings() -> Iterator[None]:
    _miles_convert._WARNED.clear()
    yield
    _miles_convert._WARNED.clear()


def new_key_data() -> dict[str, Any]:
    return make_data([3, 4, 2], **NEW_KEYS)


def test_keys_miles_adds_next_reach_the_rank_with_one_warning_each() -> None:
    data = new_key_data()
    with pytest.warns(UnknownKeyWarning) as caught:
        shards = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)
    named = sorted(str(w.message).split("`")[1] for w in caught)
    assert named == sorted(NEW_KEYS)
    for shard in shards:
        for key, values in NEW_KEYS.items():
            assert shard[key] == [values[row] for row in shard["partition"]], key
    advantages = next(str(w.message) for w in caught if "`token_bonus`" in str(w.message))
    assert 'ColumnSpec("token_bonus", "per_token", pa.float32(), length="response")' in advantages
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per key: a second step warns no more
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=2)


def test_inferred_specs() -> None:
    data = {**new_key_data(), "judge": [{"a": 1}, None, "x"], "step_tag": 7}
    with pytest.warns(UnknownKeyWarning):
        specs = _miles_convert.infer_unknown_specs(data, [], strict_keys=False)
    by_name = {spec.name: spec for spec in specs}
    for key, (kind, value_type) in EXPECTED_KINDS.items():
        assert (by_name[key].kind, by_name[key].value_type, by_name[key].length) == (
            kind,
            value_type,
            None,
        )
    assert by_name["judge"].kind == "per_sample_object"
    assert (by_name["step_tag"].kind, by_name["step_tag"].global_shape) == ("batch_global", "int")
    shard = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1)[0]
    assert shard["judge"] == [{"a": 1}, None, "x"]
    assert shard["step_tag"] == 7


def test_a_declared_spec_wins_and_does_not_warn() -> None:
    spec = ColumnSpec("token_bonus", "per_token", pa.float32(), length="response")
    data = make_data([3, 4], token_bonus=[[0.5], [1.0, 2.0]])
    shard = miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1, specs=[spec])[0]
    assert shard["token_bonus"] == [[0.5], [1.0, 2.0]]


def test_strict_keys_and_the_core_refuse_unknown_keys() -> None:
    data = new_key_data()
    with pytest.raises(SchemaError) as caught:
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1, strict_keys=True)
    assert_facts(caught.value, {"key": "draft_tokens"})
    with pytest.raises(SchemaError) as caught:
        RolloutBatch.from_train_data(data)
    assert_facts(caught.value, {"key": "draft_tokens"})


def test_a_value_that_fits_no_shape_is_the_core_error() -> None:
    data = make_data([3, 4], odd={"not": "per sample"})
    with pytest.raises(SchemaError) as caught:
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1)
    assert_facts(caught.value, {"key": "odd"})


# --- padding to the DP size (miles #2694) ---------------------------------------------------------


@pytest.mark.parametrize("balance_data", [False, True])
def test_compat_pads_as_miles_2694(balance_data: bool) -> None:
    # miles' test: 7 samples of one group each, dp 2, pad_to_dp -> indices [0..6, -1], 4 per rank
    data = make_data([3, 5, 4, 6, 2, 7, 3], rollout_ids=list(range(7)))
    args = make_args(balance_data=balance_data)
    shards = miles.split_train_data_by_dp_raw(args, data, dp_size=2, pad_to_dp=True)
    assert [len(shard["tokens"]) for shard in shards] == [4, 4]
    rows = sorted(row for shard in shards for row in shard["partition"])
    assert rows == list(range(8))
    by_row = {
        row: (index, mask, padding)
        for shard in shards
        for row, index, mask, padding in zip(
            shard["partition"],
            shard["sample_indices"],
            shard["loss_masks"],
            shard["is_padding"],
            strict=True,
        )
    }
    assert [by_row[row][0] for row in range(8)] == [0, 1, 2, 3, 4, 5, 6, -1]
    assert by_row[7][1] == [0] * len(by_row[6][1])
    assert [by_row[row][2] for row in range(8)] == [False] * 7 + [True]
    with raises_facts(PlanError, key="dp_size", expected="a multiple of 2 samples", got="7"):
        miles.split_train_data_by_dp_raw(make_args(balance_data=True), data, dp_size=2)


def test_install_binds_pad_to_dp_and_strict_keys(fake_miles: Path) -> None:  # noqa: F811
    import miles.ray.rollout.train_data_conversion as conversion

    installation = miles.install(pad_to_dp=True, strict_keys=True)
    try:
        shards = conversion.split_train_data_by_dp_raw(
            make_args(balance_data=True), make_data([3, 4, 5]), dp_size=2
        )
        assert [len(shard["tokens"]) for shard in shards] == [2, 2]
        with raises_facts(SchemaError, key="score"):
            conversion.split_train_data_by_dp_raw(
                make_args(), make_data([3], score=[0.5]), dp_size=1
            )
    finally:
        installation.undo()


# --- the reference type of the installed miles (miles #2542) --------------------------------------

_STORE_INTERFACE = """
    class ObjectStoreGetResult:
        def __init__(self, value, release_fn):
            self.value = value

    class RayObjectStore:
        def put(self, value, value_spec=None):
            return value

        def get(self, ref):
            return ObjectStoreGetResult(ref, lambda value: None)
"""
_PYDANTIC_STORE = (
    _STORE_INTERFACE
    + """
    class _BaseStoreObjectRef:
        pass

    class _RayStoreObjectRef(_BaseStoreObjectRef):
        def __init__(self, *, payload):
            self.payload = payload
"""
)
_BOX_STORE = (
    _STORE_INTERFACE
    + """
    from miles.utils.ray_utils import Box
    StoreObjectRef = Box
"""
)
_RAY_UTILS = """
    class Box:
        def __init__(self, inner):
            self._inner = inner

        @property
        def inner(self):
            return self._inner
"""


@pytest.mark.parametrize(
    ("store", "expected"), [(_PYDANTIC_STORE, "payload"), (_BOX_STORE, "inner")]
)
def test_install_returns_the_installed_miles_reference_type(
    fake_miles: Path,  # noqa: F811
    store: str,
    expected: str,
) -> None:
    (fake_miles / "miles/utils/object_store.py").write_text(textwrap.dedent(store))
    (fake_miles / "miles/utils/ray_utils.py").write_text(textwrap.dedent(_RAY_UTILS))
    before = _miles_install.REF_FACTORY
    installation = miles.install()
    try:
        ref = _handoff.wrap_ref("a ray reference")
        assert getattr(ref, expected) == "a ray reference"
        assert _handoff.unwrap(ref) == "a ray reference"
        name = "_RayStoreObjectRef(payload=...)" if expected == "payload" else "ArrowRef"
        assert installation.ref_type == name
        if expected == "payload":
            from miles.utils.object_store import _RayStoreObjectRef

            assert isinstance(ref, _RayStoreObjectRef)
    finally:
        installation.undo()
    assert _miles_install.REF_FACTORY is before


def test_both_reference_shapes_are_read() -> None:
    box = miles.ArrowRef("r")
    pydantic_like = Namespace(payload="r")
    assert _handoff.unwrap(box) == _handoff.unwrap(pydantic_like) == "r"
    assert _handoff.unwrap("r") == "r"


# --- miles' newer keys: known columns, no specs needed ------------------------------------------


def newer_keys_data(lengths: list[int]) -> dict[str, Any]:
    data = make_data(lengths)
    responses = data["response_lengths"]
    data.update(
        teacher_tokens=[list(range(n + 2)) for n in lengths],
        teacher_response_lengths=[r + 2 for r in responses],
        teacher_gather_positions=[list(range(1, r + 1)) for r in responses],
        non_positive_advantage_spans=[[[0, 1], [2, r]] if r > 2 else [] for r in responses],
        media_refs=[{"image": [f"img{i}.png"]} if i % 2 else None for i in range(len(lengths))],
        start_weight_version=[i if i % 3 else None for i in range(len(lengths))],
        loss_denominator_mask=[i % 2 == 0 for i in range(len(lengths))],
        loss_global_batch_sizes=[len(lengths)] * len(lengths),
    )
    return data


@pytest.mark.parametrize("balance_data", [False, True])
def test_miles_newer_keys_are_known_and_split_like_the_reference(balance_data: bool) -> None:
    from tests.reference_split import normalize, reference_split

    data = newer_keys_data([7, 3, 12, 5, 9, 4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no UnknownKeyWarning: every key is known
        shards = miles.split_train_data_by_dp_raw(
            make_args(balance_data=balance_data), data, dp_size=3
        )
    expected = reference_split(data, 3, balance_data)
    for shard, want in zip(shards, expected, strict=True):
        got = normalize(shard)
        got["loss_denominator_mask"] = [bool(flag) for flag in got["loss_denominator_mask"]]
        got["truncated"] = [int(flag) for flag in got["truncated"]]
        assert got == want


def test_media_refs_turn_the_rollout_side_schedule_off() -> None:
    from tests.test_compat_miles import FULL_CONFIG, schedule_data

    data = schedule_data([3, 4, 5, 6, 7, 8, 9, 10], list(range(8)))
    assert miles.can_schedule_on_rollout_side(make_args(), data, FULL_CONFIG)
    with_media = {**data, "media_refs": [None] * 8}
    assert not miles.can_schedule_on_rollout_side(make_args(), with_media, FULL_CONFIG)


_INSIDE = "inside the teacher response: >= 0 and < 3 (`teacher_response_lengths`)"


@pytest.mark.parametrize(
    ("positions", "facts"),
    [
        (
            [[0, 2, 4], [0], [0, 1, 1]],
            {"sample": 2, "position": 2, "expected": "strictly increasing", "got": "1 after 1"},
        ),
        (
            [[0, 2, 4], [9], [0, 1, 2]],
            {"sample": 1, "position": 0, "expected": _INSIDE, "got": "9"},
        ),
        (
            [[0, 2, -1], [0], [0, 1, 2]],
            {"sample": 0, "position": 2, "expected": "strictly increasing", "got": "-1 after 2"},
        ),
    ],
)
def test_teacher_positions_are_checked_before_anything_is_split(
    positions: list[list[int]], facts: dict[str, Any]
) -> None:
    from arrow_split import ValueRangeError

    data = make_data([6, 2, 6])  # responses 3, 1, 3
    data.update(teacher_gather_positions=positions, teacher_response_lengths=[5, 3, 4])
    with raises_facts(ValueRangeError, key="teacher_gather_positions", **facts) as caught:
        miles.split_train_data_by_dp_raw(make_args(), data, dp_size=1)
    where = f"sample {facts['sample']}, position {facts['position']}"
    assert str(caught.value).startswith(f"{where}: `teacher_gather_positions`")  # rendered
