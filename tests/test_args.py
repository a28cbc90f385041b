"""The shared argument rules: one answer per value, whatever its container."""

from __future__ import annotations

import array

import numpy as np
import pytest
import torch

from arrow_split._args import as_flag, as_index_array, as_int, as_offsets, as_real
from arrow_split.errors import OptionError, OptionTypeError
from tests.error_facts import assert_facts, raises_facts


@pytest.mark.parametrize("value", [True, False, np.bool_(True), np.bool_(False)])
def test_flags_take_bools(value: object) -> None:
    assert as_flag("f", value) is bool(value)


@pytest.mark.parametrize("value", ["False", "True", 0, 1, None, 1.0, np.array([True]), [True]])
def test_flags_refuse_what_bool_would_coerce(value: object) -> None:
    with pytest.raises(OptionTypeError) as caught:
        as_flag("f", value)
    assert_facts(caught.value, {"key": "f"})


@pytest.mark.parametrize("value", [3, np.int8(3), np.uint64(3), np.array(3)])
def test_ints_from_any_integer_container(value: object) -> None:
    assert as_int("n", value, minimum=1) == 3


@pytest.mark.parametrize("value", [True, np.bool_(True), 3.0, "3", None, np.array([3])])
def test_ints_refuse_non_integers(value: object) -> None:
    with pytest.raises(OptionTypeError) as caught:
        as_int("n", value)
    assert_facts(caught.value, {"key": "n"})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (2.5, 2.5),
        (np.int8(3), 3),
        (np.float32(0.5), 0.5),
        (np.array(4), 4),
        (np.array(1.5), 1.5),
        (torch.tensor(2), 2),
        (torch.tensor(0.25), 0.25),
    ],
)
def test_reals_from_any_number_container(value: object, expected: float) -> None:
    real = as_real("x", value, "a real number")
    assert real == expected
    assert type(real) is type(expected)


@pytest.mark.parametrize(
    "value", [True, np.bool_(False), np.array(True), 1j, np.complex64(1), "1", None, [1.0]]
)
def test_reals_refuse_bools_complex_and_containers(value: object) -> None:
    with pytest.raises(OptionTypeError) as caught:
        as_real("x", value, "a real number")
    assert_facts(caught.value, {"key": "x"})


def test_ints_out_of_range_name_bounds_and_fix() -> None:
    with pytest.raises(OptionError) as caught:
        as_int("n", 9, minimum=1, maximum=4, fix="use fewer")
    assert_facts(caught.value, {"key": "n"})


@pytest.mark.parametrize(
    "value",
    [
        [0, 3, 5],
        np.array([0, 3, 5], dtype=np.uint8),
        np.array([0, 3, 5], dtype=">i4"),
        np.array([0, 9, 3, 9, 5], dtype=np.int64)[::2],
        array.array("q", [0, 3, 5]),
        memoryview(array.array("i", [0, 3, 5])),
        torch.tensor([0, 3, 5]),
    ],
)
def test_offsets_from_any_container(value: object) -> None:
    offsets = as_offsets("o", value, total=5)
    assert offsets.dtype == np.int64
    assert offsets.tolist() == [0, 3, 5]


@pytest.mark.parametrize(
    "value",
    [
        np.array([0, 3, 1, 4], dtype=np.uint64),
        np.array([0, 3, 1, 4], dtype=np.uint8),
        [0, 3, 1, 4],
    ],
)
def test_decreasing_offsets_are_refused_before_any_wrap(value: object) -> None:
    with raises_facts(OptionError, key="o"):
        as_offsets("o", value)


@pytest.mark.parametrize(
    "value", [[True, False], [0.0, 1.0], np.array([0, 1], dtype=object), "01", None]
)
def test_offsets_refuse_non_integer_dtypes(value: object) -> None:
    with pytest.raises(OptionTypeError):
        as_offsets("o", value)


def test_huge_unsigned_values_are_a_typed_error() -> None:
    with raises_facts(OptionError, key="i"):
        as_index_array("i", np.array([0, 2**64 - 1], dtype=np.uint64))


def test_an_empty_list_is_an_empty_index_array() -> None:
    assert as_index_array("i", []).shape == (0,)


def test_the_result_is_a_fresh_copy() -> None:
    source = np.array([0, 1, 2])
    result = as_index_array("i", source)
    result[0] = 7
    assert source[0] == 0
