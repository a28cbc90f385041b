"""A train rank's prefetcher over :func:`process_rollout_data`: step N+1 taken while N trains.

:class:`RolloutPrefetcher` runs, on one thread, the object store get and the take of this rank's
rows (:func:`arrow_split.ray.process_rollout_data`), then ``convert`` (the trainer's layout, for
example :func:`arrow_split.torch.to_tensors`) for each step submitted, at most ``lookahead``
steps ahead (:class:`arrow_split.prefetch.Prefetcher`). :meth:`RolloutPrefetcher.replan` is the
elastic case: another ``dp_size`` or rank; every step not yet taken is taken again for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from arrow_split import OptionTypeError, Shard
from arrow_split._args import as_keywords, check_dp_rank, check_dp_size, describe
from arrow_split.prefetch import Prefetcher
from arrow_split.ray._handoff import process_rollout_data

__all__ = ["RolloutPrefetcher"]

ResultT = TypeVar("ResultT")


class RolloutPrefetcher(Generic[ResultT]):
    """Prefetch this rank's shard of each step's put (and its conversion) on one thread.

    Parameters
    ----------
    dp_rank, dp_size
        This rank and the number of data-parallel ranks.
    convert
        Called on the thread with each step's :class:`~arrow_split.Shard` (``None``: the shard).
    lookahead
        Steps fetched ahead of the one training (:class:`~arrow_split.prefetch.Prefetcher`).
    **options
        Keywords of :func:`process_rollout_data` (``balance_data``, ``witness_ids``, ...; not
        ``step``, which the prefetcher passes): another name, or an ``on_fetch`` that is not
        callable, raises OptionError here.

    Examples
    --------
    ``submit`` a step's reference as soon as the driver has put it; ``get`` it when it trains::

        with RolloutPrefetcher(rank, size, convert=to_tensors) as prefetcher:
            prefetcher.submit(0, refs_0)
            for step in range(steps):
                prefetcher.submit(step + 1, next_refs())   # fetched while this step trains
                train(prefetcher.get(step))
    """

    def __init__(
        self,
        dp_rank: int,
        dp_size: int,
        *,
        convert: Callable[[Shard], ResultT] | None = None,
        lookahead: int = 1,
        **options: Any,
    ) -> None:
        size = check_dp_size(dp_size)
        rank = check_dp_rank(dp_rank, size)
        if convert is not None and not callable(convert):
            msg = f"`convert` must be None or a callable taking a Shard, got {describe(convert)}"
            raise OptionTypeError(msg, key="convert")
        self._convert = convert
        self._options = as_keywords(
            "process_rollout_data",
            options,
            process_rollout_data,
            reserved=("step",),
            callbacks=("on_fetch",),
        )
        self._prefetcher: Prefetcher[tuple[int, Any], ResultT] = Prefetcher(
            self._fetch_for(rank, size, self._options), lookahead=lookahead
        )
        self.dp_rank, self.dp_size = rank, size

    def _fetch_for(
        self, rank: int, size: int, options: dict[str, Any]
    ) -> Callable[[tuple[int, Any]], ResultT]:
        """The fetch of a ``(step, refs_or_ref)`` for rank ``rank`` of ``size`` (parsed)."""
        convert = self._convert  # a fetch running keeps its own; it never holds the prefetcher

        def fetch(item: tuple[int, Any]) -> Any:
            step, refs_or_ref = item
            shard = process_rollout_data(refs_or_ref, rank, size, step=step, **options)
            return shard if convert is None else convert(shard)

        return fetch

    def submit(self, step: int, refs_or_ref: Any) -> None:
        """Queue step ``step``: what :func:`split_train_data_by_dp` returned for it."""
        self._prefetcher.submit(step, (step, refs_or_ref))

    def get(self, step: int, timeout: float | None = None) -> ResultT:
        """Step ``step``'s converted shard; what its fetch raised, raised here."""
        return self._prefetcher.get(step, timeout)

    def replan(self, dp_rank: int, dp_size: int) -> None:
        """Take every step not yet taken again as rank ``dp_rank`` of ``dp_size`` (elastic DP).

        A delayed put is split again (``resplit=True``); an eager list of another size raises
        PlanError at the step that needs it. A bad place, or a stopped prefetcher, raises
        before anything changes.
        """
        size = check_dp_size(dp_size)
        rank = check_dp_rank(dp_rank, size)
        options = {**self._options, "resplit": True}
        self._prefetcher.replace(self._fetch_for(rank, size, options))  # raises if stopped
        self._options, self.dp_rank, self.dp_size = options, rank, size

    def cancel(self) -> None:
        """Drop every step not yet taken."""
        self._prefetcher.cancel()

    def stop(self, timeout: float | None = None) -> None:
        """Cancel and end the thread."""
        self._prefetcher.stop(timeout)

    def __enter__(self) -> RolloutPrefetcher[ResultT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
