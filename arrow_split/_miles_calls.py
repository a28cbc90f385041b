"""miles' call shape on the core's functions of the same names: an error that points the way.

``arrow_split.split_train_data_by_dp_raw(data_or_batch, dp_size, *, balance_data)`` shares its
name with miles' ``split_train_data_by_dp_raw(args, data, dp_size)``, which
:mod:`arrow_split.compat.miles` provides. A call in miles' shape fails on its arguments; this
turns that failure into a message naming both calls. A call that binds is never touched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from arrow_split.errors import SchemaTypeError

__all__ = ["refuses_miles_calls"]

P = ParamSpec("P")
R = TypeVar("R")


def _miles_shaped(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
    """``(args, data, ...)``: a namespace of options first, then the train data."""
    if not args or isinstance(args[0], Mapping) or not hasattr(args[0], "__dict__"):
        return False
    if type(args[0]).__module__.startswith("arrow_split"):  # a batch or a shard
        return False
    second = args[1] if len(args) > 1 else kwargs.get("data")
    return isinstance(second, Mapping) or type(second).__module__.startswith("arrow_split")


def refuses_miles_calls(function: Callable[P, R]) -> Callable[P, R]:
    """``function``, with a miles-shaped call that fails refused with the right call named."""
    name = function.__name__

    @functools.wraps(function)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return function(*args, **kwargs)
        except TypeError:
            if not _miles_shaped(args, kwargs):
                raise
        msg = (
            f"`arrow_split.{name}` takes `(data_or_batch, dp_size, *, balance_data)`, not miles' "
            f"`(args, data, dp_size)`; for miles' signature call "
            f"`arrow_split.compat.miles.{name}(args, data, dp_size=...)`, or here "
            f"`arrow_split.{name}(data, dp_size, balance_data=args.balance_data)`"
        )
        raise SchemaTypeError(msg, key="data_or_batch") from None

    return checked
