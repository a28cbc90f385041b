"""Assertions on an error's fields (its facts), not on its wording.

The wording of messages is pinned in one place, ``tests/data/error_messages.json``, by
``tests/test_error_messages.py``; other tests assert the class and the fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from arrow_split import ArrowSplitError

_LOCATION = ("sample", "position", "item")

_E = TypeVar("_E", bound=BaseException)


def assert_facts(error: BaseException, facts: dict[str, Any]) -> None:
    """``error`` holds ``facts``; a location field (sample, position, item) not named is unset."""
    assert isinstance(error, ArrowSplitError), repr(error)
    held = {name: getattr(error, name) for name in facts}
    assert held == facts, f"{error!r}: {held} != {facts}"
    for name in _LOCATION:
        if name not in facts:
            assert getattr(error, name) is None, f"{error!r}: `{name}` is {getattr(error, name)}"


@contextmanager
def raises_facts(
    error: type[_E] | tuple[type[_E], ...], /, **facts: Any
) -> Iterator[pytest.ExceptionInfo[_E]]:
    """``pytest.raises(error)`` whose error then holds ``facts`` (see :func:`assert_facts`)."""
    with pytest.raises(error) as info:
        yield info
    assert_facts(info.value, facts)
