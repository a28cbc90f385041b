"""Object columns at the edges of JSON and UTF-8: kept exactly, or a typed error, never a crash.

A lone surrogate (which no UTF-8 text holds), an int beyond the 4,300 digits ``int <-> str``
allows, or nesting deeper than ``json`` recurses: the column falls back to pickles (lossless);
what cannot be pickled either is a :class:`ColumnTypeError` naming the key and the sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from arrow_split import ColumnTypeError, ObjectFallbackWarning, RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import assert_batches_equal
from tests.error_facts import assert_facts

# metadata falls back with an ObjectFallbackWarning (checked below); prompt and weight_versions
# are kept as pickles silently, as a str subclass is
pytestmark = pytest.mark.filterwarnings("ignore::arrow_split.ObjectFallbackWarning")


def _nested(depth: int) -> list[Any]:
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


EDGES = [
    pytest.param("metadata", [{"a": 1}, {"a": "\ud800"}], id="lone-surrogate-in-a-value"),
    pytest.param("metadata", [{"a": 1}, {"\udfff": 1}], id="lone-surrogate-in-a-key"),
    pytest.param("metadata", [{"a": 1}, {"a": 10**5000}], id="int-of-5001-digits"),
    pytest.param("metadata", [{"a": 1}, _nested(300)], id="nested-300-deep"),
    pytest.param("prompt", ["a", "b\ud800"], id="lone-surrogate-in-prompt"),
    pytest.param("weight_versions", [["v1"], ["\ud800"]], id="lone-surrogate-in-weight-versions"),
]


@pytest.mark.parametrize(("key", "values"), EDGES)
def test_an_edge_value_is_kept_exactly(key: str, values: list[Any], tmp_path: Path) -> None:
    data = {"tokens": [[1], [2]], key: values}
    batch = RolloutBatch.from_train_data(data)
    assert batch.to_train_data()[key] == values
    batch.write(tmp_path / "edge.arrow")
    assert RolloutBatch.read(tmp_path / "edge.arrow").to_train_data()[key] == values


@pytest.mark.parametrize(("key", "values"), EDGES)
@pytest.mark.parametrize("order", ["edge-last", "edge-first"])
def test_the_builder_equals_from_train_data_after_a_fallback(
    key: str, values: list[Any], order: str
) -> None:
    values = values if order == "edge-last" else values[::-1]
    data = {"tokens": [[1], [2]], key: values}
    builder = RolloutBatchBuilder()
    for row in range(2):
        builder.append({name: column[row] for name, column in data.items()})
    assert_batches_equal(builder.finish(), RolloutBatch.from_train_data(data))


def test_nesting_too_deep_to_pickle_is_a_typed_error() -> None:
    data = {"tokens": [[1], [2]], "metadata": [{"a": 1}, _nested(100_000)]}
    with pytest.raises(ColumnTypeError) as caught:
        RolloutBatch.from_train_data(data)
    assert_facts(caught.value, {"key": "metadata", "sample": 1})


@pytest.mark.parametrize(("key", "values"), EDGES[:4])
def test_a_metadata_fallback_warns_naming_key_and_sample(key: str, values: list[Any]) -> None:
    with pytest.warns(ObjectFallbackWarning) as caught:
        RolloutBatch.from_train_data({"tokens": [[1], [2]], key: values})
    assert (caught[0].message.key, caught[0].message.sample) == (key, 1)
