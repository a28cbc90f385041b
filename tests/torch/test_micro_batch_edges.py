"""``to_micro_batches`` takes integer offsets only: a bool among them is a typed error."""

from __future__ import annotations

import numpy as np
import pytest

from arrow_split import OptionError, OptionTypeError, RolloutBatch, take_rows
from tests.error_facts import raises_facts

torch = pytest.importorskip("torch")

from arrow_split.torch import to_micro_batches, to_tensors  # noqa: E402

pytestmark = pytest.mark.torch


def _batch() -> RolloutBatch:
    return RolloutBatch.from_train_data(
        {"tokens": [[1, 2], [3], [4, 5, 6]], "truncated": [1, 0, 1]}
    )


@pytest.mark.parametrize("offsets", [[0, True, 3], [False, 1, 3], np.array([0, 1, 1], dtype=bool)])
def test_bools_among_offsets_are_refused(offsets: object) -> None:
    with raises_facts(OptionTypeError, key="micro_batch_offsets"):
        to_micro_batches(_batch(), offsets)  # type: ignore[arg-type]


def test_integer_offsets_still_work_and_bool_columns_are_writable_tensors() -> None:
    parts = to_micro_batches(_batch(), [0, 1, 3])
    assert len(parts) == 2
    tensors = to_tensors(_batch())
    truncated = tensors["truncated"]
    assert isinstance(truncated, torch.Tensor)
    truncated[0] = False  # fresh memory of this call, writable without a copy warning


def test_options_are_parsed_once_even_without_micro_batches() -> None:
    empty = take_rows(_batch(), np.zeros(0, dtype=np.int64))
    assert to_micro_batches(empty, [0]) == []
    with raises_facts(OptionError, key="layout"):
        to_micro_batches(empty, [0], layout="flat")


def test_an_option_to_tensors_does_not_take_is_named() -> None:
    # it was an untyped TypeError from the option parser ("unexpected keyword argument")
    with raises_facts(OptionError, key="bogus", got="'bogus'", mistake="option_value") as caught:
        to_micro_batches(_batch(), [0, 3], bogus=1)
    assert type(caught.value) is OptionError
