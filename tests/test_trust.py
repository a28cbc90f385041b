"""Parse at the door, trust inside: a split parses each argument once and re-checks nothing.

Calls of functions named like a check (``check*``, ``as_*``, ``validate*``, ``parse*``,
``_checked``) in the package are counted with :func:`sys.setprofile`.
"""

from __future__ import annotations

import collections
import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

import arrow_split
from arrow_split.testing import RolloutConfig, make_train_data

CHECK = re.compile(r"^_?(check|as|validate|parse)(_|$)|^_checked")


def _count(call: Callable[[], object]) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and "arrow_split" in code.co_filename and CHECK.search(code.co_name):
            counts[f"{code.co_filename.split('arrow_split/')[-1]}:{code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return counts


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return make_train_data(RolloutConfig(samples=32, response_mean=64, response_cap=128, seed=0))


def test_a_split_makes_a_handful_of_checks(data: dict[str, Any]) -> None:
    counts = _count(lambda: arrow_split.split_train_data_by_dp_raw(data, 4, balance_data=True))
    assert sum(counts.values()) <= 20, counts.most_common()


def test_the_core_checks_each_argument_once(data: dict[str, Any]) -> None:
    counts = _count(lambda: arrow_split.split_train_data_by_dp_raw(data, 4, balance_data=True))
    core = {name: n for name, n in counts.items() if not name.startswith("_codecs/")}
    assert sum(core.values()) <= 10, core


@pytest.mark.parametrize("entry", ["split", "shard_for_rank", "pad_to_dp"])
def test_dp_size_is_parsed_once_per_call(data: dict[str, Any], entry: str) -> None:
    batch = arrow_split.RolloutBatch.from_train_data(data)
    calls: dict[str, Callable[[], object]] = {
        "split": lambda: arrow_split.split_train_data_by_dp_raw(
            data, 4, balance_data=True, pad_to_dp=True
        ),
        "shard_for_rank": lambda: arrow_split.shard_for_rank(
            batch, 1, 4, balance_data=True, pad_to_dp=True
        ),
        "pad_to_dp": lambda: arrow_split.pad_to_dp(batch, 5),
    }
    assert _count(calls[entry])["_args.py:check_dp_size"] == 1
