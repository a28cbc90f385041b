"""One real ``mooncake_master`` for the session, on a free localhost port, and its clients.

Each test module here skips, with the reason, where the leaf cannot be imported (the wheel, or
the system's libibverbs1 it links, missing); CI installs both.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("GLOG_minloglevel", "2")  # the store's clients log every call at INFO
SEGMENT_BYTES = 64 * 2**20


@pytest.fixture(scope="session")
def master() -> Iterator[Any]:
    """A master for the whole session, stopped after the last test."""
    from arrow_split.mooncake import local_master

    with local_master() as running:
        yield running


@pytest.fixture(scope="session")
def writer(master: Any) -> Iterator[Any]:
    """The driver's client: it lends the store the memory its batches live in."""
    from arrow_split.mooncake import connect

    client = connect(master.address, segment_bytes=SEGMENT_BYTES)
    yield client
    client.close()


@pytest.fixture(scope="session")
def reader(master: Any) -> Iterator[Any]:
    """A rank's client: it lends nothing, it reads."""
    from arrow_split.mooncake import connect

    client = connect(master.address, segment_bytes=0)
    yield client
    client.close()
