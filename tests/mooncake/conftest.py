"""One real ``mooncake_master`` for the session, on a free localhost port, and its clients.

The tests skip, with the reason, only where Mooncake's store cannot be imported (the wheel, or
the system's libibverbs1, missing); CI installs both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("GLOG_minloglevel", "2")  # the store's clients log every call at INFO
try:
    import arrow_split.mooncake as mooncake_leaf
except ImportError as exc:  # the wheel, or libibverbs1 it links, is missing
    pytest.skip(f"Mooncake's store cannot be imported: {exc}", allow_module_level=True)

SEGMENT_BYTES = 64 * 2**20


@pytest.fixture(scope="session")
def master() -> Iterator[mooncake_leaf.LocalMaster]:
    """A master for the whole session, stopped after the last test."""
    with mooncake_leaf.local_master() as running:
        yield running


@pytest.fixture(scope="session")
def writer(master: mooncake_leaf.LocalMaster) -> Iterator[Any]:
    """The driver's client: it lends the store the memory its batches live in."""
    client = mooncake_leaf.connect(master.address, segment_bytes=SEGMENT_BYTES)
    yield client
    client.close()


@pytest.fixture(scope="session")
def reader(master: mooncake_leaf.LocalMaster) -> Iterator[Any]:
    """A rank's client: it lends nothing, it reads."""
    client = mooncake_leaf.connect(master.address, segment_bytes=0)
    yield client
    client.close()
