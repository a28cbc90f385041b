"""The ``per_sample_object`` codec: one Python object per sample, stored by its ObjectCodec.

``string``: ``large_string``; a column whose samples are not all exactly ``str`` falls back to
``pickle`` (the spec as used says so). ``string_list``: ``large_list<large_string>``. ``pickle``:
``large_binary``, one pickle (protocol 5) per sample, ``None`` as null; decoded only on the rank
that owns the row.
"""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator, Sequence

import pyarrow as pa

from arrow_split._codecs._base import Codec, EncodeOptions, TypeFields
from arrow_split._codecs._types import list_type
from arrow_split.errors import ColumnTypeError
from arrow_split.schema import ColumnSpec, ObjectCodec

__all__ = ["ObjectsCodec"]

_TYPES: dict[ObjectCodec, tuple[pa.DataType, ...]] = {
    "string": (pa.large_string(),),
    "string_list": (list_type(pa.large_string()),),
    "pickle": (pa.large_binary(),),
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
        if spec.codec == "string_list":
            return _string_lists(spec, samples), spec
        pickled = [_pickle(spec, i, value) for i, value in enumerate(samples)]
        return pa.array(pickled, type=_TYPES["pickle"][0]), spec

    def decode(self, spec: ColumnSpec, array: pa.Array) -> list[object]:
        if spec.codec == "pickle":
            return [None if value is None else pickle.loads(value) for value in _views(array)]
        return list(array.to_pylist())

    def arrow_type(self, spec: ColumnSpec, fields: TypeFields | None = None) -> pa.DataType:
        return _TYPES[spec.codec][0]

    def type_fields(self, arrow_type: pa.DataType) -> TypeFields | None:
        codec = next((codec for codec, read in _TYPES.items() if arrow_type in read), None)
        return None if codec is None else TypeFields(codec=codec)

    def holds(self, spec: ColumnSpec, arrow_type: pa.DataType) -> bool:
        return arrow_type in _TYPES.get(spec.codec, ())


def _string_lists(spec: ColumnSpec, samples: Sequence[object]) -> pa.Array:
    for sample, value in enumerate(samples):
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            msg = (
                f"sample {sample}: `{spec.name}` must be a list of str per sample, got "
                f"{value!r:.60}"
            )
            raise ColumnTypeError(msg)
    return pa.array(samples, type=_TYPES["string_list"][0])


def _pickle(spec: ColumnSpec, sample: int, value: object) -> bytes | None:
    if value is None:
        return None
    try:
        return pickle.dumps(value, protocol=5)
    except Exception as exc:  # pickling runs user code: any error means "cannot be stored"
        msg = (
            f"sample {sample}: `{spec.name}` holds a {type(value).__name__} that cannot be "
            f"pickled ({exc}); store a picklable value"
        )
        raise ColumnTypeError(msg) from None


def _views(array: pa.Array) -> Iterator[memoryview | None]:
    for scalar in array:
        yield None if not scalar.is_valid else memoryview(scalar.as_buffer())
