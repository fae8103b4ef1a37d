"""The contract level: the provider alone, against the profile's fake cloud, without a cluster."""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from karpenter_conformance.suite.harness import Harness, Violation, expect
from karpenter_conformance.suite.profile import missing
from karpenter_core.apis import labels as wk
from karpenter_core.apis.crdgen import generate_crd
from karpenter_core.apis.quantity import to_milli
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cloudprovider.plugin import API_VERSION, Capability
from karpenter_core.cloudprovider.registry import NAME_PATTERN
from karpenter_core.cloudprovider.types import (
    CloudProvider,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassNotReady,
)
from karpenter_core.cloudprovider.validation import InvalidProviderOutput, validate_instance_types

WELL_KNOWN = (wk.INSTANCE_TYPE, wk.ARCH, wk.OS)
CONCURRENT_CREATES = 20
DRIFT_WITHIN = 10.0
KNOWN_CAPABILITIES = {
    Capability.SPOT,
    Capability.INTERRUPTION,
    Capability.DRIFT,
    Capability.REPAIR,
    Capability.OFFLINE_CATALOG,
}

core = pytest.mark.check(core=True)


def _launched(claim: NodeClaim) -> tuple[str, str, str]:
    labels = claim.metadata.labels
    return (
        labels.get(wk.INSTANCE_TYPE, ""),
        labels.get(wk.TOPOLOGY_ZONE, ""),
        labels.get(wk.CAPACITY_TYPE, ""),
    )


def _create(harness: Harness, claim: NodeClaim) -> NodeClaim:
    try:
        return harness.provider.create(claim)
    except Exception as error:
        raise Violation(
            f"raised {type(error).__name__}: {error} on create of NodeClaim {claim.metadata.name}",
            "an instance",
        ) from None


# -- the record ------------------------------------------------------------------------------


@core
def test_record(harness: Harness) -> None:
    """The record is valid and its factory builds a provider of the same name."""
    record = harness.record
    expect(
        NAME_PATTERN.match(record.name),
        f"is named {record.name!r}",
        "lowercase letters, digits and '-'",
    )
    expect(
        1 <= record.api_version <= API_VERSION,
        f"record has api_version {record.api_version}",
        f"1 to {API_VERSION}",
    )
    expect(record.description, "record has no description", "a one-line description")
    unknown = sorted(set(record.capabilities) - KNOWN_CAPABILITIES)
    expect(not unknown, f"declares unknown capabilities {unknown}", "only Capability values")
    provider = harness.provider
    expect(
        isinstance(provider, CloudProvider),
        f"factory returned a {type(provider).__name__} without every CloudProvider method",
        "an object implementing CloudProvider",
    )
    expect(
        provider.name == record.name,
        f"built a provider named {provider.name!r} for the record {record.name!r}",
        "the record's name",
    )
    models = list(provider.supported_node_classes())
    declared = [info.model for info in record.node_classes]
    expect(
        models == declared,
        f"supports the NodeClasses {[m.__name__ for m in models]}",
        f"those its record declares: {[m.__name__ for m in declared]}",
    )


@pytest.mark.check
def test_crds_are_structural(harness: Harness) -> None:
    """Each declared NodeClass yields a structural CRD of its group, kind and version."""
    for info in harness.record.node_classes:
        try:
            crd = generate_crd(
                info.model,
                group=info.group,
                kind=info.kind,
                plural=info.plural,
                version=info.version,
            )
        except Exception as error:
            raise Violation(
                f"declares {info.kind} whose model has no CRD ({type(error).__name__}: {error})",
                "a structural CRD",
            ) from None
        expect(
            crd["spec"]["names"]["kind"] == info.kind,
            f"declares {info.kind} but its CRD names {crd['spec']['names']['kind']}",
            "the declared kind",
        )


# -- instance types ---------------------------------------------------------------------------


def _types(harness: Harness) -> list[InstanceType]:
    types = harness.instance_types()
    expect(types, "returned no instance types for a ready NodeClass", "at least one")
    return types


