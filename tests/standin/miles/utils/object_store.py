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
    if getattr(args, "object_store_backend", "ray") == "mooncake":
        _INSTANCE = MooncakeObjectStore(args, contribute_segment=bool(contribute_segment))
    else:
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


class MooncakeObjectStore(BaseObjectStore):
    """miles' Mooncake backend: its structured object store over a Mooncake client."""

    def __init__(self, args, *, contribute_segment):
        from mooncake.store import MooncakeDistributedStore
        from mooncake.structured_object_store import MooncakeBundleTransfer

        self._init_kwargs = args.mooncake_store_init_kwargs or {}
        store = MooncakeDistributedStore()
        config = {
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "local_buffer_size": 16 * 2**20,
            "protocol": "tcp",
            "rdma_devices": "",
            "master_server_addr": self._init_kwargs["master_server_address"],
            "global_segment_size": self._init_kwargs["global_segment_size"]
            if contribute_segment
            else 0,
        }
        if store.setup(config):
            raise RuntimeError("Mooncake store setup failed")
        self._transfer = MooncakeBundleTransfer(store, key_prefix="miles-object-store")

    def put(self, value, value_spec=None):
        from mooncake.structured_object_store import export_ref

        return Box(export_ref(self._transfer.put(value, type="dict", namespace="miles")))

    def get(self, ref):
        from mooncake.structured_object_store import MooncakeBundleTransfer, import_ref

        value = self._transfer.get(import_ref(ref.inner), type="dict")
        return ObjectStoreGetResult(value=value, release_fn=MooncakeBundleTransfer.release_result)

    def remove(self, ref):
        from mooncake.structured_object_store import import_ref

        self._transfer.cleanup_dataproto(import_ref(ref.inner))

    def close(self):
        self._transfer.store.close()
