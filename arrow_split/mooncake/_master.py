"""A ``mooncake_master`` on a free localhost port: for tests, benchmarks and trying it out."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import mooncake

from arrow_split import TransportError

__all__ = ["LocalMaster", "local_master", "master_binary"]


def master_binary() -> str:
    """The ``mooncake_master`` the wheel ships, else the one on ``PATH``."""
    shipped = Path(mooncake.__file__).parent / "mooncake_master"
    if shipped.is_file():
        return str(shipped)
    found = shutil.which("mooncake_master")
    if found is None:
        msg = "no `mooncake_master` found: reinstall `mooncake-transfer-engine-non-cuda`"
        raise TransportError(msg)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class LocalMaster:
    """A running master: its ``host:port`` and its process."""

    address: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop the master (a no-op once it has exited)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextmanager
def local_master(*, log: Path | None = None, timeout: float = 10.0) -> Iterator[LocalMaster]:
    """Run a ``mooncake_master`` on 127.0.0.1 (free RPC and metrics ports) for the block.

    Raises
    ------
    TransportError
        The master exited or did not listen within ``timeout`` seconds.
    """
    port, metrics = _free_port(), _free_port()
    command = [
        master_binary(),
        "--rpc_address=127.0.0.1",
        f"--rpc_port={port}",
        "--metrics_host=127.0.0.1",
        f"--metrics_port={metrics}",
        "--logtostderr",
    ]
    sink = subprocess.DEVNULL if log is None else log.open("wb")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=sink)
    master = LocalMaster(f"127.0.0.1:{port}", process)
    try:
        _wait_listening(master, port, timeout)
        yield master
    finally:
        master.stop()
        if log is not None:
            sink.close()  # type: ignore[union-attr]


def _wait_listening(master: LocalMaster, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if master.process.poll() is not None:
            msg = f"mooncake_master exited with status {master.process.returncode} at start"
            raise TransportError(msg)
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    msg = f"mooncake_master did not listen on 127.0.0.1:{port} within {timeout} s"
    raise TransportError(msg)
