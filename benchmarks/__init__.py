"""Benchmarks of arrow_split against the classic dict-of-lists path (never collected by pytest).

``python -m benchmarks`` (``make bench``) runs every benchmark the README quotes and writes their
stamped JSON into ``docs/benchmarks/``; see :mod:`benchmarks.__main__` and, to add one,
:mod:`benchmarks._common`.
"""
