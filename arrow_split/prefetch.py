"""Fetch the next steps' data while this step trains: one thread, a bounded lookahead.

A :class:`Prefetcher` runs ``fetch(source)`` (a store get, a take, a conversion to the layout
the trainer wants: any callable) on one background thread, for each step submitted, in order
(a step that a ``get`` waits for first), keeping at most ``lookahead`` results ready that no
:meth:`Prefetcher.get` has taken yet. The step that needs the data calls ``get(step)``: it
returns at once when the fetch is done, waits otherwise, and raises the fetch's own exception
(with a note naming the step) when it failed, whatever it is (a ``KeyboardInterrupt`` too): an
error is never lost in the thread, which goes on with the next steps. :meth:`Prefetcher.replace`
swaps the fetch (a plan change: another ``dp_size`` or rank) and fetches every step not yet
taken again with it; :meth:`Prefetcher.cancel` drops them; :meth:`Prefetcher.stop` (or leaving
the ``with`` block, or dropping the prefetcher) ends the thread. A fetch already running is not
interrupted: its result is dropped.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from arrow_split._args import as_int, as_real, describe
from arrow_split.errors import OptionError, OptionTypeError, TransportError, mistake

__all__ = ["Prefetcher"]

SourceT = TypeVar("SourceT")
ResultT = TypeVar("ResultT")

_Done = tuple[ResultT | None, BaseException | None]
"""A fetch's result, or the exception it raised."""

_NOTE = "raised by the prefetched fetch of step "
_TAKEN_KEPT = 64
"""How many of the steps last taken are remembered, to say so when one is asked for again."""


class _State(Generic[SourceT, ResultT]):
    """What a prefetcher shares with its thread (under ``lock``).

    The thread holds this, never the prefetcher: a prefetcher dropped without ``stop()`` is
    collected, and its finalizer stops the thread.
    """

    def __init__(self, fetch: Callable[[SourceT], ResultT], lookahead: int) -> None:
        self.fetch, self.lookahead = fetch, lookahead
        self.lock = threading.Condition()
        self.queue: dict[int, SourceT] = {}  # to fetch, in order
        self.sources: dict[int, SourceT] = {}  # every step submitted and not yet taken
        self.ready: dict[int, _Done[ResultT]] = {}
        self.taken: collections.deque[int] = collections.deque(maxlen=_TAKEN_KEPT)
        self.wanted: list[int] = []  # the step of each waiting get
        self.running: int | None = None
        self.generation = 0
        self.stopped = False

    def drop(self) -> None:
        """Drop every step not yet taken, and forget those taken (under the lock)."""
        self.generation += 1
        for steps in (self.ready, self.sources, self.queue, self.taken):
            steps.clear()
        self.lock.notify_all()

    def stop(self) -> None:
        """Drop every step and end the thread (also the finalizer of a dropped prefetcher)."""
        with self.lock:
            self.drop()
            self.stopped = True

    def ended(self, step: int) -> bool:
        """Whether a ``get(step)`` stops waiting (under the lock)."""
        return self.stopped or step in self.ready or step not in self.sources

    def next_step(self) -> int | None:
        """The step to fetch now: one a get waits for, else the next while there is room."""
        for step in self.wanted:
            if step in self.queue:
                return step
        if self.queue and len(self.ready) < self.lookahead:
            return next(iter(self.queue))
        return None

    def work(self) -> None:
        while True:
            with self.lock:
                self.lock.wait_for(lambda: self.stopped or self.next_step() is not None)
                step = self.next_step()
                if self.stopped or step is None:
                    return
                source = self.queue.pop(step)
                fetch, generation = self.fetch, self.generation
                self.running = step
            try:
                done: _Done[ResultT] = (fetch(source), None)
            except BaseException as error:  # any, KeyboardInterrupt too: raised by the get
                done = (None, error)
            with self.lock:
                self.running = None
                if generation == self.generation and step in self.sources:
                    self.ready[step] = done
                self.lock.notify_all()
            del done, source, fetch


