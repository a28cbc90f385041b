"""Test helpers shipped in the library: seeded batches, assertions, kill test (docs/testing.md)."""

from __future__ import annotations

import dataclasses
import glob
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any, cast

import pyarrow as pa

from arrow_split import (
    JournalError,
    JournalSync,
    OptionTypeError,
    RolloutBatch,
    RolloutBatchBuilder,
    Shard,
)
from arrow_split._args import as_choice, as_int, describe
from arrow_split.batch import arrays_equal, values_equal
from arrow_split.testing._generate import (
    WORKLOADS,
    ColumnSet,
    RolloutConfig,
    is_per_sample,
    iter_sample_groups,
    make_lengths,
    make_multimodal_train_data,
    make_train_data,
)

__all__ = [
    "ColumnSet",
    "KillReport",
    "RolloutConfig",
    "WORKLOADS",
    "assert_batches_equal",
    "assert_shards_equal",
    "iter_sample_groups",
    "make_lengths",
    "make_multimodal_train_data",
    "make_train_data",
    "run_kill_test",
]

_MISSING = object()


def _fail(what: str, left: object, right: object) -> None:
    msg = f"{what} differ\n[left]:  {left!r:.200}\n[right]: {right!r:.200}"
    raise AssertionError(msg)


def _first_differing_row(left: pa.Array, right: pa.Array) -> int:
    """The first row at which two arrays of equal length and type differ (NaN equals NaN)."""
    for row in range(len(left)):
        if not arrays_equal(left.slice(row, 1), right.slice(row, 1)):
            return row
    return len(left)


def _check_record_batches(left: pa.RecordBatch, right: pa.RecordBatch) -> None:
    if left.schema.names != right.schema.names:
        _fail("column names", left.schema.names, right.schema.names)
    if left.num_rows != right.num_rows:
        _fail("numbers of rows", left.num_rows, right.num_rows)
    for name, left_column, right_column in zip(
        left.schema.names, left.columns, right.columns, strict=True
    ):
        if left_column.type != right_column.type:
            _fail(f"types of column `{name}`", left_column.type, right_column.type)
        if not arrays_equal(left_column, right_column):
            row = _first_differing_row(left_column, right_column)
            values = (left_column[row].as_py(), right_column[row].as_py())
            _fail(f"column `{name}`, row {row}: values", *values)
    if not left.schema.equals(right.schema, check_metadata=True):
        _fail("record batches (schema metadata)", left.schema, right.schema)


def _check_mapping(what: str, left: Mapping[str, Any], right: Mapping[str, Any]) -> None:
    if list(left) != list(right):
        _fail(f"keys of {what}", list(left), list(right))
    for key, value in left.items():
        if not values_equal(value, right[key]):
            _fail(f"{what}[`{key}`]", value, right[key])


def assert_batches_equal(left: RolloutBatch | Shard, right: RolloutBatch | Shard) -> None:
    """Assert that two rollout batches (or shards) hold the same columns, specs and globals.

    NaN equals NaN at the same place. The ``AssertionError`` names the first difference (a
    column's name, type or first differing row with both values, a spec, a batch-global key).

    Examples
    --------
    >>> from arrow_split import RolloutBatch
    >>> from arrow_split.testing import assert_batches_equal
    >>> batch = RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]})
    >>> assert_batches_equal(batch, RolloutBatch.from_train_data({"tokens": [[1, 2], [3]]}))
    """
    for side, value in (("left", left), ("right", right)):
        if not all(hasattr(value, name) for name in ("record_batch", "specs", "batch_globals")):
            _fail(f"types ({side} is not a rollout batch)", type(left), type(right))
    _check_record_batches(left.record_batch, right.record_batch)
    _check_mapping("specs", left.specs, right.specs)
    _check_mapping("batch globals", left.batch_globals, right.batch_globals)


def assert_shards_equal(left: RolloutBatch | Shard, right: RolloutBatch | Shard) -> None:
    """Assert two shards equal as batches, then in partition, lengths and plan fingerprint."""
    assert_batches_equal(left, right)
    for name in ("partition", "batch_total_lengths", "plan_fingerprint"):
        left_value, right_value = getattr(left, name, _MISSING), getattr(right, name, _MISSING)
        missing = left_value is _MISSING or right_value is _MISSING
        if not missing and not values_equal(left_value, right_value):
            _fail(f"`{name}`", left_value, right_value)


_IDENTITY = "sample_indices"
_GROUP = 4  # samples per group the kill test's writer appends
_RECORD_FRAME = struct.Struct("<4s8sQQQI")  # a record's frame (format 2: arrow_split._journal)


