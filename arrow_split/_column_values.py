"""The numeric columns of a batch as numpy: what the leaves turn into tensors.

:class:`ColumnValues` holds one column's values, offsets and the Arrow buffer they view, so that
a leaf decides whether it may share that buffer (:func:`arrow_split.torch.to_tensors`'s memory
rule); :func:`numeric_columns` gives them for a record batch, each column by its codec, and is
what :meth:`RolloutBatch.numeric_columns <arrow_split.RolloutBatch.numeric_columns>` returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np
import pyarrow as pa

from arrow_split._codecs import TensorRole, codec_for, data_buffer, token_list_values
from arrow_split.schema import ColumnSpec

__all__ = ["ColumnValues", "numeric_columns"]


@dataclasses.dataclass(frozen=True, slots=True)
class ColumnValues:
    """A numeric column as numpy, for the leaves that turn columns into tensors.

    Every array is read-only: ``values`` is a view of ``buffer`` or, for booleans, a fresh
    unpacked array (read-only too, so that no array handed out here is writable); ``offsets``
    (int64 from 0) is set for ragged columns, ``None`` for one number per sample.
    A list per token (role ``token_lists``) has ``offsets`` into its tokens (``n + 1``) and
    ``token_offsets`` into ``values`` (one more than its tokens), both from 0.
    ``buffer.is_mutable`` says whether the buffer is private to this process (see
    :mod:`arrow_split.batch`).
    """

    spec: ColumnSpec
    role: TensorRole
    values: np.ndarray
    offsets: np.ndarray | None
    buffer: pa.Buffer | None
    token_offsets: np.ndarray | None = None


def numeric_columns(
    record_batch: pa.RecordBatch, specs: Mapping[str, ColumnSpec]
) -> list[ColumnValues]:
    """The columns of ``record_batch`` a tensor can be made of, as numpy views, in its order.

    Each column's codec says whether it is numeric and gives its values and offsets
    (:class:`ColumnValues`); an object column gives none.
    """
    found = []
    for name in record_batch.schema.names:
        spec = specs[name]
        codec = codec_for(spec)
        array = record_batch.column(name)
        if codec.tensor_role == "token_lists":
            flat, sample_offsets, tokens = token_list_values(array)
            buffer = data_buffer(array)
            found.append(
                ColumnValues(
                    spec,
                    codec.tensor_role,
                    _read_only(flat),
                    _read_only(sample_offsets),
                    buffer,
                    _read_only(tokens),
                )
            )
            continue
        tensor_values = codec.tensor_values(array)
        if tensor_values is not None:
            values, offsets = tensor_values
            offsets = None if offsets is None else _read_only(offsets)
            found.append(
                ColumnValues(
                    spec, codec.tensor_role, _read_only(values), offsets, data_buffer(array)
                )
            )
    return found


def _read_only(array: np.ndarray) -> np.ndarray:
    """``array`` with its writeable flag cleared (a flag of this array object only)."""
    array.flags.writeable = False
    return array