class Prefetcher(Generic[SourceT, ResultT]):
    """Run ``fetch`` ahead of the steps that need it, on one thread.

    Parameters
    ----------
    fetch
        Called once per submitted step with its source, on the prefetch thread.
    lookahead
        Results kept ready (fetched, not yet taken): ``0`` fetches only the step a ``get``
        waits for; ``1`` (the default) fetches step ``N + 1`` while step ``N`` trains.

    Examples
    --------
    >>> from arrow_split.prefetch import Prefetcher
    >>> with Prefetcher(lambda source: source * 2, lookahead=2) as prefetcher:
    ...     for step in range(3):
    ...         prefetcher.submit(step, step + 10)
    ...     [prefetcher.get(step) for step in range(3)]
    [20, 22, 24]
    """

    def __init__(self, fetch: Callable[[SourceT], ResultT], *, lookahead: int = 1) -> None:
        fetch = _callable(fetch)
        self._state = _State(fetch, as_int("lookahead", lookahead, minimum=0))
        self._thread: threading.Thread | None = None
        weakref.finalize(self, self._state.stop)  # dropped without stop(): the thread ends

    @property
    def lookahead(self) -> int:
        """Results kept ready at most (one more per :meth:`get` waiting)."""
        return self._state.lookahead

    @property
    def ready_steps(self) -> list[int]:
        """The steps whose fetch is done (result or error), not yet taken."""
        with self._state.lock:
            return sorted(self._state.ready)

    @property
    def submitted_steps(self) -> list[int]:
        """The steps submitted and not yet taken (queued, running or ready)."""
        with self._state.lock:
            return sorted(self._state.sources)

    def submit(self, step: int, source: SourceT) -> None:
        """Queue ``fetch(source)`` for ``step``; it runs when the lookahead has room."""
        step = as_int("step", step, minimum=0)
        state = self._state
        with state.lock:
            self._check_running()
            if step in state.sources:
                msg = f"step {step} is already submitted; take it with `get({step})` first"
                raise OptionError(msg, key="step", got=str(step))
            state.sources[step] = state.queue[step] = source
            if self._thread is None:
                self._thread = threading.Thread(
                    target=state.work, name="arrow_split-prefetch", daemon=True
                )
                self._thread.start()
            state.lock.notify_all()

    def get(self, step: int, timeout: float | None = None) -> ResultT:
        """``step``'s result (waiting for its fetch), or the exception its fetch raised.

        Raises
        ------
        OptionError
            ``step`` was never submitted, was cancelled or taken already, the prefetcher is
            stopped, or ``timeout`` is not None or a number of seconds >= 0.
        TransportError
            ``timeout`` seconds passed first (the fetch goes on).
        """
        step = as_int("step", step, minimum=0)
        timeout = _seconds(timeout)
        state = self._state
        with state.lock:
            state.wanted.append(step)
            state.lock.notify_all()
            try:
                done = state.lock.wait_for(lambda: state.ended(step), timeout)
            finally:
                state.wanted.remove(step)
            if not done:
                msg = (
                    f"step {step}: its fetch did not finish within {timeout} s; wait longer, or "
                    "`cancel()` and fetch it again"
                )
                raise TransportError(msg, key="step", got=str(step))
            self._check_running()
            if step not in state.ready:
                raise _not_submitted(step, taken=step in state.taken)
            value, error = state.ready.pop(step)
            del state.sources[step]
            state.taken.append(step)
            state.lock.notify_all()
        if error is not None:
            _note(error, step)
            raise error
        return value  # type: ignore[return-value]

    def replace(self, fetch: Callable[[SourceT], ResultT]) -> None:
        """Fetch with ``fetch`` from now on, every step not yet taken again (a plan change)."""
        fetch = _callable(fetch)
        state = self._state
        with state.lock:
            self._check_running()
            state.fetch = fetch
            state.generation += 1
            state.ready.clear()
            state.queue = dict(sorted(state.sources.items()))
            state.lock.notify_all()

    def cancel(self) -> None:
        """Drop every step not yet taken; a ``get`` waiting for one raises OptionError."""
        with self._state.lock:
            self._state.drop()

    def stop(self, timeout: float | None = None) -> None:
        """Cancel, end the thread (after a running fetch returns, up to ``timeout`` seconds).

        A ``timeout`` that is not None or a number of seconds >= 0 raises OptionError first.
        """
        timeout = _seconds(timeout)
        self._state.stop()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> Prefetcher[SourceT, ResultT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _check_running(self) -> None:
        if self._state.stopped:
            msg = "the prefetcher is stopped; make a new one"
            raise OptionError(msg, expected="a running prefetcher", got="stopped")


def _callable(fetch: Callable[[SourceT], ResultT]) -> Callable[[SourceT], ResultT]:
    if not callable(fetch):
        msg = f"`fetch` must be a callable taking a step's source, got {describe(fetch)}"
        raise OptionTypeError(msg, key="fetch")
    return fetch


def _seconds(timeout: object) -> float | None:
    """``timeout`` as seconds to wait: None (no limit) or a number in [0, TIMEOUT_MAX]."""
    if timeout is None:
        return None
    seconds = as_real("timeout", timeout, "None or a number of seconds")
    if not 0 <= seconds <= threading.TIMEOUT_MAX:  # NaN too
        expected = f"None or a number of seconds in [0, {threading.TIMEOUT_MAX:g}]"
        raise mistake("option_value", key="timeout", expected=expected, got=str(seconds))
    return float(seconds)


def _not_submitted(step: int, *, taken: bool) -> OptionError:
    if taken:
        msg = (
            f"step {step} was already taken (a step's result is given once); `submit({step}, "
            "source)` it again to fetch it again"
        )
        return OptionError(msg, key="step", expected="a step not taken yet", got=str(step))
    msg = f"step {step} was not submitted (or was cancelled); `submit({step}, source)` it first"
    return OptionError(msg, key="step", expected="a submitted step", got=str(step))


def _note(error: BaseException, step: int) -> None:
    """Name ``step`` in ``error.__notes__``, in place of another step's note of the same error.

    Assigned as ``add_note`` would append (Python 3.10 has no ``add_note``).
    """
    notes = getattr(error, "__notes__", None)
    kept = [str(note) for note in notes] if isinstance(notes, list) else []
    error.__notes__ = [note for note in kept if not note.startswith(_NOTE)] + [f"{_NOTE}{step}"]
