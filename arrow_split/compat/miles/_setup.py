"""The drop-in in every process of a job: Ray's worker setup hook, or one environment variable.

miles runs its rollout manager and each train actor in Ray worker processes of their own, so an
``install()`` in the driver changes none of them. Two routes install it everywhere, with the
same options (docs/miles.md, "Every process of a job"):

- Ray: ``ray.init(runtime_env=runtime_env(...))`` names ``setup_worker`` as the
  ``worker_process_setup_hook``, which Ray calls in each worker before any task or actor code,
  and carries the options in :data:`ENV_VAR`.
- Launchers that only pass environment variables: set :data:`ENV_VAR` (:func:`environment`
  gives its value). The package installs ``arrow_split_miles.pth``, which in a process where the
  variable is set calls ``watch_imports``: the drop-in is installed right after the first
  import of miles' conversion or data module completes, whoever imports it and whenever.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any

from arrow_split import ColumnSpec, OptionError
from arrow_split._args import as_flag
from arrow_split.batch import spec_from_json, spec_to_json
from arrow_split.compat.miles._install import Installation, as_specs, current_installation

__all__ = [
    "ENV_VAR",
    "environment",
    "install_once",
    "options_from_environment",
    "runtime_env",
    "unwatch",
    "watch",
]

ENV_VAR = "ARROW_SPLIT_MILES"
"""Set (``"1"`` or a JSON object of ``install()``'s options) to install the drop-in everywhere."""

_FLAGS = ("strict_keys", "pad_to_dp", "verbose")
"""``install()``'s flags, carried in :data:`ENV_VAR` beside its ``specs``."""
_HOOK = "arrow_split.compat.miles.setup_worker"
_TRIGGERS = ("miles.ray.rollout.train_data_conversion", "miles.utils.data")
_LOG = logging.getLogger("arrow_split.compat.miles")


def _encode(specs: Iterable[ColumnSpec], strict_keys: bool, pad_to_dp: bool, verbose: bool) -> str:
    options = {
        "specs": [spec_to_json(spec) for spec in as_specs(specs)],
        "strict_keys": as_flag("strict_keys", strict_keys),
        "pad_to_dp": as_flag("pad_to_dp", pad_to_dp),
        "verbose": as_flag("verbose", verbose),
    }
    return json.dumps(options, sort_keys=True)


def environment(
    *,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
    verbose: bool = False,
) -> dict[str, str]:
    """The environment variable that installs the drop-in, with these options, in a process.

    Give it to a launcher (``env_vars``, a pod spec, ``export``); the options are
    :func:`~arrow_split.compat.miles.install`'s.
    """
    return {ENV_VAR: _encode(specs, strict_keys, pad_to_dp, verbose)}


def runtime_env(
    *,
    specs: Iterable[ColumnSpec] = (),
    strict_keys: bool = False,
    pad_to_dp: bool = False,
    verbose: bool = False,
) -> dict[str, Any]:
    """A Ray ``runtime_env`` that installs the drop-in in every worker process of the job.

    Pass it to ``ray.init(runtime_env=...)`` (merge it into yours); the options are
    :func:`~arrow_split.compat.miles.install`'s and reach every worker.
    """
    return {
        "worker_process_setup_hook": _HOOK,
        "env_vars": environment(
            specs=specs, strict_keys=strict_keys, pad_to_dp=pad_to_dp, verbose=verbose
        ),
    }


def options_from_environment(value: str | None = None) -> dict[str, Any]:
    """``install()``'s options from :data:`ENV_VAR` (``value``, or this process's variable)."""
    text = os.environ.get(ENV_VAR, "") if value is None else value
    if text.strip() in ("", "1"):
        return {"specs": [], **dict.fromkeys(_FLAGS, False)}
    try:
        stored = json.loads(text)
    except ValueError as exc:
        msg = f"`{ENV_VAR}` must be 1 or a JSON object of install() options ({exc})"
        raise OptionError(msg) from None
    known = {"specs", *_FLAGS}
    if not isinstance(stored, dict) or set(stored) - known:
        got = sorted(set(stored) - known) if isinstance(stored, dict) else type(stored).__name__
        msg = (
            f"`{ENV_VAR}` must be a JSON object with the members {sorted(known)}, got {got}; "
            "make it with `arrow_split.compat.miles.environment(...)`"
        )
        raise OptionError(msg)
    specs = stored.get("specs", [])
    if not isinstance(specs, list):
        msg = f"`{ENV_VAR}`: `specs` must be a JSON list, got {type(specs).__name__}"
        raise OptionError(msg)
    return {
        "specs": [spec_from_json(item, position, ENV_VAR) for position, item in enumerate(specs)],
        **{name: as_flag(f"{ENV_VAR} {name}", stored.get(name, False)) for name in _FLAGS},
    }


_LOCK = threading.RLock()

Install = Callable[..., Installation]


def install_once(install: Install) -> Installation:
    """``install(**options)`` with :data:`ENV_VAR`'s options, unless this process has them."""
    unwatch()  # installed now: the import watch (if the variable set one) has nothing left to do
    options = options_from_environment()
    with _LOCK:
        installed = current_installation()
        if installed is not None and _same(installed.options, options):
            return installed
        installation = install(**options)
    _LOG.info("arrow_split.compat.miles installed in process %d", os.getpid())
    return installation


def _same(installed: Mapping[str, Any], options: Mapping[str, Any]) -> bool:
    return all(installed.get(key) == options[key] for key in ("specs", "strict_keys", "pad_to_dp"))


class _Watch(importlib.abc.MetaPathFinder):
    """Calls ``on_import`` once the outermost import that loaded a trigger module ends."""

    def __init__(self, on_import: Callable[[], object]) -> None:
        self.on_import = on_import
        self.depth = 0
        self.due = False

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "miles" and not fullname.startswith("miles."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Counted(self, spec.loader)
                return spec
        return None

    def finished(self, fullname: str) -> None:
        self.due = self.due or fullname in _TRIGGERS
        if self.depth == 0 and self.due:
            unwatch()
            try:
                self.on_import()
            except Exception:  # never break the import that triggered it: say why, loudly
                _LOG.exception("arrow_split: installing the miles drop-in failed")


class _Counted(importlib.abc.Loader):
    """A loader that counts nested miles imports around the real loader's ``exec_module``."""

    def __init__(self, watch: _Watch, loader: Any) -> None:
        self.watch = watch
        self.loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return None if create is None else create(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.watch.depth += 1
        try:
            self.loader.exec_module(module)
        finally:
            self.watch.depth -= 1
        self.watch.finished(module.__name__)

    def __getattr__(self, name: str) -> Any:  # get_source, is_package, ... of the real loader
        return getattr(self.loader, name)


_WATCHES: list[_Watch] = []


def watch(on_import: Callable[[], object]) -> None:
    """Call ``on_import`` right after miles' conversion or data module is first imported.

    At once when one is imported already; once per process.
    """
    with _LOCK:
        if _WATCHES:
            return
        if any(name in sys.modules for name in _TRIGGERS):
            on_import()
            return
        watch = _Watch(on_import)
        _WATCHES.append(watch)
        sys.meta_path.insert(0, watch)


def unwatch() -> None:
    """Stop watching imports (idempotent)."""
    with _LOCK:
        for watch in _WATCHES:
            if watch in sys.meta_path:
                sys.meta_path.remove(watch)
        _WATCHES.clear()
