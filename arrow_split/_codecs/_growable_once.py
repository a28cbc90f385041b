"""The growable of a column stored once (``dictionary<int32, large_binary>``): dedupe across calls.

Each call of the builder encodes its group's objects once within the group
(:mod:`arrow_split._codecs._shared`); this growable keeps them once within the *step*: a value
whose bytes the step holds already (found by a BLAKE2b digest, then compared byte for byte) points
at that entry, so a prompt whose samples arrive one ``append`` at a time stores its objects once
too. The finished array is in the canonical form (entries in the order of their first row), the
same as ``from_train_data`` of the step's samples. The next step starts with an empty dictionary.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa

from arrow_split._codecs import canonical_codes, codes_and_validity
from arrow_split._codecs._growable_base import BinaryGrowable, Buffer, Growable

__all__ = ["OnceGrowable"]


def _digest(view: memoryview) -> bytes:
    return hashlib.blake2b(view, digest_size=16).digest()


class OnceGrowable(Growable):
    """Int32 codes, their validity, and the step's distinct values (see the module docstring)."""

    def __init__(self, value_type: pa.DataType) -> None:
        self._type = value_type
        self._codes = Buffer(np.dtype(np.int32))
        self._valid = Buffer(np.dtype(np.bool_))
        self._values = BinaryGrowable(value_type.value_type)
        self._entries: dict[bytes, list[int]] = {}  # digest -> the entries with it
        self._nulls = 0

    @property
    def type(self) -> pa.DataType:
        return self._type

    @property
    def length(self) -> int:
        return self._codes.size

    def check(self, array: pa.Array) -> None:
        return None

    def _entry(self, value: memoryview) -> int:
        """The step's entry of ``value``'s bytes, added if new."""
        same = self._entries.setdefault(_digest(value), [])
        offsets = self._values.offsets()
        data = self._values.data()
        wanted = np.frombuffer(value, dtype=np.uint8)
        for entry in same:
            start, stop = int(offsets[entry]), int(offsets[entry + 1])
            if np.array_equal(data[start:stop], wanted):
                return entry
        entry = self._values.length
        self._values.append(pa.array([value.tobytes()], type=pa.large_binary()))
        same.append(entry)
        return entry

    def append(self, array: pa.Array) -> None:
        codes, valid = codes_and_validity(array)
        new, old = canonical_codes(codes, valid)
        dictionary = array.dictionary
        entries = np.fromiter(
            (self._entry(memoryview(dictionary[int(code)].as_buffer())) for code in old),
            dtype=np.int32,
            count=len(old),
        )
        mapped = entries[new] if len(old) else np.zeros(len(new), dtype=np.int32)
        self._codes.extend(np.where(valid, mapped, 0))
        self._valid.extend(valid)
        self._nulls += int((~valid).sum())

    def finish(self) -> pa.Array:
        count = self.length
        validity = None
        if self._nulls:
            validity = pa.py_buffer(np.packbits(self._valid.values(), bitorder="little"))
        codes = pa.Array.from_buffers(
            pa.int32(), count, [validity, self._codes.take()], null_count=self._nulls
        )
        self._valid.clear()
        self._nulls = 0
        self._entries = {}
        return pa.DictionaryArray.from_arrays(codes, self._values.finish())
