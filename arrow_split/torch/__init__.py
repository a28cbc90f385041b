"""Torch leaf: one rank's shard -> torch tensors, in the layout a training step wants.

See :mod:`arrow_split.torch._convert` for the layouts, dtypes and the memory rule. This leaf
imports the public core only; nothing in the core imports it.
"""

from __future__ import annotations

from arrow_split.torch._convert import TensorLayout, to_micro_batches, to_tensors

__all__ = ["TensorLayout", "to_micro_batches", "to_tensors"]
