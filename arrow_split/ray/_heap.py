"""Memory a rank's first step will use, faulted in ahead: the heap reserve of :func:`warm_up`.

A fresh process has no free heap. Its first rank call allocates a shard's worth of memory (the
taken rows, then the tensors: tens of MiB at dp 8 on a 145 MiB batch) and glibc's ``malloc``
serves every block above its mmap threshold (128 KiB at start) with a fresh ``mmap``; each page
of it faults on first touch, and ``free`` returns it with ``munmap``. glibc then raises its
threshold, so the second call's blocks come from the heap, which grows by fresh pages once more.
From the third call on, the heap's pages are reused. On a virtual machine a first touch can cost
many times a reuse (the hypervisor backs the page too): there, the first two calls spent most of
their time in the kernel, running the same code as the later calls.

:func:`reserve_heap` sets glibc's two thresholds once (blocks up to 32 MiB from the heap, the
heap trimmed only above twice the reserve) and then allocates, touches and frees ``nbytes`` in
8 MiB blocks, so that the freed pages stay with the process for the rank's first calls. It also
makes the system allocator Arrow's default memory pool in this process: Arrow's bundled
allocator gives freed pages back to the OS after a short delay and faults them in again on a
later call (every warm rank call did), where glibc's heap keeps them. The blocks are touched in
the calling thread's heap: call it from the thread that runs the rank's calls (a Ray actor's
methods run in its main thread unless the actor is threaded or async). That memory stays
resident: a reserve is for a train actor, whose process lives for the whole run.
Other C libraries (musl, macOS) have no such thresholds: the reserve is skipped with a warning.
"""

from __future__ import annotations

import ctypes
import platform
import warnings
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from arrow_split import ArrowSplitWarning

__all__ = ["MAX_RESERVE_BYTES", "reserve_heap"]

MAX_RESERVE_BYTES = 2**30
"""The largest reserve (1 GiB): glibc's trim threshold, about twice the reserve, is a C ``int``."""
_INT_MAX = 2**31 - 1

_MIB = 2**20
_BLOCK_BYTES = 8 * _MIB
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 * _MIB
"""glibc's largest mmap threshold on 64-bit: blocks above it are always mapped afresh."""

_reserved = 0


def _mallopt() -> Callable[[int, int], int] | None:
    """The C library's ``mallopt`` where it is glibc, else ``None``."""
    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # pragma: no cover - glibc always has it
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def reserve_heap(nbytes: int) -> bool:
    """Keep ``nbytes`` of touched, free heap for this process's allocations and Arrow's (glibc).

    Returns ``False`` where skipped (not glibc).

    A later call with a larger ``nbytes`` grows the reserve; a smaller one does nothing.
    ``nbytes`` is validated by the caller (0 to :data:`MAX_RESERVE_BYTES`).
    """
    global _reserved  # one heap per process
    if nbytes <= _reserved:
        return True
    mallopt = _mallopt()
    if mallopt is None:
        msg = (
            f"warm_up(reserve_bytes={nbytes}) reserved nothing: this process's C library is "
            f"{platform.libc_ver()[0] or 'not glibc'}, whose allocator has no thresholds to set; "
            "pass reserve_bytes=0 there"
        )
        warnings.warn(msg, ArrowSplitWarning, stacklevel=3)
        return False
    trim = min(2 * nbytes, _INT_MAX)
    if not (mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, trim)):
        return False  # pragma: no cover - glibc accepts both values
    pa.set_memory_pool(pa.system_memory_pool())
    blocks = [np.ones(_BLOCK_BYTES, dtype=np.uint8) for _ in range(-(-nbytes // _BLOCK_BYTES))]
    del blocks
    _reserved = nbytes
    return True
