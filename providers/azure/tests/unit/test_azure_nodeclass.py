"""The AKSNodeClass model: upstream's defaults and rules, errors naming the field, the drift
hash and the shipped CRD."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from karpenter_azure.nodeclass import (
    NODE_CLASS,
    AKSNodeClass,
    AKSNodeClassSpec,
    nodeclass_hash,
    validation_problems,
)
from karpenter_core.sdk.crds import crd_file, crd_path, node_class_crd

SUBNET = (
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/MC_rg_cluster_eastus"
    "/providers/Microsoft.Network/virtualNetworks/aks-vnet/subnets/aks-subnet"
)

CRD_PATH = crd_path(NODE_CLASS)


def problems(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        AKSNodeClass.from_manifest({"metadata": {"name": "default"}, "spec": spec})
    return validation_problems(caught.value)


def test_defaults_are_upstreams() -> None:
    spec = AKSNodeClass.from_manifest({"metadata": {"name": "default"}}).spec
    assert (spec.os_disk_size_gb, spec.image_family, spec.fips_mode) == (128, "Ubuntu", None)
    kubelet = AKSNodeClassSpec.model_validate({"kubelet": {}}).kubelet
    assert kubelet is not None
    assert kubelet.model_dump(by_alias=True, exclude_none=True) == {
        "cpuManagerPolicy": "none",
        "cpuCFSQuota": True,
        "cpuCFSQuotaPeriod": "100ms",
        "topologyManagerPolicy": "none",
        "containerLogMaxSize": "50Mi",
        "containerLogMaxFiles": 5,
    }


def test_a_full_spec_is_accepted_and_round_trips() -> None:
    manifest = {
        "vnetSubnetID": SUBNET,
        "osDiskSizeGB": 30,
        "imageFamily": "AzureLinux",
        "fipsMode": "FIPS",
        "tags": {"team": "a", "cost-center": "42"},
        "maxPods": 250,
        "security": {"encryptionAtHost": True},
        "kubelet": {
            "cpuManagerPolicy": "static",
            "cpuCFSQuota": False,
            "cpuCFSQuotaPeriod": "200ms",
            "imageGCHighThresholdPercent": 85,
            "imageGCLowThresholdPercent": 80,
            "topologyManagerPolicy": "best-effort",
            "allowedUnsafeSysctls": ["kernel.msg*", "net.ipv4.route.min_pmtu"],
            "containerLogMaxSize": "10Mi",
            "containerLogMaxFiles": 2,
            "podPidsLimit": 1024,
        },
    }
    spec = AKSNodeClassSpec.model_validate(manifest)
    assert spec.model_dump(by_alias=True, exclude_none=True) == manifest
    assert spec.encryption_at_host() and spec.fips()


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"vnetSubnetID": "subnet-1"}, "spec.vnetSubnetID", "is not a subnet resource id"),
        (
            {"vnetSubnetID": SUBNET.replace("virtualNetworks", "vnets")},
            "spec.vnetSubnetID",
            "is not a subnet resource id",
        ),
        (
            {"kubelet": {"containerLogMaxSize": "50Mi\n"}},
            "spec.kubelet.containerLogMaxSize",
            "is not a size",
        ),
        ({"osDiskSizeGB": 29}, "spec.osDiskSizeGB", "greater than or equal to 30"),
        ({"osDiskSizeGB": 2049}, "spec.osDiskSizeGB", "less than or equal to 2048"),
        ({"imageFamily": "Ubuntu2004"}, "spec.imageFamily", "'Ubuntu'"),
        ({"fipsMode": "Enabled"}, "spec.fipsMode", "'FIPS'"),
        ({"maxPods": 9}, "spec.maxPods", "greater than or equal to 10"),
        ({"maxPods": 251}, "spec.maxPods", "less than or equal to 250"),
        ({"tags": {"a" * 513: "v"}}, "spec.tags", "less than 512 characters"),
        ({"tags": {"a?b": "v"}}, "spec.tags", "must not contain '<', '>'"),
        ({"tags": {"a\\b": "v"}}, "spec.tags", "must not contain '\\'"),
        ({"tags": {"k": "v" * 257}}, "spec.tags", "values must be less than 256"),
        (
            {"fipsMode": "FIPS", "imageFamily": "Ubuntu2204"},
            "spec",
            "FIPS is not yet supported for Ubuntu2204 or Ubuntu2404",
        ),
        (
            {"kubelet": {"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 50}},
            "spec.kubelet",
            "imageGCHighThresholdPercent (50) must be greater than imageGCLowThresholdPercent",
        ),
        (
            {"kubelet": {"imageGCHighThresholdPercent": 101}},
            "spec.kubelet.imageGCHighThresholdPercent",
            "less than or equal to 100",
        ),
        ({"kubelet": {"cpuManagerPolicy": "dynamic"}}, "spec.kubelet.cpuManagerPolicy", "'none'"),
        (
            {"kubelet": {"topologyManagerPolicy": "strict"}},
            "spec.kubelet.topologyManagerPolicy",
            "'single-numa-node'",
        ),
        (
            {"kubelet": {"containerLogMaxSize": "50MB"}},
            "spec.kubelet.containerLogMaxSize",
            "is not a size such as '50Mi'",
        ),
        (
            {"kubelet": {"containerLogMaxFiles": 1}},
            "spec.kubelet.containerLogMaxFiles",
            "greater than or equal to 2",
        ),
        (
            {"kubelet": {"cpuCFSQuotaPeriod": "100"}},
            "spec.kubelet.cpuCFSQuotaPeriod",
            "is not a duration",
        ),
    ],
)
def test_invalid_fields_are_refused_by_name(spec: dict[str, Any], field: str, message: str) -> None:
    found = problems(spec)
    assert found.startswith(f"{field}: ") or f"; {field}: " in found, found
    assert message in found


def test_the_subnet_id_is_case_insensitive_as_upstream() -> None:
    spec = AKSNodeClassSpec.model_validate({"vnetSubnetID": SUBNET.lower()})
    assert spec.vnet_subnet_id == SUBNET.lower()


def test_fips_with_the_default_family_is_accepted() -> None:
    assert AKSNodeClassSpec.model_validate({"fipsMode": "FIPS"}).fips()


def test_hash_ignores_tags_order_and_written_out_defaults() -> None:
    base = AKSNodeClassSpec.model_validate({"kubelet": {"allowedUnsafeSysctls": ["a", "b"]}})
    same = AKSNodeClassSpec.model_validate(
        {
            "osDiskSizeGB": 128,
            "imageFamily": "Ubuntu",
            "tags": {"team": "b"},
            "kubelet": {"allowedUnsafeSysctls": ["b", "a"], "containerLogMaxFiles": 5},
        }
    )
    assert nodeclass_hash(base) == nodeclass_hash(same)


@pytest.mark.parametrize(
    "change",
    [
        {"osDiskSizeGB": 64},
        {"imageFamily": "AzureLinux"},
        {"maxPods": 30},
        {"security": {"encryptionAtHost": True}},
        {"vnetSubnetID": SUBNET},
        {"kubelet": {"cpuCFSQuota": False}},
        {"fipsMode": "Disabled"},
    ],
)
def test_hash_changes_with_each_hashed_field(change: dict[str, Any]) -> None:
    assert nodeclass_hash(AKSNodeClassSpec.model_validate(change)) != nodeclass_hash(
        AKSNodeClassSpec()
    )


def test_shipped_crd_is_the_generated_one() -> None:
    regenerate = "regenerate it with python -m karpenter_core.sdk.crds azure"
    assert CRD_PATH.is_file(), f"{CRD_PATH} is missing; {regenerate}"
    assert CRD_PATH.read_text() == crd_file("azure", NODE_CLASS), f"stale; {regenerate}"
    assert yaml.safe_load(CRD_PATH.read_text()) == node_class_crd(NODE_CLASS)


def test_not_ready_until_ready_for_the_current_generation() -> None:
    node_class = AKSNodeClass.from_manifest({"metadata": {"name": "a", "generation": 2}})
    problem = node_class.not_ready()
    assert problem is not None and problem.unknown
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    node_class.status = node_class.status.model_validate({"conditions": [ready]})
    assert "generation 2" in (node_class.not_ready_reason() or "")
    node_class.status = node_class.status.model_validate(
        {"conditions": [{**ready, "observedGeneration": 2}]}
    )
    assert node_class.not_ready() is None
