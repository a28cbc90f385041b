"""An unknown key's error suggests a spec that fits its values, and a close known key."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from arrow_split import RolloutBatch, SchemaError
from tests.error_facts import raises_facts

BASE: dict[str, Any] = {"tokens": [[1, 2, 3], [4, 5]], "response_lengths": [2, 1]}
SPEC = r"declare it, e\.g\. `specs=\[ColumnSpec\(\"{key}\", {spec}[,)]"


@pytest.mark.parametrize(
    ("key", "value", "spec"),
    [
        ("score", [1.0, 0.0], r'"per_sample_scalar", pa\.float64\(\)'),
        ("kl", [[0.1, 0.2], [0.3]], r'"per_token", pa\.float32\(\), length="response"'),
        ("ids2", [[1, 1, 1], [2, 2]], r'"per_token", pa\.int64\(\), length="tokens"'),
        ("ok", [True, False], r'"per_sample_scalar", pa\.bool_\(\), flag=True'),
        ("name", ["a", "b"], r'"per_sample_object", codec="string"'),
        ("tops", [[[1], [2, 3]], [[4]]], r'"per_token_list", pa\.int32\(\), length="response"'),
        ("step", 4, r'"batch_global", global_shape="int"'),
        ("slots", [1, 2, 3], r'"batch_global", global_shape="int_list"'),
        ("info", [{"a": 1}, None], r'"per_sample_object"'),
        (
            "grid",
            [np.zeros((2, 2, 2)), np.zeros((1, 2, 2))],
            r'"per_sample_tensor", pa\.float32\(\)',
        ),
    ],
)
def test_the_hint_fits_the_values_shape(key: str, value: object, spec: str) -> None:
    # the hint's text is the feature here: a spec that fits the values, ready to paste
    with pytest.raises(SchemaError, match=SPEC.format(key=key, spec=spec)) as caught:
        RolloutBatch.from_train_data({**BASE, key: value})
    assert caught.value.key == key


def test_a_list_per_token_is_not_suggested_as_a_scalar() -> None:
    with pytest.raises(SchemaError) as caught:
        RolloutBatch.from_train_data({**BASE, "kl": [[0.1, 0.2], [0.3]]})
    assert "per_sample_scalar" not in str(caught.value)


def test_a_close_name_is_suggested() -> None:
    with raises_facts(SchemaError, key="reward"):
        RolloutBatch.from_train_data({**BASE, "reward": [1.0, 0.0]})
    with raises_facts(SchemaError, key="loss_mask"):
        RolloutBatch.from_train_data({**BASE, "loss_mask": [[1, 1], [1]]})


def test_a_far_name_gets_no_suggestion() -> None:
    with pytest.raises(SchemaError) as caught:
        RolloutBatch.from_train_data({**BASE, "zzz": [1.0, 0.0]})
    assert "did you mean" not in str(caught.value)


def test_a_key_that_is_no_str_still_gets_the_message() -> None:
    from arrow_split._key_hints import unknown_key_message

    text = unknown_key_message(7, [1.0], ["rewards"])  # type: ignore[arg-type]
    assert text.startswith("unknown key `7`: arrow_split does not guess")
