"""miles' object store under the drop-in: a whole train-data dict put through it is one Arrow batch.

miles' delayed mode puts the train data inline, through its store singleton
(``miles.utils.object_store``: ``get_instance().put(value=data, value_spec=...)``), not through
``split_train_data_by_dp``. :func:`patch_store` rebinds ``put`` and ``get`` on miles' Ray store
class, so every instance (one built before the patch too) converts such a dict once, validated,
and puts it as one Arrow batch; a delayed rank then takes only its rows. Any other value passes
through untouched, and a ``get`` of a converted batch by code the drop-in does not patch returns
miles' dict, as miles would have. ``remove`` is miles' own: it works on the reference returned.
Where miles has its Mooncake store class, its ``put``, ``get`` and ``remove`` are rebound too
(:mod:`._mooncake`): the batch goes into Mooncake as Arrow buffers, with the same rules.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import logging
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from arrow_split import KNOWN_COLUMNS, InstallError, RolloutBatch
from arrow_split.compat.miles._convert import RANK_DICT_KEYS, to_batch
from arrow_split.compat.miles._keys import to_miles_keys
from arrow_split.compat.miles._mooncake import MOONCAKE_STORE, mooncake_methods
from arrow_split.schema import role_column

__all__ = [
    "PutBatch",
    "STORE_MODULE",
    "StoreOptions",
    "check_store",
    "patch_store",
    "store_instance",
    "unpatch_store",
]

STORE_MODULE = "miles.utils.object_store"
"""The module of miles' store singleton, its interface and its backends."""

_RAY_STORE = "RayObjectStore"
_LENGTH_SOURCE = str(role_column(KNOWN_COLUMNS, "length_source"))
_LOG = logging.getLogger("arrow_split.compat.miles")

StoreOptions = Callable[[], Mapping[str, Any]]
"""Gives the current installation's ``specs`` and ``strict_keys`` at each put."""

# (class, name) -> miles' own method, while the store is patched
_ORIGINALS: dict[tuple[type, str], Callable[..., Any] | None] = {}


def _parameters(function: object) -> list[str]:
    try:
        return list(inspect.signature(function).parameters)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []


def check_store(module: ModuleType) -> type:
    """The Ray store class of miles, if its interface is the one the drop-in knows.

    Raises InstallError (naming each difference) otherwise.
    """
    store = getattr(module, _RAY_STORE, None)
    result = getattr(module, "ObjectStoreGetResult", None)
    problems = []
    if not isinstance(store, type):
        problems.append(f"`{STORE_MODULE}.{_RAY_STORE}` is missing")
    else:
        if _parameters(getattr(store, "put", None))[:3] != ["self", "value", "value_spec"]:
            problems.append(f"`{_RAY_STORE}.put` is not `put(self, value, value_spec=None)`")
        if _parameters(getattr(store, "get", None))[:2] != ["self", "ref"]:
            problems.append(f"`{_RAY_STORE}.get` is not `get(self, ref)`")
    mooncake = getattr(module, MOONCAKE_STORE, None)
    if mooncake is not None and (
        not isinstance(mooncake, type)
        or _parameters(getattr(mooncake, "put", None))[:3] != ["self", "value", "value_spec"]
        or _parameters(getattr(mooncake, "get", None))[:2] != ["self", "ref"]
        or _parameters(getattr(mooncake, "remove", None))[:2] != ["self", "ref"]
    ):
        problems.append(
            f"`{MOONCAKE_STORE}` is not `put(self, value, value_spec=None)` / `get(self, ref)` / "
            "`remove(self, ref)`"
        )
    if not isinstance(result, type) or _parameters(result)[:2] != ["value", "release_fn"]:
        problems.append("`ObjectStoreGetResult(value, release_fn)` is missing")
    if problems or not isinstance(store, type):
        msg = (
            f"install() cannot patch miles' object store: {'; '.join(problems)}; this miles' "
            "store interface is not the one the drop-in knows, so nothing was patched: pin a "
            "miles whose store has `put(value, value_spec=None)` / `get(ref)`, or call "
            "arrow_split.compat.miles' functions directly"
        )
        raise InstallError(msg, key="miles.utils.object_store")
    return store


def store_instance() -> object:
    """Miles' store singleton in this process (``get_instance()``)."""
    return importlib.import_module(STORE_MODULE).get_instance()


def _whole_batch(value: object, options: StoreOptions) -> RolloutBatch | None:
    """``value`` converted if it is a whole batch's train-data dict, else ``None``.

    A rank's shard holds ``partition``: it is not a whole batch.
    """
    if not isinstance(value, Mapping) or _LENGTH_SOURCE not in value:
        return None
    if any(key in value for key in RANK_DICT_KEYS):
        return None
    current = options()
    specs, strict_keys = current["specs"], current["strict_keys"]
    return to_batch(argparse.Namespace(), value, specs, strict_keys=strict_keys)


PutBatch = Callable[[RolloutBatch], Any]
"""Puts a whole batch (no plan) and returns the reference miles' callers get."""


def patch_store(module: ModuleType, options: StoreOptions, put_batch: PutBatch) -> list[str]:
    """Bind the converting ``put`` and ``get`` on miles' Ray store class; the names bound."""
    store = check_store(module)
    names = [f"{STORE_MODULE}.{_RAY_STORE}.put", f"{STORE_MODULE}.{_RAY_STORE}.get"]
    mooncake = getattr(module, MOONCAKE_STORE, None)
    if isinstance(mooncake, type):
        names += [f"{STORE_MODULE}.{MOONCAKE_STORE}.{name}" for name in ("put", "get", "remove")]
    if (store, "put") in _ORIGINALS:  # patched by an earlier installation: options are read live
        return names
    put, get = store.put, store.get  # type: ignore[attr-defined]
    result_type = module.ObjectStoreGetResult
    whole_batch = functools.partial(_whole_batch, options=options)

    def arrow_put(self: Any, value: Any, value_spec: Any = None) -> Any:
        batch = whole_batch(value)
        return put(self, value, value_spec) if batch is None else put_batch(batch)

    def arrow_get(self: Any, ref: Any) -> Any:
        result = get(self, ref)
        value = result.value
        if not isinstance(value, RolloutBatch):
            return result
        train_data = to_miles_keys(value, dict(value.to_train_data()))
        return result_type(value=train_data, release_fn=lambda _: result.__exit__(None, None, None))

    _bind(store, {"put": arrow_put, "get": arrow_get})
    if isinstance(mooncake, type):
        own = {name: getattr(mooncake, name) for name in ("put", "get", "remove")}
        _bind(mooncake, mooncake_methods(module, own, whole_batch))
    return names


def _bind(store: type, methods: Mapping[str, Callable[..., Any]]) -> None:
    """Set each method on ``store``, keeping miles' own for :func:`unpatch_store`."""
    for name, method in methods.items():
        original = vars(store).get(name)  # None: inherited, deleted again on undo
        method.__qualname__ = f"{store.__qualname__}.{name}"
        method.__doc__ = f"arrow_split's drop-in around miles' `{store.__name__}.{name}`."
        _ORIGINALS[(store, name)] = original
        setattr(store, name, method)


def unpatch_store() -> None:
    """Put miles' own methods back (idempotent)."""
    for (store, name), original in list(_ORIGINALS.items()):
        if original is None:
            delattr(store, name)
        else:
            setattr(store, name, original)
    _ORIGINALS.clear()
