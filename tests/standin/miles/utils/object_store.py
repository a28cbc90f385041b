"""The store singleton: `init_instance(args)` builds the backend, `get_instance()` returns it."""

from abc import ABC, abstractmethod
from dataclasses import dataclass

from miles.utils.ray_utils import Box

StoreObjectRef = Box


@dataclass(frozen=True)
class ValueSpec:
    codec: str
    dtype: str | None = None


class ObjectStoreGetResult:
    def __init__(self, value, release_fn):
        self._value = value
        self._release_fn = release_fn

    @property
    def value(self):
        return self._value

    def __enter__(self):
        return self._value

    def __exit__(self, exc_type, exc_value, traceback):
        self._release_fn(self._value)


_INSTANCE = None


def init_instance(args, *, contribute_segment=None):
    global _INSTANCE
    if _INSTANCE is not None:
        raise RuntimeError("object store instance is already initialized")
    _INSTANCE = RayObjectStore()
    return _INSTANCE


def get_instance():
    if _INSTANCE is None:
        raise RuntimeError("object store instance is not initialized")
    return _INSTANCE


class BaseObjectStore(ABC):
    @abstractmethod
    def put(self, value, value_spec=None): ...

    @abstractmethod
    def get(self, ref): ...

    @abstractmethod
    def remove(self, ref): ...


class RayObjectStore(BaseObjectStore):
    def put(self, value, value_spec=None):
        import ray

        return Box(ray.put(value))

    def get(self, ref):
        import ray

        return ObjectStoreGetResult(value=ray.get(ref.inner), release_fn=lambda value: None)

    def remove(self, ref):
        pass