@dataclasses.dataclass(frozen=True, slots=True)
class KillReport:
    """What :func:`run_kill_test` saw; a sound journal has ``lost == duplicated == torn == 0``.

    ``in_flight_kept``: kills after the write, before ``extend`` returned; ``torn_tails``: partial
    last records dropped by recovery (``torn_injected`` of them cut on purpose).
    """

    kill_points: int
    acked_samples: int
    lost: int
    duplicated: int
    torn: int
    in_flight_kept: int
    torn_tails: int
    torn_injected: int
    rounds: int

    def as_dict(self) -> dict[str, int]:
        """The report as a JSON object."""
        return dataclasses.asdict(self)


def _kill_config(seed: int, groups: int) -> RolloutConfig:
    """The seeded batch whose groups of 4 samples the kill test appends (every column kind)."""
    return RolloutConfig(groups * _GROUP, 96.0, 384, prompt_tokens=(8, 64), seed=seed)


def _zygote() -> None:  # pragma: no cover - runs in the helper process
    """The helper process: ``run <start>`` on stdin forks a writer, then reports its exit."""
    folder, seed, groups, sync = sys.argv[1:5]
    stream = list(iter_sample_groups(_kill_config(int(seed), int(groups)), _GROUP))
    for line in sys.stdin:
        start = int(line.split()[1])
        pid = os.fork()
        if pid == 0:
            _writer(folder, stream, start, sync)
        _, status = os.waitpid(pid, 0)
        os.write(1, f"exit {status}\n".encode())


def _writer(
    folder: str, stream: Sequence[dict[str, Any]], start: int, sync: str
) -> None:  # pragma: no cover
    """Append ``stream[start:]`` in a forked writer, reporting each call, then wait to be killed."""
    os.write(1, f"pid {os.getpid()}\n".encode())
    if any(name.endswith(".journal") for name in os.listdir(folder)):
        builder = RolloutBatchBuilder.recover(folder, sync=sync)  # type: ignore[arg-type]
    else:
        builder = RolloutBatchBuilder(journal=folder, sync=sync, identity=_IDENTITY)  # type: ignore[arg-type]
    for index in range(start, len(stream)):
        os.write(1, f"begin {index}\n".encode())
        builder.extend(stream[index])
        os.write(1, f"ack {index}\n".encode())
    os.write(1, b"done\n")
    while True:  # alive until the test process kills it: its pid is never another's
        signal.pause()


def _first_groups(train_data: Mapping[str, Any], count: int) -> RolloutBatch:
    """``from_train_data`` of the first ``count`` groups of ``train_data``."""
    rows = count * _GROUP
    first = {
        key: value[:rows] if is_per_sample(key) else value for key, value in train_data.items()
    }
    return RolloutBatch.from_train_data(first)


def _recovered(folder: str, scratch: str) -> tuple[RolloutBatch, bool]:
    """The batch recovered from a copy of ``folder``, and whether its journal had a torn tail."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(folder, scratch)
    (path,) = glob.glob(os.path.join(scratch, "*.journal"))
    size = os.path.getsize(path)
    builder = RolloutBatchBuilder.recover(scratch)
    torn = os.path.getsize(path) < size  # recovery cuts a torn tail off
    try:
        return builder.finish(), torn
    finally:
        builder.close()


class _Counts:
    def __init__(self) -> None:
        self.kept = False
        self.values = dict.fromkeys(("lost", "duplicated", "torn", "in_flight_kept"), 0)
        self.values.update(torn_tails=0, torn_injected=0, acked_samples=0)

    def judge(
        self, train_data: Mapping[str, Any], acked: int, got: RolloutBatch, torn_tail: bool
    ) -> None:
        """Compare a recovery with the first ``acked`` groups (or ``acked + 1``, whole)."""
        self.values["torn_tails"] += torn_tail
        names = got.record_batch.schema.names
        ids = got.record_batch.column(_IDENTITY).to_pylist() if _IDENTITY in names else []
        wanted = train_data[_IDENTITY][: acked * _GROUP]
        self.values["acked_samples"] = max(self.values["acked_samples"], len(wanted))
        self.values["duplicated"] += len(ids) - len(set(ids))
        self.values["lost"] += len(set(wanted) - set(ids))
        extra = len(set(ids) - set(wanted))
        whole = len(train_data[_IDENTITY][acked * _GROUP : (acked + 1) * _GROUP])
        if extra and extra != whole:
            self.values["torn"] += extra
            return
        self.values["in_flight_kept"] += bool(extra)
        self.kept = bool(extra)
        if not ids:
            return
        try:
            assert_batches_equal(got, _first_groups(train_data, acked + bool(extra)))
        except AssertionError:
            self.values["torn"] += 1


def _cut_last_record(folder: str, rng: random.Random) -> None:
    """Cut the journal's last record at a random byte (a kill inside its write)."""
    (path,) = glob.glob(os.path.join(folder, "*.journal"))
    with open(path, "rb") as file:
        data = file.read()
    start = end = 0
    while end < len(data):
        _, _, _, length, _, _ = _RECORD_FRAME.unpack_from(data, end)
        start, end = end, end + _RECORD_FRAME.size + length
    with open(path, "r+b") as file:
        file.truncate(rng.randrange(start + 1, end))


