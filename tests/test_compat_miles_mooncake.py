"""install() and miles' Mooncake store class, without Mooncake: its shape checked, undo restores.

The hand-off through a real master is tests/mooncake/test_miles_store.py.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from arrow_split import InstallError
from arrow_split.compat import miles
from tests.test_compat_miles import fake_miles  # noqa: F401

_STORE = """
    class Box:
        def __init__(self, inner):
            self.inner = inner

    class ObjectStoreGetResult:
        def __init__(self, value, release_fn):
            self.value = value

    class RayObjectStore:
        def put(self, value, value_spec=None):
            return Box(value)

        def get(self, ref):
            return ObjectStoreGetResult(ref.inner, lambda value: None)

    class MooncakeObjectStore:
        def put(self, value, value_spec=None):
            return Box({"handle": value})

        def get(self, ref):
            return ObjectStoreGetResult(ref.inner["handle"], lambda value: None)

        def remove(self, ref):
            ref.inner["removed"] = True
"""


def _store(root: Path, text: str) -> None:
    (root / "miles/utils/object_store.py").write_text(textwrap.dedent(text))


def test_the_mooncake_class_is_patched_other_values_stay_miles_and_undo_restores(
    fake_miles: Path,  # noqa: F811
) -> None:
    _store(fake_miles, _STORE)
    from miles.utils import object_store

    own = {name: vars(object_store.MooncakeObjectStore)[name] for name in ("put", "get", "remove")}
    installation = miles.install()
    for name in own:
        assert f"miles.utils.object_store.MooncakeObjectStore.{name}" in installation.patched
    store = object_store.MooncakeObjectStore()
    shard = {"tokens": [[1]], "partition": [0]}  # a rank's dict, not a whole batch: miles' own
    ref = store.put(shard)
    assert ref.inner == {"handle": shard}
    assert store.get(ref).value == shard
    store.remove(ref)
    assert ref.inner["removed"]
    installation.undo()
    assert {name: vars(object_store.MooncakeObjectStore)[name] for name in own} == own


@pytest.mark.parametrize(
    "edit",
    [
        ("def remove(self, ref)", "def remove(self)"),
        ("def put(self, value, value_spec=None)", "def put(self, data)"),
    ],
)
def test_a_mooncake_class_of_another_shape_is_an_install_error(
    fake_miles: Path,  # noqa: F811
    edit: tuple[str, str],
) -> None:
    mooncake_part = _STORE.index("class MooncakeObjectStore")
    _store(fake_miles, _STORE[:mooncake_part] + _STORE[mooncake_part:].replace(*edit))
    with pytest.raises(InstallError) as caught:
        miles.install()
    assert "`MooncakeObjectStore` is not" in str(caught.value)
    assert miles.current_installation() is None
