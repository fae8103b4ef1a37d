"""Shared test configuration: a bounded hypothesis profile, the moto-backed AWS fixtures, and
the ``slow`` tier (tests on moto are marked slow here; tests that run pip or the karpenter
command mark themselves)."""

import os
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings

from tests import aws_env

settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=2000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SLOW_FIXTURES = frozenset({"aws", "moto_server"})
"""Fixtures that start a moto server: their tests belong to the slow tier."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests that use a moto server ``slow`` (``make unit`` leaves them to ``make slow``)."""
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def moto_server() -> Iterator[str]:
    """A moto server in the test process for the whole session; yields its endpoint URL."""
    server, endpoint_url = aws_env.start_server()
    yield endpoint_url
    server.stop()


@pytest.fixture
def aws(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> aws_env.AWSEnv:
    """A freshly reset and seeded moto account (see tests/aws_env.py); boto3 in this process
    is pointed at it with fake credentials so nothing reaches real AWS."""
    for name, value in aws_env.FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    for name in aws_env.UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    return aws_env.seed(moto_server)
