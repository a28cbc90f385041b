"""A Ray reference that crosses the wire: pickle, cloudpickle and plain JSON, without running code.

Ray writes a reference out of band as a call of its own deserializer on plain bytes (the object
id, the owner's address, the object's status). :func:`ref_to_bytes` keeps exactly that;
:func:`ref_from_bytes` reads it back with an unpickler that resolves that one function and
nothing else, so bytes from another process (or a JSON document carrying them) never run code.
docs/miles.md, "References on the wire", documents the JSON form and the object's lifetime: as
for any reference Ray serializes out of band, the object stays pinned until it is freed
(:func:`free`) or its owner exits.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import pickle
import warnings
from typing import Any

import ray
from ray import exceptions as ray_exceptions
from ray._private import internal_api
from ray._private import worker as ray_worker

from arrow_split import OptionError, OptionTypeError, TransportError
from arrow_split._args import as_int

__all__ = [
    "WIRE_FORMAT",
    "can_free",
    "check_session",
    "free",
    "ref_from_bytes",
    "ref_from_json",
    "ref_to_bytes",
    "ref_to_json",
]

WIRE_FORMAT = "arrow_split.ray_ref"
"""The ``format`` member of a reference's JSON document (version 1)."""

_DESERIALIZER = ("ray._private.serialization", "_object_ref_deserializer")
_OWN_MEMBERS = ("format", "version", "object_id", "ray")


class _RefUnpickler(pickle.Unpickler):
    """Resolves Ray's reference deserializer and refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == _DESERIALIZER:
            return super().find_class(module, name)
        msg = f"a wire reference may only call Ray's reference deserializer, not `{module}.{name}`"
        raise pickle.UnpicklingError(msg)


def _check_ref(object_ref: object) -> None:
    if not isinstance(object_ref, ray.ObjectRef):
        msg = f"expected a ray.ObjectRef, got {type(object_ref).__name__}"
        raise OptionTypeError(msg)


def check_session(object_ref: ray.ObjectRef[Any], who: str, what: str) -> None:
    """Refuse a reference this process cannot read: Ray not started here, or its owner unknown.

    A TransportError keyed by the object's id, never a local Ray started (as Ray's own calls
    would, before failing): a reference lives in the Ray session of the driver that put it.
    """
    lead = f"{who}: {what}" if who else what
    if not ray.is_initialized():
        msg = (
            f"{lead} (object {object_ref.hex()}) cannot be read: Ray is not initialized in this "
            "process; call `ray.init()` (on a cluster, the job's connection) first"
        )
        raise TransportError(msg, key=object_ref.hex())
    try:
        _owner_known(object_ref)
    except ValueError:
        msg = (
            f"{lead} (object {object_ref.hex()}) has no owner in this Ray session: it comes "
            "from an earlier session, or was made without one (`ObjectRef.from_random()`); pass "
            "a reference put in this session"
        )
        raise TransportError(msg, key=object_ref.hex()) from None


def _owner_known(object_ref: ray.ObjectRef[Any]) -> None:
    """Raise ValueError where this process's Ray does not know ``object_ref``'s owner.

    The core worker's own record (a lookup in this process, under a microsecond); a Ray
    without that call is asked for the object's locations, which looks the owner up first
    (a call to the owner: about 25 µs, 200 µs cold, on every fetch).
    """
    lookup = _owner_lookup()
    if lookup is not None:
        lookup(object_ref)
        return
    with contextlib.suppress(ray_exceptions.RayError):  # a known owner, not waited for
        ray.experimental.get_object_locations([object_ref], timeout_ms=0)


def _owner_lookup() -> Any:
    """The core worker's owner lookup (raises ValueError for an unknown owner), or ``None``."""
    core_worker = getattr(ray_worker.global_worker, "core_worker", None)
    return getattr(core_worker, "get_owner_address", None)


def ref_to_bytes(object_ref: ray.ObjectRef[Any]) -> bytes:
    """Ray's out-of-band form of ``object_ref`` (id, owner address, status); pins the object.

    Raises
    ------
    OptionTypeError
        ``object_ref`` is not a Ray reference.
    TransportError
        Ray is not initialized here, or the reference has no owner in this session.
    """
    _check_ref(object_ref)
    check_session(object_ref, "", "the reference")
    payload: bytes = ray.cloudpickle.dumps(object_ref)  # type: ignore[no-untyped-call]
    return payload


def ref_from_bytes(payload: bytes, what: str = "the reference") -> ray.ObjectRef[Any]:
    """The reference :func:`ref_to_bytes` wrote; refuses anything else without running it."""
    if not isinstance(payload, bytes):
        msg = f"{what} must be bytes from `ref_to_bytes`, got {type(payload).__name__}"
        raise OptionTypeError(msg)
    try:
        object_ref = _RefUnpickler(io.BytesIO(payload)).load()
    except Exception as exc:  # any damage: a truncated stream, a foreign global, bad arguments
        msg = (
            f"{what} is not a Ray reference written by arrow_split ({type(exc).__name__}: "
            f"{exc}); pass the bytes or JSON that `to_json`/`ref_to_bytes` produced, unchanged"
        )
        raise OptionError(msg, key=what, got=type(exc).__name__) from None
    if not isinstance(object_ref, ray.ObjectRef):
        msg = f"{what} decodes to a {type(object_ref).__name__}, not a Ray reference"
        raise OptionError(msg)
    return object_ref


