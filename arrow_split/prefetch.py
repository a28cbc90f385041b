"""Fetch the next steps' data while this step trains: one thread, a bounded lookahead.

A :class:`Prefetcher` runs ``fetch(source)`` (a store get, a take, a conversion to the layout
the trainer wants: any callable) on one background thread, for each step submitted, in order,
keeping at most ``lookahead`` results ready that no :meth:`Prefetcher.get` has taken yet. The
step that needs the data calls ``get(step)``: it returns at once when the fetch is done, waits
otherwise, and raises the fetch's own exception (with a note naming the step) when it failed:
an error is never lost in the thread. :meth:`Prefetcher.replace` swaps the fetch (a plan change:
another ``dp_size`` or rank) and fetches every step not yet taken again with it;
:meth:`Prefetcher.cancel` drops them; :meth:`Prefetcher.stop` (or leaving the ``with`` block)
ends the thread. A fetch already running is not interrupted: its result is dropped.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from arrow_split._args import as_int, describe
from arrow_split.errors import OptionError, OptionTypeError, TransportError

__all__ = ["Prefetcher"]

SourceT = TypeVar("SourceT")
ResultT = TypeVar("ResultT")

_Done = tuple[ResultT | None, BaseException | None]
"""A fetch's result, or the exception it raised."""


class Prefetcher(Generic[SourceT, ResultT]):
    """Run ``fetch`` ahead of the steps that need it, on one thread.

    Parameters
    ----------
    fetch
        Called once per submitted step with its source, on the prefetch thread.
    lookahead
        Results kept ready (fetched, not yet taken): ``0`` fetches only while a ``get`` waits;
        ``1`` (the default) fetches step ``N + 1`` while step ``N`` trains.

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
        self._fetch = _callable(fetch)
        self._lookahead = as_int("lookahead", lookahead, minimum=0)
        self._lock = threading.Condition()
        self._queue: collections.deque[tuple[int, SourceT]] = collections.deque()
        self._sources: dict[int, SourceT] = {}  # every step submitted and not yet taken
        self._ready: dict[int, _Done[ResultT]] = {}
        self._running: int | None = None
        self._generation = 0
        self._waiting = 0
        self._stopped = False
        self._thread: threading.Thread | None = None

    @property
    def lookahead(self) -> int:
        """Results kept ready at most (one more while a :meth:`get` waits)."""
        return self._lookahead

    @property
    def ready_steps(self) -> list[int]:
        """The steps whose fetch is done (result or error), not yet taken."""
        with self._lock:
            return sorted(self._ready)

    @property
    def submitted_steps(self) -> list[int]:
        """The steps submitted and not yet taken (queued, running or ready)."""
        with self._lock:
            return sorted(self._sources)

    def submit(self, step: int, source: SourceT) -> None:
        """Queue ``fetch(source)`` for ``step``; it runs when the lookahead has room."""
        step = as_int("step", step, minimum=0)
        with self._lock:
            self._check_running()
            if step in self._sources:
                msg = f"step {step} is already submitted; take it with `get({step})` first"
                raise OptionError(msg, key="step", got=str(step))
            self._sources[step] = source
            self._queue.append((step, source))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="arrow_split-prefetch", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()

    def get(self, step: int, timeout: float | None = None) -> ResultT:
        """``step``'s result (waiting for its fetch), or the exception its fetch raised.

        Raises
        ------
        OptionError
            ``step`` was never submitted, was cancelled, or the prefetcher is stopped.
        TransportError
            ``timeout`` seconds passed first (the fetch goes on).
        """
        step = as_int("step", step, minimum=0)
        with self._lock:
            self._waiting += 1
            self._lock.notify_all()
            try:
                done = self._lock.wait_for(lambda: self._ended(step), timeout)
            finally:
                self._waiting -= 1
            if not done:
                msg = (
                    f"step {step}: its fetch did not finish within {timeout} s; wait longer, or "
                    "`cancel()` and fetch it again"
                )
                raise TransportError(msg, key="step", got=str(step))
            self._check_running()
            if step not in self._ready:
                msg = (
                    f"step {step} was not submitted (or was cancelled); `submit({step}, "
                    "source)` it first"
                )
                raise OptionError(msg, key="step", got=str(step))
            value, error = self._ready.pop(step)
            del self._sources[step]
            self._lock.notify_all()
        if error is not None:
            error.add_note(f"raised by the prefetched fetch of step {step}")
            raise error
        return value  # type: ignore[return-value]

    def replace(self, fetch: Callable[[SourceT], ResultT]) -> None:
        """Fetch with ``fetch`` from now on, every step not yet taken again (a plan change)."""
        fetch = _callable(fetch)
        with self._lock:
            self._check_running()
            self._fetch = fetch
            self._generation += 1
            self._ready.clear()
            self._queue = collections.deque(sorted(self._sources.items()))
            self._lock.notify_all()

    def cancel(self) -> None:
        """Drop every step not yet taken; a ``get`` waiting for one raises OptionError."""
        with self._lock:
            self._generation += 1
            self._ready.clear()
            self._sources.clear()
            self._queue.clear()
            self._lock.notify_all()

    def stop(self, timeout: float | None = None) -> None:
        """Cancel, end the thread (after a running fetch returns, up to ``timeout`` seconds)."""
        self.cancel()
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> Prefetcher[SourceT, ResultT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _check_running(self) -> None:
        if self._stopped:
            msg = "the prefetcher is stopped; make a new one"
            raise OptionError(msg, expected="a running prefetcher", got="stopped")

    def _ended(self, step: int) -> bool:
        """Whether a ``get(step)`` stops waiting (under the lock)."""
        return self._stopped or step in self._ready or step not in self._sources

    def _has_work(self) -> bool:
        room = len(self._ready) < self._lookahead or self._waiting > 0
        return self._stopped or (bool(self._queue) and room)

    def _work(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(self._has_work)
                if self._stopped:
                    return
                step, source = self._queue.popleft()
                fetch, generation = self._fetch, self._generation
                self._running = step
            try:
                done: _Done[ResultT] = (fetch(source), None)
            except Exception as error:  # handed to the step that needs it
                done = (None, error)
            with self._lock:
                self._running = None
                if generation == self._generation and step in self._sources:
                    self._ready[step] = done
                self._lock.notify_all()
            del done, source


def _callable(fetch: Callable[[SourceT], ResultT]) -> Callable[[SourceT], ResultT]:
    if not callable(fetch):
        msg = f"`fetch` must be a callable taking a step's source, got {describe(fetch)}"
        raise OptionTypeError(msg, key="fetch")
    return fetch
