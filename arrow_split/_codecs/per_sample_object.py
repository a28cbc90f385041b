"""The ``per_sample_object`` kind: one Python object per sample, stored by its ObjectCodec.

``string`` and ``json`` (when every sample round-trips) are ``large_string``, ``string_list``
``large_list<large_string>``; else ``pickle``: one pickle per distinct value in a canonical
``dictionary<int32, large_binary>`` (a builder's step dedupes them too). A pickle is a program:
:func:`loads_plain` reads plain data.
"""

from __future__ import annotations

import builtins
import codecs
import dataclasses
import importlib
import io
import pickle
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from arrow_split._codecs._base import EncodeOptions, RunsMemo, list_type
from arrow_split._codecs._growable import Growable
from arrow_split._codecs._json_values import fits_json, from_json_text, json_text, utf8
from arrow_split._codecs._kind import Codec, TypeFields
from arrow_split.errors import (
    ColumnTypeError,
    DumpError,
    ObjectFallbackWarning,
    UntrustedObjectError,
)

if TYPE_CHECKING:
    from arrow_split.schema import ColumnSpec, ObjectCodec

__all__ = [
    "NotPlainData",
    "ObjectsCodec",
    "loads_plain",
]

_SHARED_TYPE = pa.dictionary(pa.int32(), pa.large_binary())
"""The Arrow type of a pickled-object column: one dictionary entry per distinct pickle."""


def _is_shared(array: pa.Array) -> bool:
    """Whether ``array`` is stored once per distinct value (a dictionary array)."""
    return bool(pa.types.is_dictionary(array.type))