@core
def test_instance_types_are_valid(harness: Harness) -> None:
    """get_instance_types returns InstanceTypes the core accepts, with unique names."""
    types = _types(harness)
    try:
        validate_instance_types(harness.record.name, "conformance", types)
    except InvalidProviderOutput as error:
        raise Violation(f"returned an invalid instance type: {error}", "valid ones") from None
    twice = sorted(n for n, count in Counter(t.name for t in types).items() if count > 1)
    expect(not twice, f"returned the instance types {twice[:5]} more than once", "unique names")


@core
def test_instance_types_are_priced(harness: Harness) -> None:
    """Some offering is available; every price is finite and not negative."""
    types = _types(harness)
    expect(
        any(o.available for t in types for o in t.offerings),
        "offers no available offering",
        "at least one available offering",
    )
    for instance_type in types:
        for offering in instance_type.offerings:
            expect(
                isinstance(offering.price, int | float)
                and math.isfinite(offering.price)
                and offering.price >= 0,
                f"priced {instance_type.name} {offering.capacity_type} in {offering.zone} at "
                f"{offering.price!r}",
                "a finite price, not negative",
            )
            expect(
                offering.zone and offering.capacity_type,
                f"returned an offering of {instance_type.name} without a zone or capacity type",
                "both",
            )


@core
def test_instance_types_have_well_known_labels(harness: Harness) -> None:
    """Each instance type defines its name, architecture and OS labels."""
    for instance_type in _types(harness):
        requirements = instance_type.requirements
        absent = [key for key in WELL_KNOWN if requirements.get(key) is None]
        expect(not absent, f"returned {instance_type.name} without the labels {absent}", "them set")
        named = requirements.get(wk.INSTANCE_TYPE)
        expect(
            named is not None and named.has(instance_type.name),
            f"labelled {instance_type.name} with {wk.INSTANCE_TYPE}={named}",
            "its own name",
        )


@core
def test_allocatable_is_capacity_less_overhead(harness: Harness) -> None:
    """Allocatable is capacity minus overhead, never negative."""
    for instance_type in _types(harness):
        reserved = instance_type.overhead.total()
        for resource, amount in instance_type.capacity.items():
            wanted = max(amount - reserved.get(resource, 0), 0)
            got = instance_type.allocatable.get(resource)
            expect(
                got == wanted,
                f"gave {instance_type.name} {resource} allocatable {got}",
                f"capacity {amount} - overhead {reserved.get(resource, 0)} = {wanted}",
            )


@pytest.mark.check
def test_spot_capability_offers_spot(harness: Harness) -> None:
    """A provider declaring the spot capability offers spot capacity."""
    if Capability.SPOT not in harness.record.capabilities:
        pytest.skip("the provider does not declare the spot capability")
    spot = [o for t in _types(harness) for o in t.offerings if o.capacity_type == "spot"]
    expect(spot, "declares spot but offers no spot offering", "spot offerings")


# -- launching --------------------------------------------------------------------------------


@core
def test_create_returns_the_chosen_offering(harness: Harness) -> None:
    """create returns a providerID and the labels of an offering the NodeClaim allows."""
    claim = harness.nodeclaim(requests={"cpu": "100m"})
    created = _create(harness, claim)
    expect(created.status.provider_id, "returned no providerID", "the instance's providerID")
    type_name, zone, capacity_type = _launched(created)
    types = {t.name: t for t in harness.instance_types()}
    chosen = types.get(type_name)
    expect(
        chosen is not None,
        f"labelled the NodeClaim with instance type {type_name!r}",
        "one of the types get_instance_types returns",
    )
    assert chosen is not None
    offering = next(
        (o for o in chosen.offerings if (o.zone, o.capacity_type) == (zone, capacity_type)), None
    )
    expect(
        offering is not None,
        f"labelled the NodeClaim {type_name} {capacity_type} in {zone!r}",
        "an offering of that type",
    )
    claimed = Requirements.from_node_selector(
        r.model_dump(by_alias=True, exclude_none=True) for r in claim.spec.requirements
    )
    labels = created.metadata.labels
    conflict = claimed.intersects(Requirements.from_labels(labels))
    expect(
        conflict is None,
        f"returned labels that break the requirements ({conflict})",
        "labels the NodeClaim's requirements allow",
    )
    cpu = created.status.allocatable.get("cpu")
    expect(
        cpu is not None and to_milli(cpu) >= 100,
        f"returned allocatable cpu {cpu}",
        "at least the NodeClaim's request (100m)",
    )


