"""The prefetcher: results in step order, a bounded lookahead, errors at the step, clean stops."""

from __future__ import annotations

import threading
import time

import pytest

from arrow_split import OptionError, OptionTypeError, PlanError, TransportError
from arrow_split.prefetch import Prefetcher
from tests.error_facts import raises_facts


class Recorder:
    """A fetch that records its calls and can be held at a gate."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, source: int) -> int:
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
        wait_until(lambda: prefetcher._running == 0)
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
    wait_until(lambda: prefetcher._waiting == 1)
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
        with raises_facts(OptionError, key="step", got="3"):
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
