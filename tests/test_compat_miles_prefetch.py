"""The miles drop-in's prefetcher: get_rollout_data finds each rollout fetched (and converted)."""

from __future__ import annotations

import gc
import threading
from argparse import Namespace
from typing import Any

import pytest

from arrow_split import OptionError, OptionTypeError, PlanError
from arrow_split.compat.miles._prefetch import MilesPrefetcher
from tests.error_facts import raises_facts


class FakeProcess:
    """miles' ``process_rollout_data`` shape; records each call's thread and arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.threads: set[str] = set()

    def __call__(
        self, args: Any, ref: Any, dp_rank: int, dp_size: int, witness: Any, **options: Any
    ) -> tuple[dict[str, Any], str]:
        self.threads.add(threading.current_thread().name)
        self.calls.append((ref, dp_rank, dp_size, witness, options))
        if ref == "lost":
            msg = "the object was put for another plan"
            raise PlanError(msg, key="plan")
        return {"tokens": [ref], "rank": (dp_rank, dp_size)}, f"result-{ref}"


def test_a_submitted_rollout_is_fetched_and_converted_on_the_thread() -> None:
    process = FakeProcess()

    def convert(rollout_data: dict[str, Any]) -> dict[str, Any]:
        return {**rollout_data, "converted": True}

    args = Namespace(delay_split_train_data_by_dp=True)
    with MilesPrefetcher(
        args, 1, 4, convert=convert, process=process, strict_keys=True
    ) as prefetcher:
        prefetcher.submit(7, "ref-7", witness_info="w")
        rollout_data, result = prefetcher.get_rollout_data(7)
        assert rollout_data == {"tokens": ["ref-7"], "rank": (1, 4), "converted": True}
        assert result == "result-ref-7"
        assert process.calls == [("ref-7", 1, 4, "w", {"strict_keys": True})]
        assert process.threads == {"arrow_split-prefetch"}
        # a rollout never submitted is fetched where miles would fetch it
        assert prefetcher.get_rollout_data(8, "ref-8")[1] == "result-ref-8"


def test_replan_fetches_the_rollouts_not_taken_again() -> None:
    process = FakeProcess()
    with MilesPrefetcher(Namespace(), 0, 2, lookahead=2, process=process) as prefetcher:
        prefetcher.submit(1, "a")
        prefetcher.submit(2, "b")
        prefetcher.replan(2, 3)
        assert prefetcher.get_rollout_data(1)[0]["rank"] == (2, 3)
        assert prefetcher.get_rollout_data(2)[0]["rank"] == (2, 3)
        with raises_facts(PlanError, key="dp_rank", mistake="plan_value"):
            prefetcher.replan(3, 3)
        assert (prefetcher.dp_rank, prefetcher.dp_size) == (2, 3)
    with raises_facts(OptionError, expected="a running prefetcher", got="stopped"):
        prefetcher.replan(0, 4)
    assert (prefetcher.dp_rank, prefetcher.dp_size) == (2, 3)  # a failed replan changes nothing


def test_an_error_is_raised_by_the_rollout_that_needs_it() -> None:
    with MilesPrefetcher(Namespace(), 0, 1, process=FakeProcess()) as prefetcher:
        prefetcher.submit(0, "lost")
        prefetcher.submit(1, "fine")
        with raises_facts(PlanError, key="plan") as caught:
            prefetcher.get_rollout_data(0)
        assert caught.value.__notes__ == ["raised by the prefetched fetch of step 0"]
        assert prefetcher.get_rollout_data(1)[1] == "result-fine"
        prefetcher.submit(2, "x")
        prefetcher.cancel()
        prefetcher.submit(2, "y")  # a cancelled rollout can come again
        assert prefetcher.get_rollout_data(2)[1] == "result-y"
    with raises_facts(OptionError, expected="a running prefetcher", got="stopped"):
        prefetcher.get_rollout_data(3, "z")


def test_the_package_prefetcher_fetches_through_the_drop_in() -> None:
    pytest.importorskip("ray")  # the delayed fetch imports Ray (a batch given directly needs none)
    from argparse import Namespace

    from arrow_split import RolloutBatch
    from arrow_split.compat import miles

    args = Namespace(balance_data=False, delay_split_train_data_by_dp=True)
    batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3], [4, 5, 6], [7]]})
    with miles.prefetcher(args, 1, 2, lookahead=2, convert=len) as ahead:
        ahead.submit(0, batch)
        converted, _ = ahead.get_rollout_data(0)
    expected, _ = miles.process_rollout_data(args, batch, 1, 2)
    assert converted == len(expected)


def test_bad_options_are_refused_when_the_prefetcher_is_made() -> None:
    from arrow_split.compat import miles

    args = Namespace()
    names = "one of 'specs', 'on_batch_lengths', 'strict_keys', 'pad_to_dp'"
    with raises_facts(OptionError, key="balanec_data", expected=names, mistake="option_value"):
        miles.prefetcher(args, 0, 2, balanec_data=True)
    with raises_facts(OptionTypeError, key="on_batch_lengths", mistake="option_type"):
        miles.prefetcher(args, 0, 2, on_batch_lengths=5)
    with raises_facts(OptionTypeError, key="process"):
        MilesPrefetcher(args, 0, 2, process=None)  # type: ignore[arg-type]
    with raises_facts(OptionTypeError, key="convert"):
        MilesPrefetcher(args, 0, 2, process=FakeProcess(), convert=5)  # type: ignore[arg-type]


def test_a_rollout_id_is_named_as_such() -> None:
    with MilesPrefetcher(Namespace(), 0, 1, process=FakeProcess()) as prefetcher:
        with raises_facts(OptionTypeError, key="rollout_id", mistake="option_type"):
            prefetcher.get_rollout_data("5", "ref")  # type: ignore[arg-type]
        with raises_facts(OptionError, key="rollout_id", mistake="option_value"):
            prefetcher.submit(-1, "ref")


def test_a_prefetcher_dropped_without_stop_ends_its_thread() -> None:
    prefetcher = MilesPrefetcher(Namespace(), 0, 1, process=FakeProcess())
    assert prefetcher.get_rollout_data(0, "ref")[1] == "result-ref"
    thread = prefetcher._prefetcher._thread
    assert thread is not None
    del prefetcher
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()
