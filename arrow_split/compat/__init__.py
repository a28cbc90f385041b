"""Compatibility leaves: arrow_split behind the names other frameworks already call.

:mod:`arrow_split.compat.miles` has miles' DP-split functions with their signatures and results,
and ``install()`` to patch them into miles. Each leaf imports the public core only (and Ray when
a function that puts or fetches is called); nothing in the core imports them.
"""

from __future__ import annotations

__all__: list[str] = []
