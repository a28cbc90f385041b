"""The one path between the classic train-data dict and a RecordBatch with batch-global values.

dict -> Arrow (:func:`encode_train_data`): the shape of every per-sample key is checked first
(a sequence with one value per sample of the length source, for all keys before any value is
converted); then the length source (``tokens``), whose offsets give each sample's length; then the
response lengths; then the other columns, each by its codec and then against its
:data:`~arrow_split.schema.LengthRule`; then finiteness (:func:`check_finite_columns`: NaN and
infinity in a float column, refused only where the loss mask is 1 in a response-aligned one);
then the batch-global values. Columns are found by their
:data:`~arrow_split.schema.Role`, never by name.

Arrow -> dict (:func:`decode_train_data`): each column by its codec, batch-global values copied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._codecs import (
    EncodeOptions,
    check_batch_global,
    check_finite,
    codec_for,
    global_to_python,
    is_array,
    unpadded_samples,
)
from arrow_split.errors import (
    ColumnTypeError,
    RaggedLengthError,
    SchemaError,
    SchemaTypeError,
    ValueRangeError,
)
from arrow_split.schema import (
    KNOWN_COLUMNS,
    TOTAL_LENGTHS,
    ColumnSpec,
    resolve_specs,
    role_column,
)

__all__ = [
    "check_finite_columns",
    "check_parts",
    "decode_train_data",
    "encode_columns",
    "encode_train_data",
    "per_sample_values",
]

_DERIVED_LENGTHS = TOTAL_LENGTHS


def per_sample_values(
    data: Mapping[str, Any], key: str, num_samples: int | None, source: str | None = None
) -> Sequence[Any]:
    """Return ``data[key]`` if it is a sequence with one value per sample; raise otherwise.

    ``source`` names the length source in the message (by default the known one).
    """
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
        source = source or role_column(KNOWN_COLUMNS, "length_source")
        msg = (
            f"`{key}` has {len(value)} values but `{source}` has {num_samples} samples; every "
            "per-sample key needs exactly one value per sample (rows would misalign)"
        )
        raise RaggedLengthError(msg)
    return value  # type: ignore[no-any-return]


def _length_source(specs: Mapping[str, ColumnSpec]) -> str:
    source = role_column(specs, "length_source")
    if source is None:
        name = role_column(KNOWN_COLUMNS, "length_source")
        msg = f"`{name}` is required: the token ids of each sample (prompt + response)"
        raise SchemaError(msg)
    return source


def encode_train_data(
    data: Mapping[str, Any], specs: Iterable[ColumnSpec], options: EncodeOptions
) -> tuple[pa.RecordBatch, dict[str, ColumnSpec], dict[str, object]]:
    """Validate and encode ``data``; return the record batch, the specs as used and the globals.

    The returned specs keep the train data's key order; an object column's codec may have
    changed (a ``string`` column with non-str values is pickled).
    """
    if not isinstance(data, Mapping):
        msg = f"`data` must be a dict of per-sample lists, got {type(data).__name__}"
        raise SchemaTypeError(msg)
    resolved = resolve_specs(data.keys(), specs)
    columns, used, batch_globals = encode_columns(data, resolved, options)
    names = [key for key in resolved if key in columns]
    record_batch = pa.RecordBatch.from_arrays([columns[key] for key in names], names=names)
    record_batch.validate(full=True)
    return record_batch, used, batch_globals


def encode_columns(
    data: Mapping[str, Any], resolved: Mapping[str, ColumnSpec], options: EncodeOptions
) -> tuple[dict[str, pa.Array], dict[str, ColumnSpec], dict[str, object]]:
    """Validate and encode ``data`` by its resolved specs (one per key, in order).

    Returns the per-sample columns (one Arrow array each), the specs as used and the checked
    batch-global values: what :func:`encode_train_data` puts together, and what the streaming
    builder encodes each appended group with.
    """
    source = _length_source(resolved)
    num_samples = len(per_sample_values(data, source, None, source))
    per_sample = {
        key: per_sample_values(data, key, num_samples, source)
        for key, spec in resolved.items()
        if spec.is_per_sample
    }
    columns, used = _encode_columns(data, resolved, per_sample, options)
    if options.allow_nonfinite:
        used = {key: _nonfinite_allowed(spec) for key, spec in used.items()}
    else:
        check_finite_columns(columns, used)
    unpadded = unpadded_samples(num_samples, columns, used)
    batch_globals = {
        key: check_batch_global(spec, data[key], unpadded, options.allow_nonfinite)
        for key, spec in resolved.items()
        if not spec.is_per_sample
    }
    return columns, used, batch_globals


def _encode_columns(
    data: Mapping[str, Any],
    specs: Mapping[str, ColumnSpec],
    per_sample: Mapping[str, Sequence[Any]],
    options: EncodeOptions,
) -> tuple[dict[str, pa.Array], dict[str, ColumnSpec]]:
    source = _length_source(specs)
    used = dict(specs)
    columns: dict[str, pa.Array] = {}
    columns[source], used[source] = codec_for(specs[source]).encode(
        specs[source], per_sample[source], options
    )
    offsets = columns[source].offsets.to_numpy()
    total_lengths = offsets[1:] - offsets[:-1]
    if _DERIVED_LENGTHS in data:
        _check_total_lengths(data, total_lengths, source, options)
    rules = LengthRules(source, total_lengths)
    response = role_column(specs, "response_length")
    if response is not None and response in per_sample:
        columns[response], used[response] = codec_for(specs[response]).encode(
            specs[response], per_sample[response], options
        )
        rules.set_response(response, columns[response])
    extra = role_column(specs, "extra_rows")
    if extra is not None and extra in per_sample:
        rules.set_extra_rows(per_sample[extra])
    for key, values in per_sample.items():
        if key not in columns:
            columns[key], used[key] = codec_for(specs[key]).encode(specs[key], values, options)
            rules.check(specs[key], columns[key])
    return columns, used


def _nonfinite_allowed(spec: ColumnSpec) -> ColumnSpec:
    """The spec as used under ``allow_nonfinite=True``: a float column says ``finite=False``."""
    floats = spec.value_type is not None and pa.types.is_floating(spec.value_type)
    return dataclasses.replace(spec, finite=False) if floats and spec.finite else spec


def check_finite_columns(columns: Mapping[str, pa.Array], specs: Mapping[str, ColumnSpec]) -> None:
    """Raise on the first NaN or infinity that counts, column by column.

    A float column with ``finite`` set refuses them everywhere, except a column aligned to the
    response (``length="response"``) when the batch has a response-aligned loss mask (role
    ``loss_mask``): there only the positions whose mask is 1 count (miles' log-prob guard). Call
    it once the length rules hold (the mask and the column are then aligned).
    """
    mask_name = role_column(specs, "loss_mask")
    mask: np.ndarray | None = None
    if mask_name is not None and mask_name in columns and specs[mask_name].length == "response":
        numbers = codec_for(specs[mask_name]).flat_numbers(columns[mask_name])
        mask = None if numbers is None else numbers.values
    for name, array in columns.items():
        spec = specs[name]
        if not spec.finite or spec.value_type is None or not pa.types.is_floating(spec.value_type):
            continue
        numbers = codec_for(spec).flat_numbers(array)
        if numbers is None:
            continue
        counted = mask if spec.length == "response" else None
        if counted is not None and numbers.token_offsets is not None:
            counted = np.repeat(counted, np.diff(numbers.token_offsets))  # a list per token
        response_aligned = spec.length == "response"
        check_finite(
            name,
            numbers.values,
            numbers.offsets,
            counted=counted,
            mask_name=(mask_name or role_column(KNOWN_COLUMNS, "loss_mask"))
            if response_aligned
            else None,
        )


def _check_total_lengths(
    data: Mapping[str, Any], total_lengths: np.ndarray, source: str, options: EncodeOptions
) -> None:
    """Raise unless a given ``total_lengths`` holds one int per sample equal to the derived one."""
    values = per_sample_values(data, _DERIVED_LENGTHS, len(total_lengths), source)
    spec = ColumnSpec(_DERIVED_LENGTHS, "per_sample_scalar", pa.int64())
    given, _ = codec_for(spec).encode(spec, values, options)
    actual = np.asarray(given.to_numpy(zero_copy_only=False))
    _check_rule(_DERIVED_LENGTHS, actual, total_lengths, f"`{source}`", at_least=None)


class LengthRules:
    """What each :data:`~arrow_split.schema.LengthRule` expects of a sample, for one batch."""

    def __init__(self, source: str, total_lengths: np.ndarray) -> None:
        self.source = source
        self.total_lengths = total_lengths
        self.response: tuple[str, np.ndarray] | None = None
        self.extra_rows = np.zeros(len(total_lengths), dtype=bool)

    def set_response(self, name: str, array: pa.Array) -> None:
        """Check the response lengths against the token counts and keep them as the reference."""
        lengths = np.asarray(array.to_numpy(zero_copy_only=False))
        if len(lengths) and lengths.min() < 0:
            sample = int(np.argmin(lengths))
            msg = f"sample {sample}: `{name}` must be >= 0, got {lengths[sample]}"
            raise ValueRangeError(msg)
        longer = lengths > self.total_lengths
        if longer.any():
            sample = int(np.argmax(longer))
            msg = (
                f"sample {sample}: `{name}` is {lengths[sample]} but the sample has only "
                f"{self.total_lengths[sample]} tokens; the response is part of `{self.source}`"
            )
            raise RaggedLengthError(msg)
        self.response = (name, lengths)

    def set_extra_rows(self, values: Sequence[Any]) -> None:
        """Samples with a non-null extra-rows value may have more ``tokens_minus_one`` rows."""
        self.extra_rows = np.fromiter(
            (value is not None for value in values), dtype=bool, count=len(self.total_lengths)
        )

    def check(self, spec: ColumnSpec, array: pa.Array) -> None:
        """Raise on the first sample of ``array`` whose length breaks ``spec.length``."""
        rule = spec.length
        actual = codec_for(spec).lengths(array)
        if rule is None or actual is None:
            return
        if rule == "response":
            if self.response is None:
                name = role_column(KNOWN_COLUMNS, "response_length")
                msg = (
                    f"`{spec.name}` is aligned to the response, so `{name}` is required; "
                    f"add `{name}` (one int per sample) to the train data"
                )
                raise SchemaError(msg)
            name, expected = self.response
            _check_rule(spec.name, actual, expected, f"`{name}`", at_least=None)
        elif rule == "tokens":
            _check_rule(spec.name, actual, self.total_lengths, f"`{self.source}`", at_least=None)
        else:
            expected, reference = self.total_lengths - 1, f"`len({self.source}) - 1`"
            _check_rule(spec.name, actual, expected, reference, at_least=self.extra_rows)


def _check_rule(
    key: str,
    actual: np.ndarray,
    expected: np.ndarray,
    reference: str,
    *,
    at_least: np.ndarray | None,
) -> None:
    """Raise on the first sample whose length breaks its rule (``>=`` where ``at_least``)."""
    bad = (
        actual != expected
        if at_least is None
        else np.where(at_least, actual < expected, actual != expected)
    )
    if bad.any():
        sample = int(np.argmax(bad))
        relation = "at least " if at_least is not None and at_least[sample] else ""
        msg = (
            f"sample {sample}: `{key}` has {actual[sample]} values but {reference} says "
            f"{relation}{expected[sample]}; per-token columns must match their sample's length"
        )
        raise RaggedLengthError(msg)


def decode_train_data(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    *,
    trust_objects: bool = True,
) -> dict[str, object]:
    """The classic train-data dict of a record batch and its globals, as fresh Python objects.

    Pickled objects decode as plain data only unless ``trust_objects`` (see
    :mod:`arrow_split._safe_pickle`).
    """
    train_data: dict[str, object] = {}
    for key, spec in specs.items():
        if spec.is_per_sample:
            column = record_batch.column(key)
            train_data[key] = codec_for(spec).decode_read(spec, column, trust_objects=trust_objects)
        else:
            train_data.update(global_to_python({key: batch_globals[key]}))
    return train_data


def check_parts(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
) -> None:
    """Raise unless the record batch's columns are the per-sample specs, every global valued."""
    if not isinstance(record_batch, pa.RecordBatch):
        msg = f"`record_batch` must be a pyarrow.RecordBatch, got {type(record_batch).__name__}"
        raise SchemaTypeError(msg)
    names = record_batch.schema.names
    per_sample = [key for key, spec in specs.items() if spec.is_per_sample]
    source = role_column(specs, "length_source")
    if source not in names or sorted(names) != sorted(per_sample):
        msg = f"the record batch's columns {names} do not match the per-sample specs {per_sample}"
        raise SchemaError(msg)
    missing = sorted(set(specs) - set(names) - set(batch_globals))
    if missing:
        msg = f"batch-global keys without a value: {', '.join(missing)}"
        raise SchemaError(msg)
