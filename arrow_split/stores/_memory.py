"""Where a stored batch's bytes live: the :class:`ByteStore` interface, and one in memory.

A store has three methods (put, read ranges, remove), each raising
:class:`~arrow_split.TransportError` naming the key it failed on. :class:`MemoryStore` keeps the
bytes in this process; :mod:`arrow_split.mooncake` implements the interface on Mooncake.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import pyarrow as pa

from arrow_split._args import as_int
from arrow_split.errors import TransportError

__all__ = ["ByteStore", "MemoryStore", "Read"]

Read = tuple[str, np.ndarray, np.ndarray, np.ndarray]
"""One object's ranges: its key, each range's start in it, its size, its place in the target."""


class ByteStore(Protocol):
    """Where a stored batch's bytes live: the one interface a store implements.

    Each method raises :class:`~arrow_split.TransportError` naming the key it failed on.
    """

    def put(self, keys: Sequence[str], buffers: Sequence[pa.Buffer]) -> None:
        """Write each buffer under its key; never replace an object that exists."""

    def read(self, into: np.ndarray, reads: Sequence[Read]) -> None:
        """Copy the ranges of ``reads`` into ``into`` (a writable uint8 array)."""

    def remove(self, keys: Sequence[str]) -> None:
        """Remove the objects of ``keys`` that exist (a missing one is no error)."""


class MemoryStore:
    """A :class:`ByteStore` in this process's memory, for tests and one-process runs.

    Parameters
    ----------
    capacity : int, optional
        The most bytes it holds; a put past it fails (as a full store does).

    Raises
    ------
    OptionError, OptionTypeError
        ``capacity`` is negative, or not an int.
    """

    def __init__(self, capacity: int | None = None) -> None:
        self.objects: dict[str, bytes] = {}
        self.capacity = None if capacity is None else as_int("capacity", capacity, minimum=0)

    def put(self, keys: Sequence[str], buffers: Sequence[pa.Buffer]) -> None:
        """Write each buffer; a key that exists or a full store raises TransportError."""
        for key, buffer in zip(keys, buffers, strict=True):
            if key in self.objects:
                msg = f"the store holds `{key}` already; it is not replaced"
                raise TransportError(msg, key=key)
            held = sum(map(len, self.objects.values()))
            if self.capacity is not None and held + buffer.size > self.capacity:
                msg = (
                    f"the store is full: `{key}` needs {buffer.size} bytes, "
                    f"{self.capacity - held} are free"
                )
                raise TransportError(msg, key=key)
            self.objects[key] = buffer.to_pybytes()

    def read(self, into: np.ndarray, reads: Sequence[Read]) -> None:
        """Copy the ranges; a missing key or a range past an object raises TransportError."""
        for key, starts, sizes, targets in reads:
            blob = self.objects.get(key)
            if blob is None:
                msg = f"the store has no object `{key}`"
                raise TransportError(msg, key=key)
            view = np.frombuffer(blob, dtype=np.uint8)
            for start, size, target in zip(
                starts.tolist(), sizes.tolist(), targets.tolist(), strict=True
            ):
                if start + size > len(blob):
                    msg = f"`{key}` holds {len(blob)} bytes, not the {start + size} asked for"
                    raise TransportError(msg, key=key)
                into[target : target + size] = view[start : start + size]

    def remove(self, keys: Sequence[str]) -> None:
        """Remove the objects that exist."""
        for key in keys:
            self.objects.pop(key, None)
