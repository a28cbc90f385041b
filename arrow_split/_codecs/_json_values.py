"""Object values as JSON text, exactly: what JSON lacks is written as a tagged object.

A ``json`` object column keeps one Arrow type (``large_string``) for the values RL frameworks
put in metadata: besides JSON's own (None, bool, int, float, str, list, dict of str keys), a
tuple, a NaN or an infinity, and a numpy scalar (bool, int, uint, float) are written as
``{"__arrow_split__": "tuple", "items": [...]}``, ``{"__arrow_split__": "float", "value":
"nan"}`` and ``{"__arrow_split__": "numpy", "dtype": "float32", "value": 0.5}``, and read back as
the same type and value. Anything else (a set, a class instance, a dict holding the tag key, a
lone surrogate, an int of more than about 3,900 digits, nesting deeper than 200) does not fit:
the column falls back to pickles.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from arrow_split.errors import DumpError

__all__ = ["fits_json", "from_json_text", "json_text", "utf8"]

TAG = "__arrow_split__"
"""The key of a tagged object; a user's dict holding it does not fit JSON (it is pickled)."""

_DEPTH = 200
"""Values nested deeper are pickled: ``json`` encodes and decodes by recursion."""

_INT_BITS = 13_000
"""Ints of more bits are pickled: about 3,900 digits, below Python's limit of 4,300 digits for
``int`` <-> ``str`` (``sys.set_int_max_str_digits``), which ``json`` is held to both ways."""

_NUMPY_NAMES = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64"
_NUMPY = {name: np.dtype(name).type for name in _NUMPY_NAMES.split()}
"""The numpy scalar types written as tagged JSON, by dtype name."""

_NONFINITE = ("nan", "inf", "-inf")


def utf8(text: str) -> bool:
    """Whether ``text`` is valid Unicode for UTF-8 (no lone surrogate, which Arrow cannot store)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _leaf_fits(value: object) -> bool | None:
    """Whether a non-container fits (``None``: ``value`` is a list, tuple or dict)."""
    kind = type(value)
    if value is None or kind in (bool, float):
        return True
    if kind is str:
        return utf8(value)  # type: ignore[arg-type]
    if kind is int:
        return bool(value.bit_length() <= _INT_BITS)  # type: ignore[attr-defined]
    if kind in (list, tuple, dict):
        return None
    return isinstance(value, np.generic) and value.dtype.name in _NUMPY


def fits_json(value: object) -> bool:
    """Whether :func:`json_text` keeps ``value`` exactly (same types, same values); no recursion."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        leaf = _leaf_fits(item)
        if leaf is not None:
            if not leaf:
                return False
            continue
        if depth >= _DEPTH:
            return False
        if type(item) is dict:
            for key, child in item.items():
                if type(key) is not str or key == TAG or not utf8(key):
                    return False
                stack.append((child, depth + 1))
        else:
            stack.extend((child, depth + 1) for child in item)  # type: ignore[attr-defined]
    return True


def _tagged(value: object) -> object:
    """``value`` with what JSON lacks as tagged objects (``value`` fits: depth is bounded)."""
    kind = type(value)
    if kind is float and not math.isfinite(value):  # type: ignore[arg-type]
        return {TAG: "float", "value": repr(value)}
    if kind is list:
        return [_tagged(item) for item in value]  # type: ignore[attr-defined]
    if kind is tuple:
        return {TAG: "tuple", "items": [_tagged(item) for item in value]}  # type: ignore[attr-defined]
    if kind is dict:
        return {key: _tagged(item) for key, item in value.items()}  # type: ignore[attr-defined]
    if isinstance(value, np.generic):
        return {TAG: "numpy", "dtype": value.dtype.name, "value": _tagged(value.item())}
    return value


def json_text(value: object) -> str | None:
    """The JSON text of a value that :func:`fits_json` (``None`` for ``None``: a null row)."""
    if value is None:
        return None
    return json.dumps(_tagged(value), ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _untagged(obj: dict[str, Any]) -> object:
    """A JSON object as read: a tagged one becomes its value; a bad tag is a ``ValueError``."""
    tag = obj.get(TAG)
    if tag is None:
        return obj
    fields = set(obj)
    if tag == "tuple" and fields == {TAG, "items"} and type(obj["items"]) is list:
        return tuple(obj["items"])
    if tag == "float" and fields == {TAG, "value"} and obj["value"] in _NONFINITE:
        return float(obj["value"])
    if tag == "numpy" and fields == {TAG, "dtype", "value"} and obj["dtype"] in _NUMPY:
        value = obj["value"]
        if type(value) in (bool, int, float):
            try:
                return _NUMPY[obj["dtype"]](value)
            except (OverflowError, ValueError, TypeError):
                pass
    msg = f"a tagged value that arrow_split does not write: {obj!r:.80}"
    raise DumpError(msg)  # a ValueError: the caller names the column and the sample


def from_json_text(text: str) -> object:
    """The value of :func:`json_text`'s text (``ValueError``, ``RecursionError`` if corrupt)."""
    return json.loads(text, object_hook=_untagged)
