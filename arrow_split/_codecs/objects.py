"""The ``per_sample_object`` codec: one Python object per sample, stored by its ObjectCodec.

``string``: ``large_string``; a column whose samples are not all exactly ``str`` falls back to
``pickle`` (the spec as used says so). ``json``: ``large_string``, one JSON text per sample, when
every sample round-trips exactly through JSON (dicts with str keys, lists, str, int, finite
float, bool, None), else ``pickle`` likewise; decoded with ``json.loads`` (no code runs).
``string_list``: ``large_list<large_string>``. ``pickle``:
one pickle (protocol 5) per *distinct* value, in a ``dictionary<int32, large_binary>``
(:mod:`arrow_split._codecs._shared`), ``None`` as a null row; decoded only on the rank that
owns the row, each row into its own object.

Stored once. The samples of a prompt share values: a sample whose object is one already seen
in the call (the same object) is not pickled again, and one whose pickle has the bytes of an
earlier one points at that one's entry. A take keeps only the entries its rows use. A column
read from an older dump (``large_binary``, one pickle per row) decodes and takes as before.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pickle
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import Codec, EncodeOptions, TypeFields
from arrow_split._codecs._shared import (
    SHARED_TYPE,
    encode_once,
    is_shared,
    row_views,
    stored_once,
    take_once,
)
from arrow_split._codecs._types import list_type
from arrow_split._safe_pickle import NotPlainData, loads_plain, loads_trusted
from arrow_split.errors import ColumnTypeError, DumpError, UntrustedObjectError
from arrow_split.schema import ColumnSpec, ObjectCodec

__all__ = ["ObjectsCodec"]

_TYPES: dict[ObjectCodec, tuple[pa.DataType, ...]] = {
    "string": (pa.large_string(),),
    "string_list": (list_type(pa.large_string()),),
    "pickle": (SHARED_TYPE, pa.large_binary()),  # stored once; one pickle per row (format 1)
    "json": (pa.large_string(),),
}
"""The Arrow types of each object codec: the one it makes first, then any it still reads."""


class ObjectsCodec(Codec):
    """Strings, lists of strings, or pickled objects."""

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        if spec.codec == "string":
            # exactly `str`: a subclass (numpy.str_, a StrEnum) is pickled, keeping its type,
            # so a builder's step gives the bytes from_train_data gives whatever the grouping
            if all(type(value) is str for value in samples):
                return pa.array(samples, type=_TYPES["string"][0]), spec
            spec = dataclasses.replace(spec, codec="pickle")
        if spec.codec == "json":
            if all(_fits_json(value) for value in samples):
                return pa.array([_json_text(value) for value in samples], pa.large_string()), spec
            spec = dataclasses.replace(spec, codec="pickle")
        if spec.codec == "string_list":
            return _string_lists(spec, samples), spec
        return encode_once(_pickles(spec, samples)), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        if spec.codec == "pickle":
            return [None if value is None else pickle.loads(value) for value in row_views(array)]
        if spec.codec == "json":
            return [None if text is None else json.loads(text) for text in array.to_pylist()]
        return list(array.to_pylist())

    def decode_read(
        self, spec: ColumnSpec, array: pa.Array, *, trust_objects: bool
    ) -> list[object]:
        if spec.codec == "json":
            return [
                None if text is None else _from_json(spec, sample, text)
                for sample, text in enumerate(array.to_pylist())
            ]
        if spec.codec != "pickle":
            return self.decode(spec, array)
        return [
            None if value is None else _unpickle(spec, sample, value, trust_objects)
            for sample, value in enumerate(row_views(array))
        ]

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return _TYPES[spec.codec][0]

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        codec = next((codec for codec, read in _TYPES.items() if arrow_type in read), None)
        return None if codec is None else TypeFields(codec=codec)

    def holds(self, spec: ColumnSpec, arrow_type: pa.DataType) -> bool:
        return arrow_type in _TYPES.get(spec.codec, ())

    def stored(self, spec: ColumnSpec, array: pa.Array) -> pa.Array:
        return stored_once(array) if spec.codec == "pickle" else array

    def take(self, array: pa.Array, indices: np.ndarray) -> pa.Array:
        if is_shared(array):
            return take_once(array, indices)
        return super().take(array, indices)


def _fits_json(value: object) -> bool:
    """Whether ``value`` comes back from JSON exactly (same types, same values)."""
    if value is None or type(value) in (str, int, bool):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is list:
        return all(_fits_json(item) for item in value)
    if type(value) is dict:
        return all(type(key) is str and _fits_json(item) for key, item in value.items())
    return False


def _json_text(value: object) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _from_json(spec: ColumnSpec, sample: int, text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        msg = (
            f"sample {sample}: `{spec.name}` holds text that is not JSON ({exc}); the file is "
            "corrupt"
        )
        raise DumpError(msg) from exc


def _unpickle(spec: ColumnSpec, sample: int, value: memoryview, trust_objects: bool) -> object:
    """One row's object: plain data always, anything else only with ``trust_objects``."""
    try:
        return loads_trusted(value) if trust_objects else loads_plain(value)
    except NotPlainData as refused:
        msg = (
            f"sample {sample}: `{spec.name}` holds a pickled `{refused.name}`, which is not plain "
            "data (None, bool, numbers, str, bytes, lists, tuples, sets, dicts, numpy arrays); "
            "decoding it would run code the file names: pass `trust_objects=True` when reading "
            "a file you trust"
        )
        raise UntrustedObjectError(msg) from None
    except Exception as exc:  # a corrupt pickle raises anything; unpickling user types too
        msg = (
            f"sample {sample}: `{spec.name}` holds object bytes that do not decode "
            f"({type(exc).__name__}: {exc}); the file is corrupt"
        )
        raise DumpError(msg) from exc


def _pickles(spec: ColumnSpec, samples: Sequence[object]) -> list[bytes | None]:
    """One pickle per sample; an object met before in ``samples`` is pickled once."""
    seen: dict[int, bytes] = {}  # id -> pickle: the objects live in `samples` meanwhile
    pickles: list[bytes | None] = []
    for sample, value in enumerate(samples):
        pickled = seen.get(id(value))
        if pickled is None and value is not None:
            pickled = _pickle(spec, sample, value)
            seen[id(value)] = pickled
        pickles.append(pickled)
    return pickles


def _string_lists(spec: ColumnSpec, samples: Sequence[object]) -> pa.Array:
    for sample, value in enumerate(samples):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            msg = (
                f"sample {sample}: `{spec.name}` must be a list of str per sample, got "
                f"{value!r:.60}"
            )
            raise ColumnTypeError(msg)
    return pa.array(samples, type=_TYPES["string_list"][0])


def _pickle(spec: ColumnSpec, sample: int, value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=5)
    except Exception as exc:  # pickling runs user code: any error means "cannot be stored"
        msg = (
            f"sample {sample}: `{spec.name}` holds a {type(value).__name__} that cannot be "
            f"pickled ({exc}); store a picklable value"
        )
        raise ColumnTypeError(msg) from None
