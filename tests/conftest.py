"""Shared test configuration: hypothesis profiles chosen by an environment variable.

``ARROW_SPLIT_HYPOTHESIS_PROFILE`` picks it: ``dev`` (the default) is quick, ``ci`` runs more
examples, derandomized, ``debug`` prints every example.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Verbosity, settings

settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("debug", max_examples=20, deadline=None, verbosity=Verbosity.verbose)
settings.load_profile(os.environ.get("ARROW_SPLIT_HYPOTHESIS_PROFILE", "dev"))
