"""The hint of an unknown key's error: a spec that fits its values, and a close known name.

Nothing here decides a column's kind (unknown keys are never guessed into a batch): the hint is
text for the person who declares the key. It reads the values only to word the suggestion.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from arrow_split.schema import LengthRule

__all__ = ["unknown_key_in", "unknown_key_message"]


def unknown_key_message(
    key: str,
    value: object,
    known: Collection[str],
    lengths: Mapping[str, Sequence[int]] | None = None,
) -> str:
    """The message for ``key``, unknown: a spec fitting ``value``'s shape, a close known key.

    ``lengths``: by length rule (``response`` first, then ``tokens``), each sample's length,
    when the data has them, to count the samples and name a per-token key's length rule.
    """
    # a key of another type (a hostile dict) gets the message, with no name to compare
    close = (
        difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
        if isinstance(key, str)
        else []
    )
    guess = None if value is _MISSING else _fitting_spec(key, value, lengths or {})
    text = f"unknown key `{key}`: arrow_split does not guess a column's kind; declare it, e.g. "
    if guess is None:
        text += (
            f'`specs=[ColumnSpec("{key}", "per_sample_scalar", pa.float64())]` for one '
            f'number per sample, or `ColumnSpec("{key}", "per_sample_object")` for any object'
        )
    else:
        line, what = guess
        text += f"`specs=[{line}]` ({what})"
    if close:
        text += f"; or did you mean the known key `{close[0]}`?"
    return text


def unknown_key_in(key: str, data: Mapping[str, Any] | None, known: Mapping[str, Any]) -> str:
    """The message for ``key`` of ``data`` (if given, its values word the hint), unknown."""
    if data is None or key not in data:
        return unknown_key_message(key, _MISSING, known)
    return unknown_key_message(key, data[key], known, _sample_lengths(data, known))


def _sample_lengths(data: Mapping[str, Any], known: Mapping[str, Any]) -> dict[str, list[int]]:
    """Token and response lengths per sample, where ``data`` has them plainly (for a hint).

    The columns are the ``known`` specs' length source and response lengths, found by role.
    """
    roles = {spec.role: name for name, spec in known.items() if spec.role is not None}
    response, tokens = _RULES
    lengths: dict[str, list[int]] = {}
    with contextlib.suppress(KeyError, TypeError, ValueError):
        lengths[response] = [int(length) for length in data[roles["response_length"]]]
    try:
        return {**lengths, tokens: [len(sample) for sample in data[roles["length_source"]]]}
    except (KeyError, TypeError):
        return {}


_RULES: tuple[LengthRule, LengthRule] = ("response", "tokens")
"""The length rules a hint counts samples by, in the order it reads them."""


_MISSING: Any = object()
"""``value`` when the caller has only the key."""


def _is_number(item: object) -> bool:
    return isinstance(item, (int, float, np.integer, np.floating)) or (
        getattr(item, "ndim", None) == 0 and hasattr(item, "dtype")
    )


def _ndim(item: object) -> int | None:
    """Dimensions of a numpy array or a torch tensor, of a list of numbers (1); else ``None``."""
    ndim = getattr(item, "ndim", None)
    if isinstance(ndim, int) and hasattr(item, "shape"):
        return ndim
    if isinstance(item, (list, tuple)):
        if all(_is_number(element) for element in item):
            return 1
        if all(isinstance(element, (list, tuple)) for element in item):
            return 2
    return None


def _fitting_spec(
    key: str, value: object, lengths: Mapping[str, Sequence[int]]
) -> tuple[str, str] | None:
    """A ``ColumnSpec(...)`` line for ``value`` and what the shape looked like, or ``None``."""
    samples = next(iter(lengths.values()), None)
    per_sample = isinstance(value, (list, tuple)) or (
        _ndim(value) is not None and _ndim(value) != 0
    )
    if not per_sample or samples is None or len(value) != len(samples):  # type: ignore[arg-type]
        return _global_spec(key, value)
    items = list(value)  # type: ignore[call-overload]
    if items and all(isinstance(item, bool | np.bool_) for item in items):
        return (
            f'ColumnSpec("{key}", "per_sample_scalar", pa.bool_(), flag=True)',
            "a flag per sample",
        )
    if items and all(_is_number(item) for item in items):
        return f'ColumnSpec("{key}", "per_sample_scalar", pa.float64())', "one number per sample"
    if items and all(isinstance(item, str) for item in items):
        return f'ColumnSpec("{key}", "per_sample_object", codec="string")', "one str per sample"
    dims = {_ndim(item) for item in items}
    if dims == {1}:
        return _per_token(key, items, lengths)
    if dims == {2} and all(isinstance(item, (list, tuple)) for item in items):
        line = f'ColumnSpec("{key}", "per_token_list", pa.int32(), length="response")'
        return line, "a list per token"
    if dims and all(isinstance(dim, int) and dim >= 2 for dim in dims):
        floats = any("float" in str(getattr(item, "dtype", "")) for item in items)
        value_type = "pa.float32()" if floats else "pa.int32()"
        line = f'ColumnSpec("{key}", "per_sample_tensor", {value_type}, length="tokens_minus_one")'
        return line, "an array of 2 or more dimensions per sample"
    return f'ColumnSpec("{key}", "per_sample_object")', "an object per sample"


def _per_token(key: str, items: list[Any], lengths: Mapping[str, Sequence[int]]) -> tuple[str, str]:
    sizes = [len(item) for item in items]
    rule = next((name for name, rows in lengths.items() if list(rows) == sizes), None)
    floats = any(
        isinstance(element, (float, np.floating)) for item in items for element in list(item)[:64]
    ) or any("float" in str(getattr(item, "dtype", "")) for item in items)
    value_type = "pa.float32()" if floats else "pa.int64()"
    length = f', length="{rule}"' if rule else ""
    line = f'ColumnSpec("{key}", "per_token", {value_type}{length})'
    what = f"a list of numbers per sample, as long as its {rule}" if rule else "a list per sample"
    return line, what


def _global_spec(key: str, value: object) -> tuple[str, str] | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | np.integer):
        return f'ColumnSpec("{key}", "batch_global", global_shape="int")', "one int for the batch"
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        line = f'ColumnSpec("{key}", "batch_global", global_shape="str_list")'
        return line, "a list of str for the batch"
    if isinstance(value, (list, tuple)) and all(isinstance(item, int) for item in value):
        line = f'ColumnSpec("{key}", "batch_global", global_shape="int_list")'
        return line, "a list of ints for the batch, not one per sample"
    return None
