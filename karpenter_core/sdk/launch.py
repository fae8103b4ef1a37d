"""What a provider decides when it launches one machine for a NodeClaim: the offering (the
cheapest the NodeClaim allows), and the labels and taints its kubelet registers the node with."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from karpenter_core.apis import labels as wk
from karpenter_core.apis.requirements import Requirements
from karpenter_core.apis.v1.common import Taint
from karpenter_core.cloudprovider.types import InstanceType, Offering

__all__ = ["cheapest_offering", "kubelet_labels", "registration_taint", "with_registration_taint"]

_CAPACITY_RANK = {wk.CAPACITY_TYPE_SPOT: 0, wk.CAPACITY_TYPE_ON_DEMAND: 1}

_RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io")
"""Label domains node admission refuses from a kubelet (except the few it allows)."""
_ALLOWED_RESTRICTED = frozenset(
    {wk.INSTANCE_TYPE, wk.TOPOLOGY_ZONE, wk.TOPOLOGY_REGION, wk.ARCH, wk.OS}
)
"""Well-known labels in those domains a kubelet may set on its own node."""


def cheapest_offering(
    instance_types: Iterable[InstanceType],
    requirements: Requirements,
    requests: Mapping[str, int],
    *,
    deferred: Callable[[Offering], bool] = lambda offering: False,
) -> tuple[InstanceType, Offering] | None:
    """Upstream's choice for one machine: among the available offerings ``requirements``
    allow, of types whose labels meet them and whose allocatable covers ``requests``
    (thousandths), the cheapest; at the same price spot before on-demand, offerings not
    ``deferred`` (e.g. a regional placement) first, then by type and zone name. None when no
    offering fits."""
    best: tuple[tuple[float, int, bool, str, str], InstanceType, Offering] | None = None
    for instance_type in instance_types:
        if instance_type.requirements.intersects(requirements) is not None:
            continue
        if any(instance_type.allocatable.get(k, 0) < v for k, v in requests.items()):
            continue
        for offering in instance_type.offerings:
            if not offering.available or requirements.intersects(offering.requirements):
                continue
            key = (
                offering.price,
                _CAPACITY_RANK.get(offering.capacity_type, 2),
                deferred(offering),
                instance_type.name,
                offering.zone,
            )
            if best is None or key < best[0]:
                best = (key, instance_type, offering)
    return None if best is None else (best[1], best[2])


def kubelet_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels a kubelet may register its node with: those of restricted domains
    (``kubernetes.io``, ``k8s.io``) only when node admission allows them."""
    out = {}
    for key, value in labels.items():
        domain = wk.label_domain(key)
        restricted = any(domain == d or domain.endswith("." + d) for d in _RESTRICTED_DOMAINS)
        if restricted and key not in _ALLOWED_RESTRICTED:
            continue
        out[key] = value
    return out


def registration_taint() -> Taint:
    """``karpenter.sh/unregistered:NoExecute``: a node registers with it and Karpenter takes it
    off once it has registered the node."""
    return Taint(key=wk.UNREGISTERED_TAINT_KEY, effect=wk.UNREGISTERED_TAINT_EFFECT)


def with_registration_taint(taints: Iterable[Taint]) -> list[Taint]:
    """``taints`` (a NodeClaim's taints and startup taints) and the registration taint, once."""
    out = list(taints)
    if not any(
        (t.key, t.effect) == (wk.UNREGISTERED_TAINT_KEY, wk.UNREGISTERED_TAINT_EFFECT) for t in out
    ):
        out.append(registration_taint())
    return out