def ref_to_json(object_ref: ray.ObjectRef[Any], **members: int | str | None) -> str:
    """A JSON document for ``object_ref`` plus ``members`` (ints, strs or None): see the module.

    Raises
    ------
    OptionTypeError
        ``object_ref`` is not a Ray reference, or a member is not an int, a str or None.
    OptionError
        A member named as one of the document's own (``format``, ``version``, ``object_id``,
        ``ray``).
    TransportError
        As :func:`ref_to_bytes`.
    """
    _check_ref(object_ref)
    extra = {name: _member(name, value) for name, value in members.items()}
    payload = ref_to_bytes(object_ref)
    document: dict[str, object] = {
        "format": WIRE_FORMAT,
        "version": 1,
        "object_id": object_ref.hex(),
        "ray": base64.b64encode(payload).decode("ascii"),
        **extra,
    }
    return json.dumps(document, sort_keys=True)


def _member(name: str, value: object) -> int | str | None:
    """An extra member of a reference's document: not one of its own names; an int, str or None."""
    if name in _OWN_MEMBERS:
        msg = f"`{name}` is a member of the reference's document itself; name yours otherwise"
        raise OptionError(msg, key=name, got=repr(name))
    if value is None or isinstance(value, str):
        return value
    try:
        return as_int(name, value)
    except OptionTypeError as error:  # the one rule for ints; the message lists all three
        raise error.replaced(expected="an int, a str or None") from None


def ref_from_json(text: str | bytes) -> tuple[ray.ObjectRef[Any], dict[str, Any]]:
    """The reference and the other members of a document :func:`ref_to_json` wrote."""
    if not isinstance(text, (str, bytes)):
        msg = f"a reference's JSON must be str or bytes, got {type(text).__name__}"
        raise OptionTypeError(msg)
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting too deep to parse
        msg = (
            f"a reference's JSON does not parse ({type(exc).__name__}: {exc}); pass the "
            "text `to_json()` returned"
        )
        raise OptionError(msg, got=type(exc).__name__) from None
    if not isinstance(document, dict) or document.get("format") != WIRE_FORMAT:
        msg = f'a reference\'s JSON must be an object with "format": "{WIRE_FORMAT}"'
        raise OptionError(msg)
    if document.get("version") != 1:
        msg = (
            f"a reference's JSON has version {document.get('version')!r}; this arrow_split reads "
            "version 1: read it with the arrow_split that wrote it"
        )
        raise OptionError(msg)
    encoded = document.pop("ray", None)
    object_id = document.get("object_id")
    what = f"the reference {object_id}"
    if not isinstance(encoded, str):
        msg = f'{what}: the JSON lacks its "ray" member (a base64 string)'
        raise OptionError(msg)
    try:
        payload = base64.b64decode(encoded, validate=True)
    except ValueError:  # binascii.Error, or a character outside ASCII
        msg = f'{what}: the "ray" member is not base64'
        raise OptionError(msg, key="ray") from None
    object_ref = ref_from_bytes(payload, what)
    if object_ref.hex() != object_id:
        msg = f'{what}: the "ray" member holds another reference ({object_ref.hex()})'
        raise OptionError(msg)
    return object_ref, document


def can_free() -> bool:
    """Whether this Ray can free an object while references to it live (older Rays only)."""
    return callable(getattr(internal_api, "free", None))


def free(object_ref: ray.ObjectRef[Any]) -> None:
    """Free the object wherever it is stored; once Ray drops it, a get raises a TransportError.

    Ray drops a freed object asynchronously: a get in the moments after the call may still read
    it (its values intact).

    Raises
    ------
    TransportError
        This Ray has no such call (:func:`can_free`; then the object lives until its last
        reference is dropped or its owner exits), Ray is not initialized here, or the owner is
        gone or unknown.
    """
    _check_ref(object_ref)
    check_session(object_ref, "", "the reference")
    release = getattr(internal_api, "free", None)
    if not callable(release):
        msg = (
            f"Ray {ray.__version__} cannot free the reference {object_ref.hex()} while "
            "references to it live; drop them (the object goes with the last one) or end its owner"
        )
        raise TransportError(msg, key=object_ref.hex())
    try:
        with warnings.catch_warnings():  # Ray marks the call deprecated; it is what frees now
            warnings.simplefilter("ignore", DeprecationWarning)
            release([object_ref])
    except Exception as exc:  # the owner is gone: nothing left to free
        msg = f"could not free the reference {object_ref.hex()} ({type(exc).__name__}: {exc})"
        raise TransportError(msg) from exc
