"""Shared test configuration: a bounded hypothesis profile. The providers' own fixtures (the
moto-backed ``aws`` account among them) are in providers/*/tests/conftest.py."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
