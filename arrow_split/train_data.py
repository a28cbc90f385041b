"""Train-data dict -> Arrow columns: shape checks first, then one encoder per column kind.

Order of the checks: every per-sample key must be a sequence with one value per sample of
``tokens`` (checked for all keys before any value is converted); then ``tokens``, whose offsets give
each sample's length; then ``response_lengths``; then the other columns, each checked against its
:data:`~arrow_split.schema.LengthRule`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split.encode import (
    EncodeOptions,
    encode_object,
    encode_ragged,
    encode_scalar,
    encode_tensor,
    is_array,
)
from arrow_split.errors import ColumnTypeError, RaggedLengthError, SchemaError, ValueRangeError
from arrow_split.schema import ColumnSpec

__all__ = ["encode_train_data", "per_sample_values"]


def per_sample_values(data: Mapping[str, Any], key: str, num_samples: int | None) -> Sequence[Any]:
    """Return ``data[key]`` if it is a sequence with one value per sample; raise otherwise."""
    value = data[key]
    sequence = isinstance(value, (list, tuple)) or (is_array(value) and np.ndim(value) >= 1)
    if not sequence:
        msg = (
            f"`{key}` must be a list with one value per sample, got {type(value).__name__} "
            f"{value!r:.40}; wrap a single sample's value in a list, or declare a batch-wide value "
            "as a batch_global ColumnSpec"
        )
        raise ColumnTypeError(msg)
    if num_samples is not None and len(value) != num_samples:
        msg = (
            f"`{key}` has {len(value)} values but `tokens` has {num_samples} samples; every "
            "per-sample key needs exactly one value per sample (rows would misalign)"
        )
        raise RaggedLengthError(msg)
    return value  # type: ignore[no-any-return]


def _lengths(array: pa.Array) -> np.ndarray:
    return np.diff(array.offsets.to_numpy())


def _check_rule(
    key: str, actual: np.ndarray, expected: np.ndarray, reference: str, *, at_least: np.ndarray
) -> None:
    """Raise on the first sample whose length breaks its rule (``>=`` where ``at_least``)."""
    bad = np.where(at_least, actual < expected, actual != expected)
    if bad.any():
        sample = int(np.argmax(bad))
        relation = "at least " if at_least[sample] else ""
        msg = (
            f"sample {sample}: `{key}` has {actual[sample]} values but {reference} says "
            f"{relation}{expected[sample]}; per-token columns must match their sample's length"
        )
        raise RaggedLengthError(msg)


def _response_lengths(
    spec: ColumnSpec, values: Sequence[Any], total_lengths: np.ndarray, options: EncodeOptions
) -> pa.Array:
    array = encode_scalar(spec, values, options)
    lengths = np.asarray(array.to_numpy(zero_copy_only=False))
    if len(lengths) and lengths.min() < 0:
        sample = int(np.argmin(lengths))
        msg = f"sample {sample}: `response_lengths` must be >= 0, got {lengths[sample]}"
        raise ValueRangeError(msg)
    longer = lengths > total_lengths
    if longer.any():
        sample = int(np.argmax(longer))
        msg = (
            f"sample {sample}: `response_lengths` is {lengths[sample]} but the sample has only "
            f"{total_lengths[sample]} tokens; the response is part of `tokens`"
        )
        raise RaggedLengthError(msg)
    return array


def _multimodal_rows(data: Mapping[str, Any], num_samples: int) -> np.ndarray:
    """Samples whose routed-experts rows may exceed ``len(tokens) - 1`` (expanded media)."""
    inputs = data.get("multimodal_train_inputs")
    if inputs is None:
        return np.zeros(num_samples, dtype=bool)
    return np.fromiter((value is not None for value in inputs), dtype=bool, count=num_samples)


def _encode_column(
    spec: ColumnSpec, values: Sequence[Any], options: EncodeOptions
) -> tuple[pa.Array, ColumnSpec]:
    if spec.kind == "per_token":
        return encode_ragged(spec, values, options), spec
    if spec.kind == "per_sample_tensor":
        return encode_tensor(spec, values, options), spec
    if spec.kind == "per_sample_scalar":
        return encode_scalar(spec, values, options), spec
    return encode_object(spec, values)


def encode_train_data(
    data: Mapping[str, Any],
    specs: Mapping[str, ColumnSpec],
    *,
    allow_nonfinite: bool,
    round_floats: bool = False,
) -> tuple[dict[str, pa.Array], dict[str, ColumnSpec]]:
    """Encode every per-sample key of ``data``; return the columns and the specs as used.

    The returned specs keep the order of ``specs``; an object column's codec may have changed
    (a ``string`` column with non-str values is pickled).
    """
    if "tokens" not in data:
        msg = "`tokens` is required: the token ids of each sample (prompt + response)"
        raise SchemaError(msg)
    options = EncodeOptions(allow_nonfinite=allow_nonfinite, round_floats=round_floats)
    tokens = per_sample_values(data, "tokens", None)
    num_samples = len(tokens)
    per_sample = {
        key: per_sample_values(data, key, num_samples)
        for key, spec in specs.items()
        if spec.kind != "batch_global"
    }
    columns: dict[str, pa.Array] = {}
    used = dict(specs)
    columns["tokens"], _ = _encode_column(specs["tokens"], tokens, options)
    total_lengths = _lengths(columns["tokens"])
    if "total_lengths" in data:
        given = np.asarray(per_sample_values(data, "total_lengths", num_samples))
        exact = np.zeros(num_samples, dtype=bool)
        _check_rule("total_lengths", given, total_lengths, "`tokens`", at_least=exact)
    references = {"tokens": total_lengths}
    if "response_lengths" in per_sample:
        array = _response_lengths(
            specs["response_lengths"], per_sample["response_lengths"], total_lengths, options
        )
        columns["response_lengths"] = array
        references["response"] = np.asarray(array.to_numpy(zero_copy_only=False))
    multimodal = _multimodal_rows(data, num_samples)
    for key, values in per_sample.items():
        if key in columns:
            continue
        spec = specs[key]
        columns[key], used[key] = _encode_column(spec, values, options)
        if spec.length is not None:
            _check_length(spec, columns[key], references, multimodal)
    order = [key for key in specs if key in columns]
    return {key: columns[key] for key in order}, used


def _check_length(
    spec: ColumnSpec,
    array: pa.Array,
    references: Mapping[str, np.ndarray],
    multimodal: np.ndarray,
) -> None:
    rule = spec.length
    if rule == "response" and "response" not in references:
        msg = (
            f"`{spec.name}` is aligned to the response, so `response_lengths` is required; "
            "add `response_lengths` (one int per sample) to the train data"
        )
        raise SchemaError(msg)
    if rule == "response":
        expected, reference = references["response"], "`response_lengths`"
        at_least = np.zeros(len(expected), dtype=bool)
    elif rule == "tokens":
        expected, reference = references["tokens"], "`tokens`"
        at_least = np.zeros(len(expected), dtype=bool)
    else:
        expected, reference = references["tokens"] - 1, "`len(tokens) - 1`"
        at_least = multimodal
    _check_rule(spec.name, _lengths(array), expected, reference, at_least=at_least)
