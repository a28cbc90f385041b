"""Benchmarks of arrow_split against the classic dict-of-lists path (never collected by pytest).

``python -m benchmarks.harness --workload medium`` runs the whole comparison; see
:mod:`benchmarks.harness`.
"""
