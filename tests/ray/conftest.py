"""One real local Ray per test module, started and shut down by the ``ray_cluster`` fixture.

The cluster has 2 CPUs and a 300 MB object store; the DP actors of the tests ask for no CPU, so
more ranks than CPUs can run at once. The workers Ray starts inherit ``PYTHONPATH`` with the
repository root first, so they import this checkout of ``arrow_split``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

REPO_ROOT = str(Path(__file__).resolve().parents[2])
OBJECT_STORE_BYTES = 300 * 1024 * 1024


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster for the whole module; shut down after its last test."""
    python_path = os.pathsep.join(filter(None, [REPO_ROOT, os.environ.get("PYTHONPATH")]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", python_path)
        ray.init(
            address="local",  # a new instance, even if another Ray runs on this machine
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=OBJECT_STORE_BYTES,
            log_to_driver=False,
            logging_level="ERROR",
        )
    try:
        yield
    finally:
        ray.shutdown()
