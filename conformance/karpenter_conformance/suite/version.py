"""Which provider records this suite checks: its version follows the record's API version.

A record's ``api_version`` says which contract the provider was written against; this suite
checks only the versions in ``RECORD_API_VERSIONS`` and refuses another one up front, instead of
reporting failures of a contract the provider never claimed to keep.
"""

from __future__ import annotations

from karpenter_core.cloudprovider.plugin import ProviderRecord

__all__ = ["RECORD_API_VERSIONS", "UnsupportedRecordVersion", "check_record_version"]

RECORD_API_VERSIONS: frozenset[int] = frozenset({2})
"""The ``ProviderRecord.api_version`` values this suite has checks for."""


class UnsupportedRecordVersion(ValueError):
    """The record's API version is not one this suite checks."""


def check_record_version(record: ProviderRecord) -> None:
    """Raise ``UnsupportedRecordVersion`` naming the provider, its record's API version and the
    versions this suite checks, unless the suite checks the record's version."""
    if record.api_version in RECORD_API_VERSIONS:
        return
    versions = ", ".join(str(v) for v in sorted(RECORD_API_VERSIONS))
    raise UnsupportedRecordVersion(
        f"provider {record.name!r} has a record of api_version {record.api_version!r}; this "
        f"karpenter-conformance checks records of api_version {versions} (install the "
        "karpenter-conformance release that matches the provider's karpenter-core)"
    )
