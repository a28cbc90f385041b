"""The miles drop-in's prefetch: a train actor's ``get_rollout_data`` path, one step ahead.

miles' train actor calls ``get_rollout_data(args, rollout_data_ref, witness_info)``, which calls
``process_rollout_data(args, ref, dp_rank, dp_size, witness_info)`` (the store get and the take)
and then converts the dict; the step waits for all of it. :class:`MilesPrefetcher` runs that
fetch (and an optional ``convert`` of the dict) on one thread as soon as a rollout's reference is
known (:meth:`MilesPrefetcher.submit`), so that :meth:`MilesPrefetcher.get_rollout_data`, called
where miles calls its own, finds it done; a rollout never submitted is fetched there and then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from arrow_split import OptionTypeError
from arrow_split._args import as_int, as_keywords, check_dp_rank, check_dp_size, describe
from arrow_split.prefetch import Prefetcher

__all__ = ["MilesPrefetcher", "ProcessRolloutData"]

ProcessRolloutData = Callable[..., tuple[dict[str, Any], Any]]
"""``process_rollout_data(args, ref, dp_rank, dp_size, witness_info, **options)``'s shape."""


class MilesPrefetcher:
    """Prefetch a miles train rank's rollouts: ``(rollout_data, store_get_result)`` per rollout.

    Parameters
    ----------
    args
        miles' arguments (as its ``process_rollout_data`` takes them).
    dp_rank, dp_size
        This rank's effective data-parallel rank and size.
    lookahead
        Rollouts fetched ahead of the one training.
    convert
        Called on the thread with each ``rollout_data`` dict (the actor's conversion to tensors);
        its result replaces the dict. ``None``: the dict as it is.
    process
        The fetch: the drop-in's ``process_rollout_data`` (the package passes its own: this
        module is imported by it, and imports nothing of it back).
    **options
        Keywords of ``process`` (``specs``, ``strict_keys``, ``pad_to_dp``...): another name,
        or an ``on_batch_lengths`` that is not callable, raises OptionError here.
    """

    def __init__(
        self,
        args: Any,
        dp_rank: int,
        dp_size: int,
        *,
        lookahead: int = 1,
        convert: Callable[[dict[str, Any]], Any] | None = None,
        process: ProcessRolloutData,
        **options: Any,
    ) -> None:
        size = check_dp_size(dp_size)
        rank = check_dp_rank(dp_rank, size)
        if not callable(process):
            msg = f"`process` must be a callable, got {describe(process)}"
            raise OptionTypeError(msg, key="process")
        if convert is not None and not callable(convert):
            msg = f"`convert` must be None or a callable, got {describe(convert)}"
            raise OptionTypeError(msg, key="convert")
        self._args, self._convert, self._process = args, convert, process
        self._options = as_keywords(
            "process_rollout_data", options, process, callbacks=("on_batch_lengths",)
        )
        self._prefetcher: Prefetcher[tuple[Any, Any], tuple[Any, Any]] = Prefetcher(
            self._fetch_for(rank, size), lookahead=lookahead
        )
        self.dp_rank, self.dp_size = rank, size

    def _fetch_for(self, rank: int, size: int) -> Callable[[tuple[Any, Any]], tuple[Any, Any]]:
        """The fetch of a ``(rollout_data_ref, witness_info)`` for rank ``rank`` of ``size``."""
        args, process, convert, options = self._args, self._process, self._convert, self._options

        def fetch(item: tuple[Any, Any]) -> tuple[Any, Any]:  # never holds the prefetcher
            ref, witness_info = item
            rollout_data, result = process(args, ref, rank, size, witness_info, **options)
            if convert is not None:
                rollout_data = convert(rollout_data)
            return rollout_data, result

        return fetch

    def submit(self, rollout_id: int, rollout_data_ref: Any, witness_info: Any = None) -> None:
        """Start fetching rollout ``rollout_id`` (its reference, as ``train`` gets it)."""
        rollout_id = as_int("rollout_id", rollout_id, minimum=0)
        self._prefetcher.submit(rollout_id, (rollout_data_ref, witness_info))

    def get_rollout_data(
        self, rollout_id: int, rollout_data_ref: Any = None, witness_info: Any = None
    ) -> tuple[Any, Any]:
        """``(rollout_data, store_get_result)`` of rollout ``rollout_id``, prefetched if submitted.

        A rollout not submitted is submitted now (``rollout_data_ref`` needed); what its fetch
        raised is raised here, the rollout named in a note.
        """
        rollout_id = as_int("rollout_id", rollout_id, minimum=0)
        if rollout_id not in self._prefetcher.submitted_steps:
            self.submit(rollout_id, rollout_data_ref, witness_info)
        return self._prefetcher.get(rollout_id)

    def replan(self, dp_rank: int, dp_size: int) -> None:
        """Fetch every rollout not yet taken again as rank ``dp_rank`` of ``dp_size``.

        A bad place, or a stopped prefetcher, raises before anything changes.
        """
        size = check_dp_size(dp_size)
        rank = check_dp_rank(dp_rank, size)
        self._prefetcher.replace(self._fetch_for(rank, size))  # raises if stopped
        self.dp_rank, self.dp_size = rank, size

    def cancel(self) -> None:
        """Drop every rollout not yet taken."""
        self._prefetcher.cancel()

    def stop(self, timeout: float | None = None) -> None:
        """Cancel and end the thread."""
        self._prefetcher.stop(timeout)

    def __enter__(self) -> MilesPrefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