@core
def test_create_is_idempotent(harness: Harness) -> None:
    """create twice for one NodeClaim leaves one instance."""
    claim = harness.nodeclaim()
    first = _create(harness, claim)
    second = _create(harness, claim)
    expect(
        first.status.provider_id == second.status.provider_id,
        f"returned {first.status.provider_id} then {second.status.provider_id} for one NodeClaim",
        "the same instance",
    )
    instances = harness.instances()
    expect(
        len(instances) == 1,
        f"lists {len(instances)} instances after two creates of one NodeClaim",
        "one",
    )


@core
def test_get_and_list(harness: Harness) -> None:
    """get and list return a launched instance."""
    created = _create(harness, harness.nodeclaim())
    provider_id = created.status.provider_id or ""
    try:
        got = harness.provider.get(provider_id)
    except NodeClaimNotFound:
        raise Violation(f"raised NodeClaimNotFound on get({provider_id})", "the instance") from None
    expect(
        got.status.provider_id == provider_id,
        f"returned {got.status.provider_id} from get({provider_id})",
        "the same providerID",
    )
    instances = harness.instances()
    expect(provider_id in instances, f"lists {instances}", f"{provider_id} among them")


@core
def test_delete_removes_the_instance(harness: Harness) -> None:
    """delete terminates the instance: afterwards get raises NodeClaimNotFound, list omits it."""
    created = _create(harness, harness.nodeclaim())
    provider_id = created.status.provider_id or ""
    with contextlib.suppress(NodeClaimNotFound):
        harness.provider.delete(created)
    try:
        harness.provider.get(provider_id)
    except NodeClaimNotFound:
        pass
    else:
        raise Violation(f"still returns {provider_id} from get() after delete", "NodeClaimNotFound")
    expect(
        provider_id not in harness.instances(),
        f"still lists {provider_id} after delete",
        "it gone from list()",
    )


@core
def test_not_found_for_a_gone_instance(harness: Harness) -> None:
    """delete of an instance that is gone raises NodeClaimNotFound."""
    created = _create(harness, harness.nodeclaim())
    with contextlib.suppress(NodeClaimNotFound):
        harness.provider.delete(created)
    try:
        harness.provider.delete(created)
    except NodeClaimNotFound:
        return
    except Exception as error:
        raise Violation(
            f"raised {type(error).__name__}: {error} deleting an instance that is gone",
            "NodeClaimNotFound",
        ) from None
    raise Violation("returned from delete of an instance that is gone", "NodeClaimNotFound")


@pytest.mark.check(core=True, needs=("insufficient_capacity",))
def test_insufficient_capacity(harness: Harness) -> None:
    """A launch the cloud has no capacity for raises InsufficientCapacity; the offering is then
    unavailable and the next create launches another."""
    probe = _create(harness, harness.nodeclaim())
    refused = _launched(probe)
    with contextlib.suppress(NodeClaimNotFound):
        harness.provider.delete(probe)
    harness.profile.insufficient_capacity(*refused)
    only = harness.nodeclaim(
        [
            {"key": key, "operator": "In", "values": [value]}
            for key, value in zip(
                (wk.INSTANCE_TYPE, wk.TOPOLOGY_ZONE, wk.CAPACITY_TYPE), refused, strict=True
            )
        ]
    )
    try:
        created = harness.provider.create(only)
    except InsufficientCapacity:
        pass
    except Exception as error:
        raise Violation(
            f"raised {type(error).__name__}: {error} for a NodeClaim allowing only {refused}, "
            "which has no capacity",
            "InsufficientCapacity",
        ) from None
    else:
        raise Violation(
            f"launched {_launched(created)} for a NodeClaim allowing only {refused}, which has "
            "no capacity",
            "InsufficientCapacity",
        )
    offered = [
        o
        for t in harness.instance_types()
        if t.name == refused[0]
        for o in t.offerings
        if (o.zone, o.capacity_type) == refused[1:]
    ]
    expect(
        offered and not any(o.available for o in offered),
        f"still offers {refused} as available after it had no capacity",
        "it unavailable",
    )
    retried = _create(harness, harness.nodeclaim())
    expect(
        _launched(retried) != refused,
        f"launched {refused} again after it raised InsufficientCapacity for it",
        "another offering",
    )


