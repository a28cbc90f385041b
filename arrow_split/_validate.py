"""Check a record batch read from outside (a dump) against its specs, with the codecs' own checks.

A dump is input: it may have been written by another version, edited, or crafted. Its metadata
can be self-consistent while its content breaks the library's rules. :func:`check_content`
applies the rules that :meth:`RolloutBatch.from_train_data` applies, vectorised over the
buffers (no Python object per value):

- no nulls in a numeric column (nor in its values, at any level);
- flag columns (``loss_masks``, ``truncated``) hold only 0 and 1;
- a ``nonempty`` list per token (``rollout_sampling_masks``) has no empty token list;
- every length rule (per-token columns vs ``tokens`` or the response, the extra rows of the
  routed experts, response lengths between 0 and the sample's tokens);
- every batch-global value has its documented shape (``raw_reward`` one float per sample,
  counts non-negative ints).

- no NaN or infinity where they count (:func:`~arrow_split._convert.check_finite_columns`: where
  the loss mask is 1 in a response-aligned float column, everywhere in another float column).
  A batch built with ``allow_nonfinite=True`` has ``finite=False`` in its stored specs, so its
  NaN values read back.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from arrow_split._codecs import (
    check_batch_global,
    check_flag,
    check_nonempty,
    child_nulls,
    codec_for,
    is_flag,
    ragged_values,
    token_list_values,
    unpadded_samples,
)
from arrow_split._convert import LengthRules, check_finite_columns
from arrow_split.errors import ValueRangeError
from arrow_split.schema import ColumnSpec, role_column

__all__ = ["check_content"]


def check_content(
    record_batch: pa.RecordBatch,
    specs: Mapping[str, ColumnSpec],
    batch_globals: Mapping[str, object],
) -> None:
    """Raise the codecs' typed error on the first rule the content breaks.

    Raises
    ------
    ArrowSplitError
        A subclass naming the column and the sample (the caller adds the file).
    """
    for name in record_batch.schema.names:
        _check_values(specs[name], record_batch.column(name))
    _check_lengths(record_batch, specs)
    columns = {name: record_batch.column(name) for name in record_batch.schema.names}
    check_finite_columns(columns, specs)
    unpadded = unpadded_samples(record_batch.num_rows, columns, specs)
    for key, value in batch_globals.items():
        check_batch_global(specs[key], value, unpadded, True)


def _check_values(spec: ColumnSpec, array: pa.Array) -> None:
    codec = codec_for(spec)
    if codec.tensor_role == "none":
        return
    if array.null_count:
        _null_error(spec, array.is_null())
    if child_nulls(array):
        _null_error(spec, None)
    numbers = codec.flat_numbers(array)
    if numbers is None:  # pragma: no cover - every numeric codec has its numbers
        return
    if is_flag(spec):
        check_flag(spec.name, numbers.values, numbers.offsets)
    if spec.nonempty:
        _, sample_offsets, token_offsets = token_list_values(array)
        check_nonempty(spec, sample_offsets, token_offsets)


def _null_error(spec: ColumnSpec, nulls: pa.Array | None) -> None:
    where = (
        f"sample {int(np.argmax(nulls.to_numpy(zero_copy_only=False)))}"
        if nulls is not None
        else "a value"
    )
    msg = f"{where}: `{spec.name}` is null; a {spec.kind} column holds no nulls"
    raise ValueRangeError(msg)


def _check_lengths(record_batch: pa.RecordBatch, specs: Mapping[str, ColumnSpec]) -> None:
    source = role_column(specs, "length_source")
    if source is None or source not in record_batch.schema.names:
        return
    total_lengths = np.diff(ragged_values(record_batch.column(source))[1])
    rules = LengthRules(source, total_lengths)
    response = role_column(specs, "response_length")
    if response is not None and response in record_batch.schema.names:
        rules.set_response(response, record_batch.column(response))
    extra = role_column(specs, "extra_rows")
    if extra is not None and extra in record_batch.schema.names:
        rules.set_extra_rows(record_batch.column(extra).to_pylist())
    for name in record_batch.schema.names:
        if name not in (source, response):
            rules.check(specs[name], record_batch.column(name))
