"""Batch-global values in a journal: tagged JSON by their documented shape, never a pickle.

A batch-global value has one of five shapes (:mod:`arrow_split._codecs.globals`); a journal
stores it as a JSON object with one key, the shape: ``{"int": 3}``, ``{"int_list": [1, 2]}``,
``{"int_map": [[key, value], ...]}`` (JSON object keys would be strings),
``{"str_list": ["a"]}`` and ``{"float_per_sample": "<base64 of little-endian float64>"}`` (NaN
and infinity kept exactly). Reading a value back checks it with the rules of
:func:`~arrow_split._codecs.globals.check_batch_global`: a tag that is not the spec's shape, or a
value that breaks the rules, is a :class:`~arrow_split.errors.JournalError`.

Format-1 journals stored the values as a base64 pickle; :func:`unpickle_v1` reads those with an
unpickler that builds plain data only (ints, floats, strings, lists, dicts and numpy arrays of
numbers): a pickle that names any other callable is refused, so reading one runs no code.
"""

from __future__ import annotations

import base64
import binascii
import io
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from arrow_split._codecs import check_batch_global, check_per_sample_values
from arrow_split.errors import ArrowSplitError, JournalError
from arrow_split.schema import ColumnSpec

__all__ = ["check_v1_value", "pack_value", "unpack_value", "unpickle_v1"]


def pack_value(spec: ColumnSpec, value: object) -> dict[str, object]:
    """A checked batch-global value as tagged JSON (see the module docstring)."""
    shape = spec.global_shape or "int"
    if shape == "float_per_sample":
        floats = np.ascontiguousarray(np.asarray(value, dtype="<f8"))
        return {shape: base64.b64encode(floats.tobytes()).decode("ascii")}
    if shape == "int_map":
        return {shape: [[int(k), int(v)] for k, v in value.items()]}  # type: ignore[attr-defined]
    if shape == "int":
        return {shape: int(value)}  # type: ignore[call-overload]
    return {shape: list(value)}  # type: ignore[call-overload]


def unpack_value(spec: ColumnSpec, stored: object, allow_nonfinite: bool) -> object:
    """The value :func:`pack_value` stored, checked against ``spec``.

    Raises
    ------
    JournalError
        The value is not tagged with the spec's shape, or breaks the shape's rules.
    """
    shape = spec.global_shape or "int"
    if not isinstance(stored, dict) or list(stored) != [shape]:
        msg = (
            f"batch-global key `{spec.name}` must be stored as {{{shape!r}: ...}}, "
            f"got {stored!r:.60}"
        )
        raise JournalError(msg)
    item = stored[shape]
    try:
        if shape == "float_per_sample":
            value: Any = _floats(spec, item)
            check_per_sample_values(spec, value, allow_nonfinite)
            value.flags.writeable = False
            return value
        if shape == "int_map":
            item = _pairs(spec, item)
        return check_batch_global(spec, item, 0, allow_nonfinite)
    except ArrowSplitError as exc:
        msg = f"batch-global key `{spec.name}` holds a bad value: {exc}"
        raise JournalError(msg) from None


def _floats(spec: ColumnSpec, item: object) -> np.ndarray:
    try:
        raw = base64.b64decode(str(item) if isinstance(item, str) else b"!", validate=True)
    except (binascii.Error, ValueError):
        raw = b"!"
    if len(raw) % 8:
        msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not base64 float64 values"
        raise JournalError(msg)
    return np.frombuffer(raw, dtype="<f8").astype(np.float64)


def _pairs(spec: ColumnSpec, item: object) -> dict[object, object]:
    if not isinstance(item, list) or not all(
        isinstance(pair, list) and len(pair) == 2 for pair in item
    ):
        msg = f"batch-global key `{spec.name}` holds {item!r:.40}, not a list of [key, value]"
        raise JournalError(msg)
    pairs = {pair[0]: pair[1] for pair in item}
    if len(pairs) != len(item):
        msg = f"batch-global key `{spec.name}` holds a key twice: {item!r:.60}"
        raise JournalError(msg)
    return pairs


_PLAIN = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("builtins", "list"),
    ("builtins", "dict"),
}


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain data only: every global it may name is in :data:`_PLAIN`."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _PLAIN:
            msg = f"refers to `{module}.{name}`, which a journal's value never holds"
            raise pickle.UnpicklingError(msg)
        return super().find_class(module, name)


def unpickle_v1(text: object) -> object:
    """A format-1 value (a base64 pickle), built as plain data, with no code run.

    Raises
    ------
    JournalError
        The text is not base64, not a pickle, or a pickle of anything but plain data.
    """
    try:
        raw = base64.b64decode(str(text) if isinstance(text, str) else b"!", validate=True)
        value = _PlainUnpickler(io.BytesIO(raw)).load()
    except Exception as exc:
        msg = f"a format-1 batch-global value does not read: {type(exc).__name__}: {exc}"
        raise JournalError(msg) from None
    if isinstance(value, np.ndarray) and value.dtype.kind not in "biuf":
        msg = f"a format-1 batch-global value is an array of dtype {value.dtype}"
        raise JournalError(msg)
    return value


def check_v1_value(spec: ColumnSpec, value: object, allow_nonfinite: bool) -> object:
    """A format-1 value checked against ``spec`` (a :class:`JournalError` if it breaks a rule)."""
    try:
        if spec.global_shape == "float_per_sample":
            check_per_sample_values(spec, value, allow_nonfinite)
            floats = np.asarray(value, dtype=np.float64).copy()
            floats.flags.writeable = False
            return floats
        if isinstance(value, Mapping) and spec.global_shape != "int_map":
            msg = f"batch-global key `{spec.name}` holds a dict"
            raise JournalError(msg)
        return check_batch_global(spec, value, 0, allow_nonfinite)
    except ArrowSplitError as exc:
        if isinstance(exc, JournalError):
            raise
        msg = f"batch-global key `{spec.name}` holds a bad value: {exc}"
        raise JournalError(msg) from None
