"""The one path between the classic train-data dict and a RecordBatch with batch-global values.

The checks run in one order (shapes, lengths, codecs, length rules, finiteness, globals), on a
file's batch too (:func:`check_content`). Columns are found by role, never by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from arrow_split._codecs import codec_for
from arrow_split._codecs._base import EncodeOptions, ragged_values
from arrow_split._codecs._checks import check_finite
from arrow_split._codecs._numeric import is_array
from arrow_split._codecs.batch_global import (
    check_batch_global,
    global_to_python,
    unpadded_samples,
)
from arrow_split.errors import (
    ColumnTypeError,
    RaggedLengthError,
    SchemaError,
    SchemaTypeError,
    ValueRangeError,
)
from arrow_split.schema import KNOWN_COLUMNS, TOTAL_LENGTHS, ColumnSpec, Roles, resolve_specs

__all__ = [
    "add_columns",
    "check_content",
    "check_finite_columns",
    "check_parts",
    "decode_train_data",
    "encode_columns",
    "encode_train_data",
    "per_sample_values",
]

_KNOWN_ROLES = Roles.of(KNOWN_COLUMNS)


def per_sample_values(
    data: Mapping[str, Any], key: str, num_samples: int | None, source: str | None = None
) -> Sequence[Any]:
    """``data[key]`` if it holds one value per sample (counted by the length source ``source``)."""
    value = data[key]
    sequence = isinstance(value, (list, tuple)) or (is_array(value) and np.ndim(value) >= 1)
    if not sequence:
        msg = (
            f"`{key}` must be a list with one value per sample, got {type(value).__name__} "
            f"{value!r:.40}; wrap a single sample's value in a list, or declare a batch-wide value "
            "as a batch_global ColumnSpec"
        )
        raise ColumnTypeError(msg, key=key)
    if num_samples is not None and len(value) != num_samples:
        source = source or _KNOWN_ROLES.length_source
        msg = (
            f"`{key}` has {len(value)} values but `{source}` has {num_samples} samples; every "
            "per-sample key needs exactly one value per sample (rows would misalign)"
        )
        raise RaggedLengthError(msg, key=key)
    return value  # type: ignore[no-any-return]


def encode_train_data(
    data: Mapping[str, Any], specs: Iterable[ColumnSpec], options: EncodeOptions
) -> tuple[pa.RecordBatch, dict[str, ColumnSpec], dict[str, object]]:
    """Validate and encode ``data``: the record batch, the specs as used, the globals.

    The specs keep the data's key order; an object column's codec may change (non-str: pickle).
    """
    if not isinstance(data, Mapping):
        msg = f"`data` must be a dict of per-sample lists, got {type(data).__name__}"
        raise SchemaTypeError(msg, key="data")
    resolved = resolve_specs(data.keys(), specs, data=data)
    columns, used, batch_globals = encode_columns(data, resolved, options)
    names = [key for key in resolved if key in columns]
    record_batch = pa.RecordBatch.from_arrays([columns[key] for key in names], names=names)
    return record_batch, used, batch_globals


def encode_columns(
    data: Mapping[str, Any], resolved: Mapping[str, ColumnSpec], options: EncodeOptions
) -> tuple[dict[str, pa.Array], dict[str, ColumnSpec], dict[str, object]]:
    """Validate and encode ``data`` by its resolved specs (the streaming builder's path too).

    Returns the per-sample columns, the specs as used and the checked batch-global values.
    """
    roles = Roles.of(resolved)
    source = roles.length_source
    if source is None:
        name = _KNOWN_ROLES.length_source
        msg = f"`{name}` is required: the token ids of each sample (prompt + response)"
        raise SchemaError(msg, key=name)
    num_samples = len(per_sample_values(data, source, None, source))
    per_sample = {
        key: per_sample_values(data, key, num_samples, source)
        for key, spec in resolved.items()
        if spec.is_per_sample
    }
    used = dict(resolved)
    columns: dict[str, pa.Array] = {}

    def encode(key: str) -> None:
        columns[key], used[key] = codec_for(used[key]).encode(used[key], per_sample[key], options)

    encode(source)
    total_lengths = np.diff(columns[source].offsets.to_numpy())
    if TOTAL_LENGTHS in data:
        _check_total_lengths(data, total_lengths, source, options)
    response = roles.response_length
    if response is not None and response in per_sample:
        encode(response)  # the length rules need it before the other columns
    extra = roles.extra_rows
    extra_rows = per_sample[extra] if extra is not None and extra in per_sample else None
    rules = LengthRules(source, total_lengths, roles, columns, extra_rows)
    for key in per_sample:
        if key not in columns:
            encode(key)
    rules.check(columns, resolved)
    if options.allow_nonfinite:
        used = {key: _nonfinite_allowed(spec) for key, spec in used.items()}
    else:
        check_finite_columns(columns, used, roles)
    unpadded = unpadded_samples(num_samples, columns, roles.padding)
    batch_globals = {
        key: check_batch_global(spec, data[key], unpadded, options.allow_nonfinite)
        for key, spec in resolved.items()
        if not spec.is_per_sample
    }
    return columns, used, batch_globals


def _nonfinite_allowed(spec: ColumnSpec) -> ColumnSpec:
    """The spec as used under ``allow_nonfinite=True``: a float column says ``finite=False``."""
    floats = spec.value_type is not None and pa.types.is_floating(spec.value_type)
    return dataclasses.replace(spec, finite=False) if floats and spec.finite else spec


def check_finite_columns(
    columns: Mapping[str, pa.Array], specs: Mapping[str, ColumnSpec], roles: Roles | None = None
) -> None:
    """Raise on the first NaN or infinity that counts, column by column (once lengths hold).

    A ``finite`` float column refuses them everywhere, or where a response-aligned loss mask is 1.
    """
    mask_name = (Roles.of(specs) if roles is None else roles).loss_mask
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
        response_aligned = spec.length == "response"
        counted = mask if response_aligned else None
        if counted is not None and numbers.token_offsets is not None:
            counted = np.repeat(counted, np.diff(numbers.token_offsets))  # a list per token
        check_finite(
            name,
            numbers.values,
            numbers.offsets,
            counted=counted,
            mask_name=(mask_name or _KNOWN_ROLES.loss_mask) if response_aligned else None,
        )


def _check_total_lengths(
    data: Mapping[str, Any], total_lengths: np.ndarray, source: str, options: EncodeOptions
) -> None:
    """Raise unless a given ``total_lengths`` holds one int per sample equal to the derived one."""
    values = per_sample_values(data, TOTAL_LENGTHS, len(total_lengths), source)
    spec = ColumnSpec(TOTAL_LENGTHS, "per_sample_scalar", pa.int64())
    given, _ = codec_for(spec).encode(spec, values, options)
    actual = np.asarray(given.to_numpy(zero_copy_only=False))
    bad = actual != total_lengths
    if bad.any():
        _raise_length(TOTAL_LENGTHS, actual, total_lengths, f"`{source}`", bad, None)


class LengthRules:
    """What each :data:`~arrow_split.schema.LengthRule` expects of a batch's samples."""

    def __init__(
        self,
        source: str,
        total_lengths: np.ndarray,
        roles: Roles,
        columns: Mapping[str, pa.Array],
        extra_rows: Sequence[Any] | None,
    ) -> None:
        self.source = source
        self.total_lengths = total_lengths
        self.response: tuple[str, np.ndarray] | None = None
        name = roles.response_length
        if name is not None and name in columns:
            self.response = (name, self._response(name, columns[name]))
        self.extra_rows = np.zeros(len(total_lengths), dtype=bool)
        if extra_rows is not None:
            self.extra_rows = np.array([value is not None for value in extra_rows], dtype=bool)

    def _response(self, name: str, array: pa.Array) -> np.ndarray:
        lengths = np.asarray(array.to_numpy(zero_copy_only=False))
        if len(lengths) and lengths.min() < 0:
            sample = int(np.argmin(lengths))
            msg = f"`{name}` must be >= 0, got {lengths[sample]}"
            raise ValueRangeError(msg, key=name, sample=sample)
        longer = lengths > self.total_lengths
        if longer.any():
            sample = int(np.argmax(longer))
            msg = (
                f"`{name}` is {lengths[sample]} but the sample has only "
                f"{self.total_lengths[sample]} tokens; the response is part of `{self.source}`"
            )
            raise RaggedLengthError(msg, key=name, sample=sample)
        return lengths

    def check(self, columns: Mapping[str, pa.Array], specs: Mapping[str, ColumnSpec]) -> None:
        """Raise on the first column, in order, with a sample whose length breaks its rule."""
        for name, array in columns.items():
            rule = specs[name].length
            if rule is None or name == self.source:
                continue
            actual = codec_for(specs[name]).lengths(array)
            if actual is None:
                continue
            at_least = None
            if rule == "response":
                if self.response is None:
                    response = _KNOWN_ROLES.response_length
                    msg = (
                        f"`{name}` is aligned to the response, so `{response}` is required; "
                        f"add `{response}` (one int per sample) to the train data"
                    )
                    raise SchemaError(msg, key=name)
                reference, expected = f"`{self.response[0]}`", self.response[1]
                bad = actual != expected
            elif rule == "tokens":
                reference, expected = f"`{self.source}`", self.total_lengths
                bad = actual != expected
            else:
                reference, expected = f"`len({self.source}) - 1`", self.total_lengths - 1
                at_least = self.extra_rows
                bad = np.where(at_least, actual < expected, actual != expected)
            if bad.any():
                _raise_length(name, actual, expected, reference, bad, at_least)


def _raise_length(
    key: str,
    actual: np.ndarray,
    expected: np.ndarray,
    reference: str,
    bad: np.ndarray,
    at_least: np.ndarray | None,
) -> None:
    """Raise for the first sample of ``bad`` (``at least`` where ``at_least``)."""
    sample = int(np.argmax(bad))
    relation = "at least " if at_least is not None and at_least[sample] else ""
    msg = (
        f"`{key}` has {actual[sample]} values but {reference} says "
        f"{relation}{expected[sample]}; per-token columns must match their sample's length"
    )
    raise RaggedLengthError(msg, key=key, sample=sample)


def decode_train_data(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
    *,
    trust_objects: bool = True,
) -> dict[str, object]:
    """The classic train-data dict, fresh; pickles decode as plain data only unless trusted."""
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
        raise SchemaTypeError(msg, key="record_batch")
    names = record_batch.schema.names
    per_sample = [key for key, spec in specs.items() if spec.is_per_sample]
    source = Roles.of(specs).length_source
    if source not in names or sorted(names) != sorted(per_sample):
        msg = f"the record batch's columns {names} do not match the per-sample specs {per_sample}"
        raise SchemaError(msg, key="record_batch")
    missing = sorted(set(specs) - set(names) - set(batch_globals))
    if missing:
        msg = f"batch-global keys without a value: {', '.join(missing)}"
        raise SchemaError(msg, key=missing[0])


def check_content(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
) -> None:
    """Raise the codecs' typed error (column, sample) on the first rule the content breaks."""
    columns = {name: record_batch.column(name) for name in record_batch.schema.names}
    for name, array in columns.items():
        codec_for(specs[name]).check_content(specs[name], array)
    roles = Roles.of(specs)
    source = roles.length_source
    if source is not None and source in columns:
        total_lengths = np.diff(ragged_values(columns[source])[1])
        extra = roles.extra_rows
        extra_rows = columns[extra].to_pylist() if extra is not None and extra in columns else None
        LengthRules(source, total_lengths, roles, columns, extra_rows).check(columns, specs)
    check_finite_columns(columns, specs, roles)
    unpadded = unpadded_samples(record_batch.num_rows, columns, roles.padding)
    for key, value in batch_globals.items():
        check_batch_global(specs[key], value, unpadded, True)


def add_columns(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    data: Mapping[str, Any],
    declared: Iterable[ColumnSpec],
) -> tuple[pa.RecordBatch, dict[str, ColumnSpec]]:
    """``record_batch`` with the per-sample scalar keys of ``data``, and their specs (checked)."""
    if not isinstance(data, Mapping):
        msg = f"`data` must be a dict of per-sample lists, got {type(data).__name__}"
        raise SchemaTypeError(msg, key="data")
    clash = sorted(set(data) & set(specs))
    if clash:
        msg = f"keys already in the batch: {', '.join(map(repr, clash))}; pick new names"
        raise SchemaError(msg, key=clash[0])
    resolved = resolve_specs(data.keys(), declared, data=data)
    if not all(codec_for(spec).one_number for spec in resolved.values()):
        msg = "`add_train_data` takes per-sample scalar keys only (ids, flags, numbers)"
        raise SchemaError(msg, key="add_train_data")
    resolve_specs([*specs, *resolved], [*specs.values(), *resolved.values()])
    for key, spec in resolved.items():
        values = per_sample_values(data, key, record_batch.num_rows)
        array, _ = codec_for(spec).encode(spec, values, EncodeOptions())
        check_finite_columns({key: array}, {key: spec})
        record_batch = record_batch.append_column(key, array)
    return record_batch, resolved
