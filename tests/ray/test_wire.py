"""The delayed reference on the wire: pickle, cloudpickle, JSON into other processes; lost objects.

A process that holds only the bytes or the JSON text takes its rows; a reference whose object is
freed or whose owner died is a TransportError naming the object and the step, within a bound.
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from arrow_split import OptionError, OptionTypeError, TransportError
from arrow_split.compat import miles
from tests.error_facts import raises_facts
from tests.ray.test_compat_ray import assert_same, expected_actor_dicts, make_args, make_data

ray = pytest.importorskip("ray")

from arrow_split.ray._wire import (  # noqa: E402
    can_free,
    free,
    ref_from_bytes,
    ref_from_json,
    ref_to_json,
)

pytestmark = pytest.mark.ray

CALL_TIMEOUT_S = 60


@ray.remote(num_cpus=0)
class Taker:
    """A rank that gets the reference only as bytes or text, never as a Ray argument."""

    def take(self, args: Any, how: str, payload: Any, dp_rank: int, dp_size: int) -> Any:
        if how == "json":
            ref = miles.ArrowRef.from_json(payload)
        elif how == "pickle":
            ref = pickle.loads(payload)
        else:
            ref = ray.cloudpickle.loads(payload)
        try:
            rollout_data, result = miles.process_rollout_data(args, ref, dp_rank, dp_size)
        except TransportError as error:
            return f"TransportError: {error}"
        with result:
            return rollout_data


@ray.remote(num_cpus=0)
class Owner:
    """An actor that puts a batch and can die with it."""

    def put(self, args: Any, data: Any) -> str:
        return str(miles.split_train_data_by_dp(args, data, {"dp_size": 2}).to_json())


@pytest.fixture(scope="module")
def takers(ray_cluster: None) -> Iterator[list[Any]]:
    handles = [Taker.remote() for _ in range(2)]  # type: ignore[attr-defined]
    yield handles
    for handle in handles:
        ray.kill(handle)


@pytest.mark.parametrize("how", ["json", "pickle", "cloudpickle"])
def test_a_process_holding_only_the_wire_form_takes_its_rows(takers: list[Any], how: str) -> None:
    args = make_args(delay_split_train_data_by_dp=True)
    data = make_data(10, seed=11)
    ref = miles.split_train_data_by_dp(args, data, {"dp_size": 2})
    payload: Any
    if how == "json":
        payload = ref.to_json()
        document = json.loads(payload)
        assert document["object_id"] == ref.inner.hex()
        assert document["step"] == ref.step
    elif how == "pickle":
        payload = pickle.dumps(ref)
    else:
        payload = ray.cloudpickle.dumps(ref)
    calls = [taker.take.remote(args, how, payload, r, 2) for r, taker in enumerate(takers)]
    for got, expected in zip(
        ray.get(calls, timeout=CALL_TIMEOUT_S), expected_actor_dicts(args, data, 2), strict=True
    ):
        assert_same(got, expected)


def test_the_json_round_trip_keeps_the_reference_and_step(ray_cluster: None) -> None:
    ref = miles.ArrowRef(ray.put([1, 2]), step=4)
    again = miles.ArrowRef.from_json(ref.to_json())
    assert again == ref
    assert ray.get(again.inner) == [1, 2]
    assert pickle.loads(pickle.dumps(ref)) == ref


def test_a_freed_object_is_a_transport_error_naming_the_object_and_step(
    takers: list[Any],
) -> None:
    args = make_args(delay_split_train_data_by_dp=True)
    ref = miles.split_train_data_by_dp(args, make_data(6, seed=12), {"dp_size": 2})
    text = ref.to_json()
    if not can_free():
        with raises_facts(TransportError, key=ref.inner.hex()):  # Ray cannot free it
            free(ref.inner)
        pytest.skip(
            f"Ray {ray.__version__} cannot free a referenced object (owner death is tested)"
        )
    free(ref.inner)
    message: Any = None
    deadline = time.monotonic() + 30  # Ray drops a freed object asynchronously; a hang fails
    while not isinstance(message, str) and time.monotonic() < deadline:
        message = ray.get(takers[0].take.remote(args, "json", text, 0, 2), timeout=CALL_TIMEOUT_S)
        time.sleep(0.2)
    assert message.startswith(f"TransportError: step {ref.step}, dp_rank 0: the object store lost")
    assert ref.inner.hex() in message


def test_an_owner_that_died_is_a_transport_error(takers: list[Any]) -> None:
    args = make_args(delay_split_train_data_by_dp=True)
    owner = Owner.remote()  # type: ignore[attr-defined]
    text = ray.get(owner.put.remote(args, make_data(6, seed=13)), timeout=CALL_TIMEOUT_S)
    ray.kill(owner)
    message: Any = None
    deadline = time.monotonic() + 30  # the kill lands a moment later; a hang fails the test
    while not isinstance(message, str) and time.monotonic() < deadline:
        message = ray.get(takers[1].take.remote(args, "json", text, 1, 2), timeout=CALL_TIMEOUT_S)
        time.sleep(0.2)
    assert message.startswith("TransportError: step ")
    assert "OwnerDiedError" in message
    assert json.loads(text)["object_id"] in message


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"format": "other"}',
        '{"format": "arrow_split.ray_ref", "version": 2}',
        '{"format": "arrow_split.ray_ref", "version": 1, "object_id": "00"}',
        '{"format": "arrow_split.ray_ref", "version": 1, "object_id": "00", "ray": "!!"}',
        '{"format": "arrow_split.ray_ref", "version": 1, "object_id": "00", "ray": "\u00e9AA="}',
        "[" * 100_000 + "]" * 100_000,  # deeper than the parser can go
        b"\xff\xfe{",
    ],
)
def test_bad_json_is_refused(ray_cluster: None, text: str) -> None:
    with pytest.raises(OptionError):
        miles.ArrowRef.from_json(text)
    with pytest.raises(OptionError):
        ref_from_json(text)


def test_a_documents_extra_members_are_checked(ray_cluster: None) -> None:
    ref = ray.put(1)
    for own in ("format", "version", "object_id", "ray"):
        with raises_facts(OptionError, key=own):
            ref_to_json(ref, **{own: "x"})
    for bad in (1.5, True, object(), [1, 2], float("nan")):
        with raises_facts(OptionTypeError, key="step", expected="an int, a str or None"):
            ref_to_json(ref, step=bad)  # type: ignore[arg-type]
    again, members = ref_from_json(ref_to_json(ref, step=np.int64(3), name="a", note=None))
    assert again == ref
    assert (members["step"], members["name"], members["note"]) == (3, "a", None)


def test_bytes_that_would_run_code_are_refused(ray_cluster: None) -> None:
    evil = pickle.dumps(print)  # any global but Ray's reference deserializer
    # the unpickler refuses any global but Ray's reference deserializer
    with raises_facts(OptionError, key="the reference", got="UnpicklingError"):
        ref_from_bytes(evil)
    other = ref_to_json(ray.put(1))
    object_ref, members = ref_from_json(other)
    assert members["object_id"] == object_ref.hex()
