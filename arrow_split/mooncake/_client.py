"""A Mooncake client as the library's :class:`~arrow_split.stores.ByteStore`.

Puts go from the batch's own buffers (``batch_put_from``), hard-pinned so that the store never
evicts a live batch to make room; reads go into registered memory (``get_into_ranges``). Every
status code the store returns is checked: a negative one is a :class:`~arrow_split.TransportError`
naming the key and what the code means; a missing key is never read as empty bytes. A client
:func:`connect` made knows when it is closed: every call on a closed one is refused before it
reaches Mooncake (whose client crashes the process on a call after ``close()``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from mooncake.store import MooncakeDistributedStore, ReplicateConfig

from arrow_split import OptionError, TransportError
from arrow_split._args import as_int, describe
from arrow_split.errors import mistake
from arrow_split.stores import Read

__all__ = ["MooncakeClient", "MooncakeStore", "check_open", "connect"]

CODES = {
    -1: "an internal error of the store",
    -10: "a buffer overflow",
    -200: "no space left: the store's segments are full",
    -600: "invalid parameters: a value larger than the store allows, or a range past its end",
    -704: "no such object: it was removed, never written, or lost with the client that put it",
    -705: "the object exists already",
    -706: "the object is leased by a reader",
    -800: "the transfer failed",
    -900: "the master did not answer: it is down or unreachable",
}
"""What the store's negative status codes mean (Mooncake's ``ErrorCode``)."""

_MISSING = -704
_LEAST_SEGMENT = 16 * 2**20


def _meaning(code: int) -> str:
    return f"status {code}, {CODES.get(code, 'an error of the store')}"


class MooncakeClient(MooncakeDistributedStore):  # type: ignore[misc]  # Mooncake has no types
    """A Mooncake client that knows whether it is closed (what :func:`connect` returns).

    Mooncake's own client crashes the process on a call after ``close()``; the library's
    calls check :attr:`closed` first and raise :class:`~arrow_split.OptionError` instead.
    ``close()`` may be called again (a no-op).
    """

    closed: bool = False
    """Whether :meth:`close` was called."""

    def close(self) -> int:
        """Close the client once (its segment, and the batches in it, leave the store)."""
        if self.closed:
            return 0
        self.closed = True
        return int(super().close())


def check_open(client: object, key: str) -> None:
    """Raise the ``option_value`` mistake if ``client`` (named ``key``) is a closed client."""
    if getattr(client, "closed", False) is True:
        fix = (
            "connect again with `arrow_split.mooncake.connect`; close a client after its last call"
        )
        raise mistake(
            "option_value", key=key, expected="an open client", got="a closed client", fix=fix
        )


def connect(
    master: str,
    *,
    local_hostname: str = "127.0.0.1",
    segment_bytes: int = 256 * 2**20,
    buffer_bytes: int = 16 * 2**20,
    protocol: str = "tcp",
    setup_retries: int = 1,
) -> MooncakeClient:
    """A Mooncake client of the master at ``master`` (``host:port``), peer-to-peer metadata.

    ``segment_bytes`` is the memory this client lends the store (a driver's batches live in
    it; a rank that only reads may lend 0). ``MC_TCP_BIND_ADDRESS`` defaults to
    ``local_hostname`` and ``MC_STORE_CLIENT_SETUP_RETRIES`` to ``setup_retries``, so that a
    client with no master fails in seconds instead of about 90. The client is a
    ``MooncakeDistributedStore`` that knows when it is closed (:class:`MooncakeClient`).

    Raises
    ------
    OptionError, OptionTypeError
        ``segment_bytes`` is not 0 or at least 16 MiB; ``master``, ``local_hostname`` or
        ``protocol`` is not a str; another argument not an int.
    TransportError
        The client could not be set up (no master there, or the store refused it).
    """
    for name, value in (
        ("master", master),
        ("local_hostname", local_hostname),
        ("protocol", protocol),
    ):
        if not isinstance(value, str):
            raise mistake("option_type", key=name, expected="a str", got=describe(value))
    buffer_bytes = as_int("buffer_bytes", buffer_bytes, minimum=0)
    setup_retries = as_int("setup_retries", setup_retries, minimum=1)
    segment_bytes = as_int("segment_bytes", segment_bytes, minimum=0)
    if 0 < segment_bytes < _LEAST_SEGMENT:
        msg = (
            f"`segment_bytes` is {segment_bytes}; Mooncake takes 0 (a client that lends no "
            f"memory) or at least {_LEAST_SEGMENT} (16 MiB)"
        )
        expected = f"0 or at least {_LEAST_SEGMENT}"
        raise OptionError(msg, key="segment_bytes", expected=expected, got=str(segment_bytes))
    os.environ.setdefault("MC_TCP_BIND_ADDRESS", local_hostname)
    os.environ.setdefault("MC_STORE_CLIENT_SETUP_RETRIES", str(setup_retries))
    client = MooncakeClient()
    code = client.setup(
        local_hostname, "P2PHANDSHAKE", segment_bytes, buffer_bytes, protocol, "", master
    )
    if code != 0:
        msg = (
            f"could not connect to the Mooncake master at `{master}` (status {code}); start "
            "`mooncake_master --rpc_port=PORT` there, or pass its `host:port`"
        )
        raise TransportError(msg, key=master, got=str(code))
    return client


class MooncakeStore:
    """A Mooncake client as a :class:`~arrow_split.stores.ByteStore`; counts the bytes it reads.

    Parameters
    ----------
    client : mooncake.store.MooncakeDistributedStore
        A client that is set up (:func:`connect`). Each method raises
        :class:`~arrow_split.OptionError` (``key="store"``) once a :class:`MooncakeClient` is
        closed; a client made otherwise cannot tell, and must not be closed while in use.
    """

    def __init__(self, client: MooncakeDistributedStore) -> None:
        self.client = client
        self.bytes_read = 0
        self.ranges_read = 0
        self.gaps_read = 0  # gaps of at most GAP_BYTES read to join two ranges into one

    def put(self, keys: Sequence[str], buffers: Sequence[pa.Buffer]) -> None:
        """Write each buffer under its key, from its own memory; an existing key is refused."""
        check_open(self.client, "store")
        if not keys:
            return
        existing = [
            (key, found)
            for key, found in zip(keys, self.client.batch_is_exist(list(keys)), strict=True)
            if found != 0
        ]
        if existing:
            key, found = existing[0]
            msg = f"the store holds `{key}` already (or cannot tell); it is not replaced"
            raise TransportError(msg, key=key, got=str(found))
        config = ReplicateConfig()
        config.with_hard_pin = True
        addresses = [buffer.address for buffer in buffers]
        sizes = [buffer.size for buffer in buffers]
        registered = [
            a
            for a, s in zip(addresses, sizes, strict=True)
            if self.client.register_buffer(a, s) == 0
        ]
        try:
            codes = self.client.batch_put_from(list(keys), addresses, sizes, config)
        finally:
            for address in registered:
                self.client.unregister_buffer(address)
        for key, size, code in zip(keys, sizes, codes, strict=True):
            if code < 0:
                msg = f"could not put `{key}` ({size} bytes): {_meaning(code)}"
                raise TransportError(msg, key=key, got=str(code))

    def read(self, into: np.ndarray, reads: Sequence[Read]) -> None:
        """Copy the ranges of ``reads`` into ``into``, registered for the call.

        Each range is a transfer of its own in Mooncake (about 0.1 ms each on TCP), so ranges
        of a key at most ``GAP_BYTES`` apart are read as one span (the gap's bytes too,
        counted in ``gaps_read``) into a scratch array and copied out: a rank of a plan it
        made itself reads its rows' scalars and offsets in a few spans, not a range per row.
        """
        check_open(self.client, "store")
        direct: list[tuple[str, tuple[np.ndarray, ...]]] = []
        spans: list[tuple[str, tuple[np.ndarray, ...]]] = []
        pieces: list[tuple[np.ndarray, ...]] = []
        scratch_size = 0
        for key, starts, sizes, targets in reads:
            alone, merged, scratch_size = _spans(starts, sizes, targets, scratch_size, pieces)
            if len(alone[0]):
                direct.append((key, alone))
            if merged is not None:
                spans.append((key, merged))
                self.gaps_read += len(starts) - len(alone[0]) - len(merged[0])
        if direct:
            self._get_ranges(into, [key for key, _ in direct], [part for _, part in direct])
        if spans:
            scratch = np.empty(scratch_size, dtype=np.uint8)
            self._get_ranges(scratch, [key for key, _ in spans], [part for _, part in spans])
            for sizes, targets, places in pieces:  # each range out of its span
                for size, target, place in zip(
                    sizes.tolist(), targets.tolist(), places.tolist(), strict=True
                ):
                    into[target : target + size] = scratch[place : place + size]

    def _get_ranges(
        self, target: np.ndarray, keys: list[str], ranges: Sequence[tuple[np.ndarray, ...]]
    ) -> None:
        """One ``get_into_ranges`` into ``target``: per key, its starts, sizes and places."""
        address = target.ctypes.data
        if target.nbytes and self.client.register_buffer(address, target.nbytes) != 0:
            msg = f"could not register {target.nbytes} bytes of memory to read `{keys[0]}` into"
            raise TransportError(msg, key=keys[0])
        try:
            results = self.client.get_into_ranges(
                [address],
                [keys],
                [[places.tolist() for _, _, places in ranges]],
                [[starts.tolist() for starts, _, _ in ranges]],
                [[sizes.tolist() for _, sizes, _ in ranges]],
            )
        finally:
            if target.nbytes:
                self.client.unregister_buffer(address)
        for key, (_, sizes, _), got in zip(keys, ranges, results[0], strict=True):
            for size, code in zip(sizes.tolist(), got, strict=True):
                if code != size:
                    meaning = _meaning(code) if code < 0 else f"{code} bytes of {size}"
                    msg = f"could not read `{key}`: {meaning}"
                    raise TransportError(msg, key=key, got=str(code))
        self.bytes_read += sum(int(sizes.sum()) for _, sizes, _ in ranges)
        self.ranges_read += sum(len(sizes) for _, sizes, _ in ranges)

    def remove(self, keys: Sequence[str]) -> None:
        """Remove the objects of ``keys`` that exist (forced: readers' leases do not hold it)."""
        check_open(self.client, "store")
        if not keys:
            return
        codes = self.client.batch_remove(list(keys), True)
        for key, code in zip(keys, codes, strict=True):
            if code < 0 and code != _MISSING:
                msg = f"could not remove `{key}`: {_meaning(code)}"
                raise TransportError(msg, key=key, got=str(code))


GAP_BYTES = 256
"""Ranges of one object at most this many bytes apart are read as one span (see ``read``)."""


def _spans(
    starts: np.ndarray,
    sizes: np.ndarray,
    targets: np.ndarray,
    scratch_size: int,
    pieces: list[tuple[np.ndarray, ...]],
) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...] | None, int]:
    """One key's ranges as those read alone and spans of close ranges read into scratch.

    Returns the lone ranges (starts, sizes, targets), the spans (starts, sizes, scratch
    places) or ``None``, and the scratch size so far; ``pieces`` gains the merged ranges.
    """
    order = np.argsort(starts, kind="stable")
    starts, sizes, targets = starts[order], sizes[order], targets[order]
    ends = starts + sizes
    reach = np.maximum.accumulate(ends)
    cut = np.flatnonzero(starts[1:] - reach[:-1] > GAP_BYTES) + 1
    firsts = np.concatenate([[0], cut]).astype(np.int64)
    counts = np.diff(np.concatenate([firsts, [len(starts)]]))
    if not len(starts) or counts.max() == 1:
        return (starts, sizes, targets), None, scratch_size
    group = np.repeat(np.arange(len(firsts)), counts)
    merged = counts[group] > 1
    span_starts = starts[firsts][counts > 1]
    span_sizes = np.maximum.reduceat(ends, firsts)[counts > 1] - span_starts
    places = scratch_size + np.cumsum(span_sizes) - span_sizes
    rank = np.cumsum(counts > 1) - 1  # each group's place among the spans
    within = starts[merged] - span_starts[rank[group[merged]]]
    pieces.append((sizes[merged], targets[merged], places[rank[group[merged]]] + within))
    alone = (starts[~merged], sizes[~merged], targets[~merged])
    return alone, (span_starts, span_sizes, places), scratch_size + int(span_sizes.sum())