def _codes_and_validity(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """A dictionary array's int32 codes (0 where null) and its validity, as numpy."""
    indices = array.indices
    valid = np.asarray(indices.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    codes = np.asarray(indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int32)
    return codes, valid


def _take_once(array: pa.Array, indices: np.ndarray) -> pa.Array:
    """The rows ``indices`` (int64) of a dictionary array, with only the values they use."""
    codes, valid = _codes_and_validity(array)
    codes, valid = codes[indices], valid[indices]
    old, first_row, inverse = np.unique(codes[valid], return_index=True, return_inverse=True)
    by_first_use = np.argsort(first_row)
    new = np.zeros(len(codes), dtype=np.int32)  # numbered by first use: one array per content
    new[valid] = np.argsort(by_first_use)[inverse]
    new_codes = pa.array(new, mask=None if valid.all() else ~valid)
    return pa.DictionaryArray.from_arrays(new_codes, array.dictionary.take(old[by_first_use]))


def _binary_views(array: pa.Array) -> list[memoryview | None]:
    """Each row's bytes of a ``binary`` / ``large_binary`` array, a view of its data buffer."""
    wide = pa.types.is_large_binary(array.type)
    if not (wide or pa.types.is_binary(array.type)):
        return [None if not s.is_valid else memoryview(s.as_buffer()) for s in array]
    _, offsets_buffer, data_buffer = array.buffers()
    dtype = np.dtype(np.int64 if wide else np.int32)  # only the offsets used: a buffer may be
    count, first = len(array) + 1, array.offset * dtype.itemsize  # longer than needed (Arrow)
    bounds = np.frombuffer(offsets_buffer, dtype=dtype, count=count, offset=first).tolist()
    data = memoryview(data_buffer if data_buffer is not None else b"").cast("B")
    views: list[memoryview | None] = [data[bounds[i] : bounds[i + 1]] for i in range(len(array))]
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False).tolist()
        views = [view if ok else None for view, ok in zip(views, valid, strict=True)]
    return views


def _row_views(array: pa.Array) -> Iterator[memoryview | None]:
    """One view of each row's bytes (``None`` if null) in the array's own buffers (no copy)."""
    if not _is_shared(array):
        yield from _binary_views(array)
        return
    codes, valid = _codes_and_validity(array)
    values = _binary_views(array.dictionary)
    for code, is_valid in zip(codes.tolist(), valid.tolist(), strict=True):
        yield values[code] if is_valid else None


# --- the codec -----------------------------------------------------------------------------------


_TYPES: dict[ObjectCodec, tuple[pa.DataType, ...]] = {
    "string": (pa.large_string(),),
    "string_list": (list_type(pa.large_string()),),
    "pickle": (_SHARED_TYPE, pa.large_binary()),  # stored once; one pickle per row (format 1)
    "json": (pa.large_string(),),
}
"""The Arrow types of each object codec: the one it makes first, then any it still reads."""


_STORED_AS: dict[ObjectCodec, str] = {
    "string": "stored as a string",
    "string_list": "stored as a list of strings",
    "json": "stored as JSON text (one JSON value per sample)",
    "pickle": (
        "stored as one Python pickle per distinct value (decoded by arrow_split as plain data "
        "only, unless trusted)"
    ),
}
"""How each object codec stores a value, for people (a dump's field metadata)."""


class ObjectsCodec(Codec):
    """Strings, lists of strings, or pickled objects."""

    text = "one Python object per sample"

    numbers = False

    def encode(
        self, spec: ColumnSpec, samples: Sequence[object], options: EncodeOptions
    ) -> tuple[pa.Array, ColumnSpec]:
        if spec.codec == "string":
            # exactly `str`: a subclass (numpy.str_, a StrEnum) is pickled, keeping its type,
            # so a builder's step gives the bytes from_train_data gives whatever the grouping
            if all(type(value) is str and utf8(value) for value in samples):
                return pa.array(samples, type=_TYPES["string"][0]), spec
            spec = dataclasses.replace(spec, codec="pickle")
        if spec.codec == "json":
            misfit = next((i for i, value in enumerate(samples) if not fits_json(value)), None)
            if misfit is None:
                return pa.array([json_text(value) for value in samples], pa.large_string()), spec
            kind, sample = type(samples[misfit]).__name__, options.first_sample + misfit
            warnings.warn(ObjectFallbackWarning(spec.name, sample, kind), stacklevel=2)
            spec = dataclasses.replace(spec, codec="pickle")
        if spec.codec == "string_list":
            _require_string_lists(spec, samples)
            if all(utf8(text) for texts in samples for text in texts):  # type: ignore[attr-defined]
                return pa.array(samples, type=_TYPES["string_list"][0]), spec
            spec = dataclasses.replace(spec, codec="pickle")  # a lone surrogate: kept exactly
        pickles = pa.array(_pickles(spec, samples), type=pa.large_binary())
        return pickles.dictionary_encode(), spec  # each distinct pickle once, by first use

    def stored_as(self, spec: ColumnSpec) -> str:
        return _STORED_AS[spec.codec]

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        return self.decode_read(spec, array, trust_objects=True)

    def decode_read(
        self, spec: ColumnSpec, array: pa.Array, *, trust_objects: bool
    ) -> list[object]:
        if spec.codec == "pickle":
            return [
                None if value is None else _unpickle(spec, sample, value, trust_objects)
                for sample, value in enumerate(_row_views(array))
            ]
        if spec.codec == "json":
            return [
                None if text is None else _from_json(spec, sample, text)
                for sample, text in enumerate(array.to_pylist())
            ]
        return list(array.to_pylist())

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return _TYPES[spec.codec][0]

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        codec = next((codec for codec, read in _TYPES.items() if arrow_type in read), None)
        return None if codec is None else TypeFields(codec=codec)

    def holds(self, spec: ColumnSpec, arrow_type: pa.DataType) -> bool:
        return arrow_type in _TYPES.get(spec.codec, ())

    def stored(self, spec: ColumnSpec, array: pa.Array) -> pa.Array:
        if spec.codec == "pickle" and not _is_shared(array):
            return array.dictionary_encode()  # one pickle per row (format 1), stored once
        return array

    def take(self, array: pa.Array, indices: np.ndarray, memo: RunsMemo | None = None) -> pa.Array:
        if _is_shared(array):
            return _take_once(array, indices)
        return super().take(array, indices)

    def growable(self, arrow_type: pa.DataType) -> Growable:
        if pa.types.is_dictionary(arrow_type):  # objects stored once
            return _OnceGrowable(arrow_type)
        return super().growable(arrow_type)

    def fill(self, array: pa.Array, rows: np.ndarray, value: int) -> pa.Array:
        return array  # a padding row keeps the copy of the last row: an object has no padding


class _OnceGrowable(Growable):
    """The step's chunks, their dictionaries unified (each distinct value once) at the finish."""

    def __init__(self, value_type: pa.DataType) -> None:
        self.type = value_type
        self._chunks: list[pa.Array] = []

    @property
    def length(self) -> int:
        return sum(map(len, self._chunks))

    def append(self, array: pa.Array) -> None:
        self._chunks.append(array)

    def finish(self) -> pa.Array:
        chunks, self._chunks = pa.chunked_array(self._chunks, self.type), []
        combined = chunks.unify_dictionaries().combine_chunks()
        return _take_once(combined, np.arange(len(combined)))


def _from_json(spec: ColumnSpec, sample: int, text: str) -> object:
    try:
        return from_json_text(text)
    except (ValueError, RecursionError) as exc:
        msg = f"`{spec.name}` holds text that is not JSON ({exc}); the file is corrupt"
        raise DumpError(msg, key=spec.name, sample=sample) from exc


def _unpickle(spec: ColumnSpec, sample: int, value: memoryview, trust_objects: bool) -> object:
    """One row's object: plain data always, anything else only with ``trust_objects``."""
    try:
        return pickle.loads(value) if trust_objects else loads_plain(value)
    except NotPlainData as refused:
        msg = (
            f"`{spec.name}` holds a pickled `{refused.name}`, which is not plain "
            "data (None, bool, numbers, str, bytes, lists, tuples, sets, dicts, numpy arrays); "
            "decoding it would run code the file names: pass `trust_objects=True` when reading "
            "a file you trust"
        )
        raise UntrustedObjectError(msg, key=spec.name, sample=sample) from None
    except Exception as exc:  # a corrupt pickle raises anything; unpickling user types too
        msg = (
            f"`{spec.name}` holds object bytes that do not decode "
            f"({type(exc).__name__}: {exc}); the file is corrupt"
        )
        raise DumpError(msg, key=spec.name, sample=sample) from exc


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


def _require_string_lists(spec: ColumnSpec, samples: Sequence[object]) -> None:
    for sample, value in enumerate(samples):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            msg = f"`{spec.name}` must be a list of str per sample, got {value!r:.60}"
            raise ColumnTypeError(msg, key=spec.name, sample=sample)


def _pickle(spec: ColumnSpec, sample: int, value: object) -> bytes:
    try:
        return pickle.dumps(value, protocol=5)
    except Exception as exc:  # pickling runs user code: any error means "cannot be stored"
        msg = (
            f"`{spec.name}` holds a {type(value).__name__} that cannot be "
            f"pickled ({exc}); store a picklable value"
        )
        raise ColumnTypeError(msg, key=spec.name, sample=sample) from None


# --- plain data: an unpickler that runs no code a file brings ------------------------------------


_CORE = "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"
_NUMERIC = importlib.import_module(f"{_CORE}.numeric")
_MULTIARRAY = importlib.import_module(f"{_CORE}.multiarray")
_NUMPY = {
    ("numeric", "_frombuffer"): _NUMERIC._frombuffer,
    ("multiarray", "_reconstruct"): _MULTIARRAY._reconstruct,
    ("multiarray", "scalar"): _MULTIARRAY.scalar,
}
_ALLOWED: dict[tuple[str, str], object] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    **{(f"numpy.{c}.{m}", n): f for c in ("core", "_core") for (m, n), f in _NUMPY.items()},
    **{
        ("builtins", name): getattr(builtins, name)
        for name in ("bytearray", "complex", "frozenset", "set")
    },
    ("_codecs", "encode"): codecs.encode,  # bytes in protocols 0 to 2: a pure text encoding
}


class NotPlainData(Exception):  # noqa: N818 - internal signal, turned into a library error
    """A pickle names a callable outside the allowlist (``module.name``)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "__builtin__":  # protocols 0 to 2 name Python 2's module
            module = "builtins"
        found = _ALLOWED.get((module, name))
        if found is None:
            raise NotPlainData(f"{module}.{name}")
        return found


def loads_plain(data: bytes | memoryview) -> object:
    """The plain data a pickle holds, running no code it names (else :class:`NotPlainData`)."""
    return _PlainUnpickler(io.BytesIO(data)).load()
