"""Upstream Karpenter's fake cloud provider catalog, for its scheduling cases carried over here.

Derived from kubernetes-sigs/karpenter ``pkg/cloudprovider/fake`` (``instancetype.go`` and the
default list in ``cloudprovider.go``) at commit 2266468104f3 (2026-08-20): each type defaults to
4 CPU, 4Gi and 5 pods, keeps 100m CPU and 10Mi kube-reserved, and is offered spot in test-zone-1
and test-zone-2 and on-demand in all three zones, every offering at
``0.1 x CPU + 0.1 x memory in GB (1e9 bytes) + 1.0 per GPU``. A type with more than 4 CPU and
8Gi is labelled ``size=large`` (and ``special=optional``), any other ``size=small``; ``integer``
is its CPU count.
"""

from __future__ import annotations

from collections.abc import Mapping

from karpenter_core.apis.requirements import Requirement, Requirements
from karpenter_core.cloudprovider.types import InstanceType, Offering, Overhead

GIB = 2**30
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
SIZE = "size"
VENDOR_A = "fake.com/vendor-a"
VENDOR_B = "fake.com/vendor-b"
OFFERINGS = (
    ("spot", "test-zone-1"),
    ("spot", "test-zone-2"),
    ("on-demand", "test-zone-1"),
    ("on-demand", "test-zone-2"),
    ("on-demand", "test-zone-3"),
)


def fake_instance_type(
    name: str,
    *,
    cpu: float = 4,
    memory_gib: float = 4,
    pods: int = 5,
    extra: Mapping[str, int] | None = None,
    arch: str = "amd64",
    operating_systems: tuple[str, ...] = ("linux", "windows", "darwin"),
) -> InstanceType:
    """One type as upstream's ``fake.NewInstanceType`` builds it."""
    extra = dict(extra or {})
    price = 0.1 * cpu + 0.1 * memory_gib * GIB / 1e9 + 1.0 * sum(extra.values())
    offerings = [
        Offering(Requirements.from_labels({CAPACITY_TYPE: ct, ZONE: zone}), price)
        for ct, zone in OFFERINGS
    ]
    large = cpu > 4 and memory_gib > 8
    requirements = Requirements.from_labels(
        {
            "node.kubernetes.io/instance-type": name,
            "kubernetes.io/arch": arch,
            SIZE: "large" if large else "small",
            "integer": str(int(cpu)),
        }
    )
    requirements.add(
        Requirement.new("kubernetes.io/os", "In", operating_systems),
        Requirement.new(ZONE, "In", sorted({zone for _, zone in OFFERINGS})),
        Requirement.new(CAPACITY_TYPE, "In", ("spot", "on-demand")),
        Requirement.new("special", "In", ("optional",))
        if large
        else Requirement.new("special", "DoesNotExist", ()),
    )
    capacity = {
        "cpu": int(cpu * 1000),
        "memory": int(memory_gib * GIB * 1000),
        "pods": pods * 1000,
        **{resource: count * 1000 for resource, count in extra.items()},
    }
    overhead = Overhead(kube_reserved={"cpu": 100, "memory": 10 * 2**20 * 1000})
    return InstanceType(name, requirements, offerings, capacity, overhead)


def default_catalog() -> list[InstanceType]:
    """The fake provider's instance types when a test sets none."""
    return [
        fake_instance_type("default-instance-type"),
        fake_instance_type("small-instance-type", cpu=2, memory_gib=2),
        fake_instance_type("gpu-vendor-instance-type", extra={VENDOR_A: 2}),
        fake_instance_type("gpu-vendor-b-instance-type", extra={VENDOR_B: 2}),
        fake_instance_type(
            "arm-instance-type",
            cpu=16,
            memory_gib=128,
            arch="arm64",
            operating_systems=("ios", "linux", "windows", "darwin"),
        ),
        fake_instance_type("single-pod-instance-type", pods=1),
    ]