@pytest.mark.check(needs=("node_class",))
def test_node_class_not_ready(harness: Harness) -> None:
    """A NodeClass that is not ready gives NodeClassNotReady on create."""
    harness.put_node_class(harness.profile.node_class(ready=False))
    readiness = harness.provider.node_class_readiness(harness.nodepool())
    expect(not readiness.ready, "reports a not-ready NodeClass as ready", "not ready")
    claim = harness.nodeclaim()
    try:
        created = harness.provider.create(claim)
    except NodeClassNotReady:
        return
    except Exception as error:
        raise Violation(
            f"raised {type(error).__name__}: {error} for a NodeClass that is not ready",
            "NodeClassNotReady",
        ) from None
    raise Violation(
        f"launched {created.status.provider_id} from a NodeClass that is not ready",
        "NodeClassNotReady",
    )


@pytest.mark.check(needs=("drifted",))
def test_drift(harness: Harness) -> None:
    """is_drifted reports a NodeClass change (within 10 seconds: providers may cache their
    NodeClasses briefly), and nothing before it."""
    created = _create(harness, harness.nodeclaim())
    before = harness.provider.is_drifted(created)
    expect(before == "", f"reports drift {before!r} before any change", "no drift")
    harness.put_node_class(harness.profile.drifted(harness.profile.node_class(ready=True)))
    deadline = time.monotonic() + DRIFT_WITHIN
    while not (after := harness.provider.is_drifted(created)) and time.monotonic() < deadline:
        time.sleep(0.5)
    expect(
        after,
        f"reports no drift {DRIFT_WITHIN:.0f}s after the NodeClass changed",
        "a drift reason",
    )


@pytest.mark.check
def test_drift_capability_is_shown(harness: Harness) -> None:
    """A provider declaring the drift capability has a profile that can make a NodeClass drift."""
    if Capability.DRIFT not in harness.record.capabilities:
        pytest.skip("the provider does not declare the drift capability")
    reason = missing(harness.profile, "drifted")
    expect(
        reason is None,
        f"declares drift but its profile cannot show it ({reason})",
        "a profile with drifted()",
    )


@pytest.mark.check
def test_concurrent_creates(harness: Harness) -> None:
    """20 concurrent creates all succeed, each with its own instance."""
    claims = [harness.nodeclaim() for _ in range(CONCURRENT_CREATES)]
    provider = harness.provider
    results: list[Any] = [None] * len(claims)
    barrier = threading.Barrier(len(claims))

    def launch(index: int) -> None:
        barrier.wait()
        try:
            results[index] = provider.create(claims[index])
        except Exception as error:
            results[index] = error

    _in_threads(len(claims), launch)
    failed = [r for r in results if not isinstance(r, NodeClaim)]
    expect(
        not failed,
        f"failed {len(failed)} of {len(claims)} concurrent creates: {failed[:1]}",
        "every one to launch",
    )
    ids = {r.status.provider_id for r in results}
    expect(len(ids) == len(claims), f"returned {len(ids)} distinct providerIDs", f"{len(claims)}")
    listed = set(harness.instances())
    expect(ids <= listed, f"lists {len(ids & listed)} of them", f"all {len(ids)}")


def _in_threads(count: int, work: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
