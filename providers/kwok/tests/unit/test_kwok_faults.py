"""The KWOK provider's fault files: listed operations fail as throttled, and only while listed;
listed offerings are refused for lack of capacity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext
from karpenter_core.cloudprovider.types import CloudProviderError, NodeClaimNotFound
from karpenter_kwok.cloudprovider import KWOKCloudProvider
from karpenter_kwok.faults import CloudErrorsFile, InsufficientCapacityFile


def _write(path: Path, text: str) -> None:
    """Write ``text`` and move the modification time on, so a rewrite within the file system's
    time resolution is still seen as a change."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(before + 10**9, before + 10**9))


def test_listed_operations_fail_as_throttled_until_taken_out(tmp_path: Path) -> None:
    path = tmp_path / "errors"
    provider = KWOKCloudProvider.from_context(
        ProviderContext(settings={"cloud-errors-file": str(path)})
    )
    _write(path, "create\n# a comment\ndelete\n")
    with pytest.raises(CloudProviderError, match="create: RequestLimitExceeded") as raised:
        provider.create(None)  # type: ignore[arg-type]  # the fault answers before the claim is read
    assert str(path) in str(raised.value)
    with pytest.raises(CloudProviderError, match="get: RequestLimitExceeded") as not_listed:
        _write(path, "get\n")
        provider.get("kwok://node-a")
    assert not isinstance(not_listed.value, NodeClaimNotFound)
    _write(path, "")
    with pytest.raises(CloudProviderError, match="no cluster is configured"):
        provider.get("kwok://node-a")  # the fault is gone: the call reaches the (missing) cluster


def test_no_file_means_no_faults(tmp_path: Path) -> None:
    CloudErrorsFile(None).check("create")
    CloudErrorsFile(str(tmp_path / "absent")).check("create")


def test_a_bad_line_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "errors"
    path.write_text("create\nlaunch\n", encoding="utf-8")
    with pytest.raises(CloudProviderError, match=rf"{path}:2: expected one of create, .*'launch'"):
        CloudErrorsFile(str(path)).check("create")


def test_the_insufficient_capacity_file_lists_offerings(tmp_path: Path) -> None:
    path = tmp_path / "faults"
    provider = KWOKCloudProvider.from_context(
        ProviderContext(settings={"insufficient-capacity-file": str(path)})
    )
    ref = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    nodepool = NodePool.from_manifest(
        {
            "metadata": {"name": "default"},
            "spec": {"template": {"spec": {"nodeClassRef": ref, "requirements": []}}},
        }
    )
    assert all(o.available for t in provider.get_instance_types(nodepool) for o in t.offerings)
    faults = InsufficientCapacityFile(str(path))
    _write(path, "c-1x-amd64-linux test-zone-a\n")
    with pytest.raises(CloudProviderError, match=rf"{path}:1: expected '<instance-type> <zone>"):
        faults.refuses(("c-1x-amd64-linux", "test-zone-a", "spot"))
    _write(path, "# comment\nc-1x-amd64-linux test-zone-a spot\n")
    assert faults.refuses(("c-1x-amd64-linux", "test-zone-a", "spot"))
    assert not faults.refuses(("c-1x-amd64-linux", "test-zone-b", "spot"))
