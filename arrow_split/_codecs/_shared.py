"""Values stored once: a ``dictionary<int32, large_binary>`` column, one entry per distinct value.

The samples of one prompt share objects (the prompt's messages, its processed images in
``multimodal_train_inputs``): a pickled-object column keeps each distinct pickle once, in an
Arrow dictionary, and one int32 index per sample (null for ``None``). The form is *canonical*:
the dictionary holds exactly the values the rows use, in the order of their first row, so the
same samples always give the same array, whether they went through ``from_train_data``, the
builder (which dedupes across its calls: :mod:`arrow_split._codecs._growable`), a dump or
a take.

- :func:`encode_once`: the per-sample pickles (``None`` for null) -> the array. Equal bytes are
  found by a dict of the pickles themselves (a hash, then a compare on a hit).
- :func:`take_once`: the rows ``indices``, the dictionary cut down to the values they use (Arrow's
  own ``take`` keeps the whole dictionary: a shard would carry every value of the batch).
- :func:`row_views`: one memoryview per row (``None`` for null), for the decoder.
- :func:`stored_once`: a plain ``large_binary`` column (an older dump's) in that form.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

__all__ = [
    "SHARED_TYPE",
    "canonical_codes",
    "codes_and_validity",
    "encode_once",
    "is_shared",
    "row_views",
    "stored_once",
    "take_once",
]

SHARED_TYPE = pa.dictionary(pa.int32(), pa.large_binary())
"""The Arrow type of a pickled-object column: one dictionary entry per distinct pickle."""


def is_shared(array: pa.Array) -> bool:
    """Whether ``array`` is stored once per distinct value (a dictionary array)."""
    return bool(pa.types.is_dictionary(array.type))


def _dictionary_array(codes: np.ndarray, valid: np.ndarray, values: pa.Array) -> pa.Array:
    mask = None if valid.all() else ~valid
    indices = pa.array(codes, type=pa.int32(), mask=mask)
    return pa.DictionaryArray.from_arrays(indices, values)


def encode_once(pickles: Sequence[bytes | None]) -> pa.Array:
    """The dictionary array of per-sample pickles (``None``: a null row)."""
    codes = np.zeros(len(pickles), dtype=np.int32)
    valid = np.ones(len(pickles), dtype=bool)
    first: dict[bytes, int] = {}
    for row, pickled in enumerate(pickles):
        if pickled is None:
            valid[row] = False
        else:
            codes[row] = first.setdefault(pickled, len(first))
    return _dictionary_array(codes, valid, pa.array(list(first), type=pa.large_binary()))


def stored_once(array: pa.Array) -> pa.Array:
    """A plain ``large_binary`` column (an older dump's, a Parquet file's) stored once."""
    if is_shared(array):
        return array
    return encode_once([None if view is None else view.tobytes() for view in row_views(array)])


def canonical_codes(codes: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes renumbered by first use, and the old code of each new one (in order)."""
    used = codes[valid]
    distinct, first_row = np.unique(used, return_index=True)
    old = distinct[np.argsort(first_row, kind="stable")]
    renumber = np.zeros(int(distinct.max()) + 1 if distinct.size else 1, dtype=np.int32)
    renumber[old] = np.arange(len(old), dtype=np.int32)
    new = np.where(valid, renumber[np.where(valid, codes, 0)], 0).astype(np.int32)
    return new, old


def codes_and_validity(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A dictionary array's int32 codes (0 where null) and its validity, as numpy."""
    indices = array.indices
    valid = np.asarray(indices.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.asarray(indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int32)
    return codes, valid


def take_once(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` (int64) of a dictionary array, with only the values they use."""
    codes, valid = codes_and_validity(array)
    codes, valid = codes[indices], valid[indices]
    new, old = canonical_codes(codes, valid)
    values = array.dictionary.take(pa.array(old, type=pa.int64()))
    return _dictionary_array(new, valid, values)


def _binary_views(array: pa.Array) -> list[memoryview | None]:
    """Each row's bytes of a ``binary`` / ``large_binary`` array, a view of its data buffer."""
    wide = pa.types.is_large_binary(array.type)
    if not (wide or pa.types.is_binary(array.type)):
        return [None if not s.is_valid else memoryview(s.as_buffer()) for s in array]
    _, offsets_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64 if wide else np.int32)
    bounds = offsets[array.offset : array.offset + len(array) + 1].tolist()
    data = memoryview(data_buffer if data_buffer is not None else b"").cast("B")
    views: list[memoryview | None] = [data[bounds[i] : bounds[i + 1]] for i in range(len(array))]
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False).tolist()
        views = [view if ok else None for view, ok in zip(views, valid, strict=True)]
    return views


def row_views(array: pa.Array) -> Iterator[memoryview | None]:
    """One view of each row's bytes (``None`` for a null row), dictionary or plain binary.

    Views of the array's own data buffer (no copy, no Arrow scalar per row); a dictionary's
    values are viewed once each, whatever number of rows use them.
    """
    if not is_shared(array):
        yield from _binary_views(array)
        return
    codes, valid = codes_and_validity(array)
    values = _binary_views(array.dictionary)
    for code, is_valid in zip(codes.tolist(), valid.tolist(), strict=True):
        yield values[code] if is_valid else None
