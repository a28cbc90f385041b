"""Pickled objects decoded as data: an unpickler that runs no code a file brings.

A pickle is a program: unpickling calls whatever callables it names, so a crafted file runs code.
:func:`loads_plain` reads only *plain data*, whose pickles name no callable beyond a fixed
allowlist: ``None``, bools, ints, floats, complex numbers, str, bytes, bytearrays, lists, tuples,
sets, frozensets and dicts of these, numpy arrays (numeric, bool, bytes and str dtypes) and numpy
scalars. The allowlist names numpy's reconstruction functions under both numpy 1's
(``numpy.core``) and numpy 2's (``numpy._core``) module names, resolved to the running numpy's
own functions (a pickle written under one numpy reads under the other). Anything else raises
:class:`NotPlainData`, which the caller turns into the library's error naming the column, the
sample and the ``trust_objects=True`` option; :func:`loads_trusted` is plain ``pickle.loads``,
for objects the caller trusts.
"""

from __future__ import annotations

import builtins
import codecs
import importlib
import io
import pickle

import numpy as np

__all__ = ["NotPlainData", "loads_plain", "loads_trusted"]

_CORE = "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"
_NUMERIC = importlib.import_module(f"{_CORE}.numeric")
_MULTIARRAY = importlib.import_module(f"{_CORE}.multiarray")
_NUMPY_FUNCTIONS = {
    "_frombuffer": _NUMERIC._frombuffer,
    "_reconstruct": _MULTIARRAY._reconstruct,
    "scalar": _MULTIARRAY.scalar,
}
_ALLOWED: dict[tuple[str, str], object] = {
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    **{
        (f"numpy.{core}.{module}", name): function
        for core in ("core", "_core")
        for module, name, function in (
            ("numeric", "_frombuffer", _NUMPY_FUNCTIONS["_frombuffer"]),
            ("multiarray", "_reconstruct", _NUMPY_FUNCTIONS["_reconstruct"]),
            ("multiarray", "scalar", _NUMPY_FUNCTIONS["scalar"]),
        )
    },
    **{
        ("builtins", name): getattr(builtins, name)
        for name in ("bytearray", "complex", "frozenset", "set")
    },
    ("_codecs", "encode"): codecs.encode,  # bytes in protocols 0 to 2: a pure text encoding
}


class NotPlainData(Exception):  # noqa: N818 - internal signal, turned into a library error
    """A pickle names a callable outside the allowlist (``module.name``)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "__builtin__":  # protocols 0 to 2 name Python 2's module
            module = "builtins"
        found = _ALLOWED.get((module, name))
        if found is None:
            raise NotPlainData(f"{module}.{name}")
        return found


def loads_plain(data: bytes | memoryview) -> object:
    """The plain data a pickle holds, running no code it names.

    Raises
    ------
    NotPlainData
        The pickle names a callable outside the allowlist (a class, a function).
    pickle.UnpicklingError, EOFError, ValueError, ...
        The bytes are not a whole pickle (the caller turns any of these into a typed error).
    """
    return _PlainUnpickler(io.BytesIO(data)).load()


def loads_trusted(data: bytes | memoryview) -> object:
    """Any pickle (``pickle.loads``): only for objects the caller trusts."""
    return pickle.loads(data)
