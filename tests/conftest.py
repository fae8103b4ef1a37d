"""Shared test configuration: bytecode caching and a bounded hypothesis profile. The providers'
own fixtures (the moto-backed ``aws`` account among them) are in providers/*/tests/conftest.py."""

import os
import sys

from hypothesis import HealthCheck, settings

# Test modules (rewritten for assertions) and the code they import are cached in __pycache__ even
# where the environment sets PYTHONDONTWRITEBYTECODE: compiling them afresh doubles collection.
sys.dont_write_bytecode = False

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
