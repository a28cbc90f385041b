"""The prefetcher: results in step order, a bounded lookahead, errors at the step, clean stops."""

from __future__ import annotations

import gc
import math
import threading
import time

import numpy as np
import pytest

from arrow_split import OptionError, OptionTypeError, PlanError, TransportError
from arrow_split.prefetch import Prefetcher
from tests.error_facts import raises_facts


class Recorder:
    """A fetch that records its calls and can be held at a gate."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, source: int) -> int:
        self.started.append(source)
        self.gate.wait(5)
        self.calls.append(source)
        return source * 10


def wait_until(condition: object, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def test_results_come_back_per_step() -> None:
    fetch = Recorder()
    with Prefetcher(fetch, lookahead=3) as prefetcher:
        for step in range(5):
            prefetcher.submit(step, step)
        assert [prefetcher.get(step) for step in range(5)] == [0, 10, 20, 30, 40]
    assert fetch.calls == [0, 1, 2, 3, 4]


def test_the_next_step_is_fetched_while_this_one_trains() -> None:
    fetch = Recorder()
    with Prefetcher(fetch, lookahead=1) as prefetcher:
        prefetcher.submit(0, 0)
        prefetcher.submit(1, 1)
        assert prefetcher.get(0) == 0
        wait_until(lambda: prefetcher.ready_steps == [1])  # fetched before anyone asks
        assert fetch.calls == [0, 1]
        assert prefetcher.get(1) == 10


@pytest.mark.parametrize("lookahead", [0, 1, 2])
def test_the_lookahead_bounds_the_results_held(lookahead: int) -> None:
    fetch = Recorder()
    with Prefetcher(fetch, lookahead=lookahead) as prefetcher:
        for step in range(6):
            prefetcher.submit(step, step)
        wait_until(lambda: len(fetch.calls) >= lookahead)
        time.sleep(0.05)  # room for a fetch that should not happen
        assert len(fetch.calls) == lookahead
        assert prefetcher.ready_steps == list(range(lookahead))
        assert prefetcher.get(4) == 40  # a waiting get goes past the bound
        assert [prefetcher.get(step) for step in (0, 1, 2, 3, 5)] == [0, 10, 20, 30, 50]


def test_an_error_is_raised_at_the_step_that_needs_the_data() -> None:
    def fetch(source: int) -> int:
        if source == 1:
            msg = "the batch was put for another plan"
            raise PlanError(msg, key="plan")
        return source

    with Prefetcher(fetch, lookahead=2) as prefetcher:
        for step in range(3):
            prefetcher.submit(step, step)
        assert prefetcher.get(0) == 0
        with raises_facts(PlanError, key="plan") as caught:
            prefetcher.get(1)
        assert "raised by the prefetched fetch of step 1" in caught.value.__notes__
        assert prefetcher.get(2) == 2  # the thread lives on


def test_replace_fetches_the_steps_not_taken_again() -> None:
    fetch = Recorder()
    with Prefetcher(fetch, lookahead=2) as prefetcher:
        for step in range(3):
            prefetcher.submit(step, step)
        assert prefetcher.get(0) == 0
        wait_until(lambda: len(prefetcher.ready_steps) == 2)
        prefetcher.replace(lambda source: source * 100)  # a new dp_size: fetch again
        assert [prefetcher.get(1), prefetcher.get(2)] == [100, 200]


def test_a_fetch_running_during_a_replace_is_dropped() -> None:
    fetch = Recorder()
    fetch.gate.clear()
    with Prefetcher(fetch, lookahead=1) as prefetcher:
        prefetcher.submit(0, 1)
        wait_until(lambda: prefetcher._state.running == 0)
        prefetcher.replace(lambda source: -source)
        fetch.gate.set()
        assert prefetcher.get(0) == -1


def test_cancel_wakes_a_waiting_get() -> None:
    fetch = Recorder()
    fetch.gate.clear()
    prefetcher = Prefetcher(fetch, lookahead=1)
    prefetcher.submit(0, 0)
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            prefetcher.get(0)
        except OptionError as error:
            errors.append(error)

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until(lambda: prefetcher._state.wanted == [0])
    prefetcher.cancel()
    thread.join(5)
    assert len(errors) == 1
    assert "cancelled" in str(errors[0])
    fetch.gate.set()
    prefetcher.stop(5)
    assert prefetcher._thread is not None
    assert not prefetcher._thread.is_alive()


def test_stop_ends_the_thread_and_refuses_more() -> None:
    prefetcher: Prefetcher[int, int] = Prefetcher(Recorder())
    prefetcher.submit(0, 0)
    prefetcher.stop(5)
    assert prefetcher._thread is not None
    assert not prefetcher._thread.is_alive()
    with raises_facts(OptionError, expected="a running prefetcher", got="stopped"):
        prefetcher.submit(1, 1)
    with raises_facts(OptionError, expected="a running prefetcher", got="stopped"):
        prefetcher.get(0)


def test_bad_calls() -> None:
    with raises_facts(OptionTypeError, key="fetch"):
        Prefetcher(3)  # type: ignore[arg-type]
    with raises_facts(OptionError, key="lookahead", expected=">= 0", mistake="option_value"):
        Prefetcher(Recorder(), lookahead=-1)
    with Prefetcher(Recorder()) as prefetcher:
        with raises_facts(OptionError, key="step", got="3", expected="a submitted step"):
            prefetcher.get(3)
        prefetcher.submit(0, 0)
        with raises_facts(OptionError, key="step", got="0"):
            prefetcher.submit(0, 0)
        with raises_facts(OptionTypeError, key="step", expected="an int", mistake="option_type"):
            prefetcher.submit(1.0, 0)  # type: ignore[arg-type]
        gate = Recorder()
        gate.gate.clear()
        prefetcher.replace(gate)
        prefetcher.submit(1, 1)
        with raises_facts(TransportError, key="step", got="1"):
            prefetcher.get(1, timeout=0.01)
        gate.gate.set()


@pytest.mark.parametrize("lookahead", [0, 1, 2])
def test_a_waiting_get_fetches_its_step_and_the_lookahead_no_more(lookahead: int) -> None:
    fetch = Recorder()
    fetch.gate.clear()
    with Prefetcher(fetch, lookahead=lookahead) as prefetcher:
        for step in range(6):
            prefetcher.submit(step, step)
        taken: list[int] = []
        taker = threading.Thread(target=lambda: taken.append(prefetcher.get(0)))
        taker.start()
        wait_until(lambda: fetch.started == [0])
        time.sleep(0.02)  # the get waits while step 0 is fetched
        fetch.gate.set()
        taker.join(5)
        assert taken == [0]
        time.sleep(0.05)  # step 0 trains: room for a fetch that should not happen
        assert fetch.calls == list(range(lookahead + 1))
        assert prefetcher.ready_steps == list(range(1, lookahead + 1))


def test_lookahead_0_fetches_only_the_step_a_get_waits_for() -> None:
    fetch = Recorder()
    with Prefetcher(fetch, lookahead=0) as prefetcher:
        for step in range(6):
            prefetcher.submit(step, step)
        assert prefetcher.get(3) == 30  # fetched first, alone
        time.sleep(0.05)
        assert (fetch.calls, prefetcher.ready_steps) == ([3], [])
        assert prefetcher.get(0) == 0
        time.sleep(0.05)
        assert (fetch.calls, prefetcher.ready_steps) == ([3, 0], [])


@pytest.mark.parametrize("kind", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_any_exception_of_a_fetch_is_raised_at_its_step(kind: type[BaseException]) -> None:
    def fetch(source: int) -> int:
        if source == 0:
            raise kind("stop")
        return source

    with Prefetcher(fetch, lookahead=1) as prefetcher:
        prefetcher.submit(0, 0)
        prefetcher.submit(1, 1)
        with pytest.raises(kind) as caught:
            prefetcher.get(0, timeout=5)
        assert caught.value.__notes__ == ["raised by the prefetched fetch of step 0"]
        assert prefetcher.get(1, timeout=5) == 1  # the thread goes on
        prefetcher.submit(2, 2)
        assert prefetcher.get(2, timeout=5) == 2


def test_an_error_raised_at_two_steps_names_the_step_that_raises_it() -> None:
    error = RuntimeError("the store is down")

    def fetch(source: int) -> int:
        raise error

    with Prefetcher(fetch, lookahead=2) as prefetcher:
        prefetcher.submit(0, 0)
        prefetcher.submit(1, 1)
        for step in (0, 1):
            with pytest.raises(RuntimeError) as caught:
                prefetcher.get(step)
            assert caught.value.__notes__ == [f"raised by the prefetched fetch of step {step}"]


@pytest.mark.parametrize("timeout", [math.inf, 1e300, math.nan, -1, np.float64(-0.5)])
def test_a_timeout_out_of_range_is_refused_before_anything_changes(timeout: float) -> None:
    with Prefetcher(Recorder()) as prefetcher:
        prefetcher.submit(0, 0)
        with raises_facts(OptionError, key="timeout", mistake="option_value"):
            prefetcher.get(0, timeout=timeout)
        with raises_facts(OptionError, key="timeout", mistake="option_value"):
            prefetcher.stop(timeout=timeout)
        assert prefetcher.get(0, timeout=np.float64(5)) == 0  # still running, step 0 kept


@pytest.mark.parametrize("timeout", ["1", True, [1], 1j])
def test_a_timeout_of_the_wrong_type_is_refused_before_anything_changes(timeout: object) -> None:
    with Prefetcher(Recorder()) as prefetcher:
        prefetcher.submit(0, 0)
        with raises_facts(OptionTypeError, key="timeout"):
            prefetcher.get(0, timeout=timeout)  # type: ignore[arg-type]
        with raises_facts(OptionTypeError, key="timeout"):
            prefetcher.stop(timeout=timeout)  # type: ignore[arg-type]
        prefetcher.submit(1, 1)
        assert [prefetcher.get(0), prefetcher.get(1, timeout=5)] == [0, 10]


def test_a_step_taken_twice_says_it_was_taken() -> None:
    with Prefetcher(Recorder()) as prefetcher:
        prefetcher.submit(0, 0)
        assert prefetcher.get(0) == 0
        with raises_facts(OptionError, key="step", got="0", expected="a step not taken yet"):
            prefetcher.get(0)
        prefetcher.submit(0, 1)  # submitted again: fetched again
        assert prefetcher.get(0) == 10


def test_a_prefetcher_dropped_without_stop_ends_its_thread() -> None:
    prefetcher: Prefetcher[int, int] = Prefetcher(Recorder())
    prefetcher.submit(0, 0)
    prefetcher.submit(1, 1)
    assert prefetcher.get(0) == 0
    thread = prefetcher._thread
    assert thread is not None
    del prefetcher
    gc.collect()
    thread.join(5)
    assert not thread.is_alive()


@pytest.mark.parametrize("lookahead", [1, 2])
def test_a_ring_of_lookahead_plus_one_blocks_keeps_the_taken_step_intact(lookahead: int) -> None:
    from arrow_split import RolloutBatch, take_rows
    from arrow_split.block import RankBlock

    rng = np.random.default_rng(3)
    batches = [
        RolloutBatch.from_train_data(
            {"tokens": [rng.integers(0, 1000, 8 + step).tolist() for _ in range(step + 2)]}
        )
        for step in range(6)
    ]
    ring = [RankBlock() for _ in range(lookahead + 1)]  # docs/rank-bytes.md's recipe
    done: list[int] = []

    def fill(step: int) -> object:
        filled = ring[step % len(ring)].fill(batches[step])
        done.append(step)
        return filled

    with Prefetcher(fill, lookahead=lookahead) as prefetcher:
        for step in range(len(batches)):
            prefetcher.submit(step, step)
        for step, batch in enumerate(batches):
            tokens = prefetcher.get(step).columns["tokens"].values  # type: ignore[attr-defined]
            # while this step trains, the prefetcher fills every step it may hold
            wait_until(lambda step=step: len(done) >= min(len(batches), step + 1 + lookahead))
            (expected,) = take_rows(batch, np.arange(batch.num_samples)).numeric_columns()
            np.testing.assert_array_equal(tokens, expected.values)
