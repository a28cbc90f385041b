"""No state carried from one step to the next: a builder reused over several steps.

Each step draws its own keys, column types and value ranges (routed-expert ids that fit uint8 after
a step that needed uint16 or int32; a prompt column that falls back to pickle, then not; a str
subclass), its own grouping (``append``, ``extend``) and a few rejected calls between them. Every
``finish()`` must equal ``from_train_data`` of that step's samples, and a rejected call must change
nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from arrow_split import ArrowSplitError, RolloutBatch, RolloutBatchBuilder
from arrow_split.testing import assert_batches_equal
from arrow_split.testing.strategies import float32s

OPTIONAL = ("response", "rewards", "experts", "prompt", "metadata")
EXPERT_HIGHS = (3, 255, 256, 65_535, 65_536, 2**31 - 1)  # uint8, uint16, int32 storage


@st.composite
def _step(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One step's samples (one dict each) and its batch-global values."""
    keys = draw(st.sets(st.sampled_from(OPTIONAL)))
    layers, top_k = draw(st.sampled_from([(1, 1), (2, 3), (1, 2)]))
    high = draw(st.sampled_from(EXPERT_HIGHS))
    prompt_kind = draw(st.sampled_from(["str", "mixed", "numpy-str"]))
    as_arrays = draw(st.booleans())
    samples = []
    for _ in range(draw(st.integers(0, 5))):
        total = draw(st.integers(1, 5))
        sample: dict[str, Any] = {
            "tokens": draw(st.lists(st.integers(0, 2**31 - 1), min_size=total, max_size=total))
        }
        if "response" in keys:
            response = draw(st.integers(0, total))
            sample["response_lengths"] = response
            sample["loss_masks"] = draw(
                st.lists(st.integers(0, 1), min_size=response, max_size=response)
            )
            sample["rollout_log_probs"] = draw(
                st.lists(float32s, min_size=response, max_size=response)
            )
        if "rewards" in keys:
            sample["rewards"] = draw(st.floats(-1e6, 1e6))
        if "experts" in keys:
            shape = (total - 1, layers, top_k)
            ids = np.asarray(
                draw(
                    st.lists(
                        st.integers(0, high),
                        min_size=int(np.prod(shape)),
                        max_size=int(np.prod(shape)),
                    )
                ),
                dtype=np.int64,
            ).reshape(shape)
            sample["rollout_routed_experts"] = ids if as_arrays else ids.tolist()
        if "prompt" in keys:
            text = draw(st.text(max_size=4))
            pickled = prompt_kind == "mixed" and draw(st.booleans())
            sample["prompt"] = {"text": text} if pickled else text
            if prompt_kind == "numpy-str" and draw(st.booleans()):
                sample["prompt"] = np.str_(text)
        if "metadata" in keys:
            sample["metadata"] = draw(
                st.one_of(st.none(), st.dictionaries(st.text(max_size=2), st.integers()))
            )
        samples.append(sample)
    step_globals: dict[str, Any] = {}
    if draw(st.booleans()):
        step_globals["dynamic_global_batch_size"] = draw(st.integers(1, 4096))
    if draw(st.booleans()):
        step_globals["raw_reward"] = draw(
            st.lists(float32s, min_size=len(samples), max_size=len(samples))
        )
    return samples, step_globals


def _train_data(samples: list[dict[str, Any]], keys: list[str]) -> dict[str, Any]:
    return {key: [sample[key] for sample in samples] for key in keys}


def _bad_call(kind: str, samples: list[dict[str, Any]]) -> dict[str, Any]:
    """A sample the builder must refuse, shaped like the step's own samples where it has any."""
    sample = dict(samples[0]) if samples else {"tokens": [1]}
    if kind == "tokens":
        sample["tokens"] = None
    elif kind == "new-key":
        sample["not_a_column"] = 1
    elif kind == "mask" and "loss_masks" in sample and sample["loss_masks"]:
        sample["loss_masks"] = [2] * len(sample["loss_masks"])
    elif kind == "experts" and "rollout_routed_experts" in sample:
        shape = np.asarray(sample["rollout_routed_experts"]).shape
        sample["rollout_routed_experts"] = np.full(shape, 1.5) if np.prod(shape) else [[1.5]]
    else:
        sample["tokens"] = [[1.5]]
    return sample


def _feed(builder: RolloutBatchBuilder, samples: list[dict[str, Any]], draw: Any) -> None:
    keys = list(samples[0]) if samples else ["tokens"]
    done = 0
    while done < len(samples):
        size = draw.draw(st.integers(1, len(samples) - done))
        group = samples[done : done + size]
        if draw.draw(st.booleans()):
            builder.extend(_train_data(group, keys))
        else:
            for sample in group:
                builder.append(sample)
        done += size
        if draw.draw(st.integers(0, 2)) == 0:  # a rejected call between groups changes nothing
            before = len(builder)
            bad = _bad_call(
                draw.draw(st.sampled_from(["tokens", "new-key", "mask", "experts"])), group
            )
            with pytest.raises(ArrowSplitError):
                builder.append(bad)
            assert len(builder) == before


@given(steps=st.lists(_step(), min_size=2, max_size=4), draw=st.data())
def test_no_state_carried_between_steps_each_finish_equals_from_train_data(
    steps: list[tuple[list[dict[str, Any]], dict[str, Any]]], draw: Any
) -> None:
    builder = RolloutBatchBuilder()
    for samples, step_globals in steps:
        _feed(builder, samples, draw)
        for key, value in step_globals.items():
            builder.set_global(key, value)
        keys = list(samples[0]) if samples else ["tokens"]
        expected = RolloutBatch.from_train_data({**_train_data(samples, keys), **step_globals})
        assert_batches_equal(builder.finish(), expected)
        assert len(builder) == 0


def test_no_state_carried_narrow_ids_after_a_wide_step_and_a_string_column_after_pickle() -> None:
    builder = RolloutBatchBuilder()
    wide = {"tokens": [[1, 2]], "rollout_routed_experts": [[[70_000]]], "prompt": [{"a": 1}]}
    narrow = {"tokens": [[1, 2]], "rollout_routed_experts": [[[3]]], "prompt": ["text"]}
    for step in (wide, narrow, wide):
        builder.extend(step)
        batch = builder.finish()
        assert_batches_equal(batch, RolloutBatch.from_train_data(step))
    prompt_type = batch.record_batch.schema.field("prompt").type  # pickled, each value once
    assert str(prompt_type) == "dictionary<values=large_binary, indices=int32, ordered=0>"


def test_no_state_carried_a_numpy_str_keeps_its_type_and_bytes() -> None:
    samples = [{"tokens": [1], "prompt": np.str_("hi")}, {"tokens": [2], "prompt": {"a": 1}}]
    expected = RolloutBatch.from_train_data(_train_data(samples, ["tokens", "prompt"]))
    builder = RolloutBatchBuilder()
    for sample in samples:
        builder.append(sample)
    batch = builder.finish()
    assert_batches_equal(batch, expected)
    assert [type(v) for v in batch.to_train_data()["prompt"]] == [np.str_, dict]
