"""The AWS provider's test fixtures: a moto server for the session and a freshly seeded account
per test (``karpenter_aws.moto_account``). Tests on moto belong to the slow tier and are marked
``slow`` here."""

from collections.abc import Iterator

import pytest

from karpenter_aws import moto_account

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
    server, endpoint_url = moto_account.start_server()
    yield endpoint_url
    server.stop()


@pytest.fixture
def aws(moto_server: str, monkeypatch: pytest.MonkeyPatch) -> moto_account.AWSEnv:
    """A freshly reset and seeded moto account; boto3 in this process is pointed at it with
    fake credentials so nothing reaches real AWS."""
    for name, value in moto_account.FAKE_ENV.items():
        monkeypatch.setenv(name, value)
    for name in moto_account.UNSET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    return moto_account.seed(moto_server)