def _one_round(
    zygote: subprocess.Popen[bytes], acked: int, target: int, delay: float
) -> tuple[int, bool]:
    """Replay from group ``acked - 1``, kill ``delay`` s into ``target``: (acked, killed)."""
    commands, reports = cast(IO[bytes], zygote.stdin), cast(IO[bytes], zygote.stdout)
    commands.write(f"run {max(0, acked - 1)}\n".encode())
    commands.flush()
    pid, killed = 0, False
    for line in iter(reports.readline, b""):
        words = line.decode().split()
        if words[0] == "pid":
            pid = int(words[1])
        elif words[0] == "ack":
            acked = max(acked, int(words[1]) + 1)
        elif words[0] == "begin" and int(words[1]) >= target and not killed:
            deadline = time.perf_counter() + delay
            while time.perf_counter() < deadline:
                pass
            killed = _kill(pid)  # False when the writer ended first: no kill point
        elif words[0] == "done" and not killed:  # the end of the stream: no kill point
            _kill(pid)
        elif words[0] == "exit":
            return acked, killed
    msg = "the kill test's helper process died; run it alone to see its error"
    raise JournalError(msg)


def _kill(pid: int) -> bool:
    """SIGKILL ``pid``; ``False`` if it had already exited."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


_MAX_KILLS = 100_000  # each kill starts a writer: a bound on the time one argument can cost
_MAX_GROUPS = 1_000_000


def run_kill_test(
    kills: int, *, seed: int = 0, groups: int = 48, sync: str = "os", folder: str | None = None
) -> KillReport:
    """SIGKILL a journaling writer ``kills`` times; count lost, duplicated and torn samples.

    Each forked writer recovers the journal in ``folder`` (a temporary one by default) and
    appends ``groups`` groups of 4 samples; each recovery must hold exactly the acknowledged
    groups, plus the interrupted one whole or not at all. POSIX only (it forks).
    """
    kills = as_int("kills", kills, minimum=0, maximum=_MAX_KILLS)
    seed = as_int("seed", seed, minimum=0)
    groups = as_int("groups", groups, minimum=1, maximum=_MAX_GROUPS)
    sync = as_choice("sync", sync, JournalSync)
    if folder is not None and not isinstance(folder, str):
        msg = f"`folder` must be None or a str, got {describe(folder)}"
        raise OptionTypeError(msg, key="folder")
    rng = random.Random(seed)
    base = folder or tempfile.mkdtemp(prefix="arrow_split_kill_")
    journal, scratch = os.path.join(base, "journal"), os.path.join(base, "scratch")
    os.makedirs(journal, exist_ok=True)
    train_data = make_train_data(_kill_config(seed, groups))
    arguments = [journal, str(seed), str(groups), sync]
    code = "from arrow_split.testing import _zygote; _zygote()"
    counts, done, rounds, start = _Counts(), 0, 1, 0
    try:  # leaving the `with` closes the zygote's stdin (it exits) and waits for it
        with subprocess.Popen(
            [sys.executable, "-c", code, *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        ) as zygote:
            while done < kills:
                target = start + rng.randrange(0, 6)
                acked, killed = _one_round(zygote, start, target, rng.uniform(0, 2e-3))
                if not killed:  # the writer reached the end of the stream: a new journal
                    shutil.rmtree(journal)
                    os.makedirs(journal)
                    rounds, start = rounds + 1, 0
                    continue
                counts.judge(train_data, acked, *_recovered(journal, scratch))
                if counts.kept and rng.random() < 0.5:
                    _cut_last_record(journal, rng)
                    counts.values["torn_injected"] += 1
                    counts.judge(train_data, acked, *_recovered(journal, scratch))
                    counts.values["torn"] += counts.kept  # a cut record must be gone whole
                start, done = acked, done + 1
    finally:
        if folder is None:
            shutil.rmtree(base, ignore_errors=True)
    return KillReport(kill_points=done, rounds=rounds, **counts.values)
