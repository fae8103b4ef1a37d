"""Well-known label, annotation, taint and finalizer keys, and the rules for user-set labels.

Karpenter owns the ``karpenter.sh`` label domain: users may only set its well-known keys (the
capacity type, and the NodePool label on NodeClaims it creates itself). ``kubernetes.io/hostname``
is refused too, as every node gets its own. Beta label aliases are normalised to their stable keys.
"""

from __future__ import annotations

import re
from types import MappingProxyType

__all__ = [
    "ARCH",
    "ARCH_AMD64",
    "ARCH_ARM64",
    "CAPACITY_TYPE",
    "CAPACITY_TYPES",
    "CAPACITY_TYPE_ON_DEMAND",
    "CAPACITY_TYPE_RESERVED",
    "CAPACITY_TYPE_SPOT",
    "DISRUPTED_TAINT_EFFECT",
    "DISRUPTED_TAINT_KEY",
    "DO_NOT_DISRUPT",
    "GROUP",
    "HOSTNAME",
    "INSTANCE_TYPE",
    "LABEL_VALUE_PATTERN",
    "MIRROR_POD",
    "NODECLAIM_TERMINATION_TIMESTAMP",
    "NODEPOOL",
    "NODEPOOL_HASH",
    "NODEPOOL_HASH_VERSION",
    "NODE_INITIALIZED",
    "NODE_REGISTERED",
    "NORMALIZED_LABELS",
    "OS",
    "QUALIFIED_NAME_PATTERN",
    "RESTRICTED_LABELS",
    "RESTRICTED_LABEL_DOMAINS",
    "TERMINATION_FINALIZER",
    "TOPOLOGY_REGION",
    "TOPOLOGY_ZONE",
    "UNREGISTERED_TAINT_EFFECT",
    "UNREGISTERED_TAINT_KEY",
    "WELL_KNOWN_LABELS",
    "WINDOWS_BUILD",
    "label_domain",
    "label_value_error",
    "node_class_label_key",
    "qualified_name_error",
    "restricted_label_error",
]

GROUP = "karpenter.sh"
"""The API group, and the label domain Karpenter reserves."""

# Karpenter's own labels.
NODEPOOL = "karpenter.sh/nodepool"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODE_REGISTERED = "karpenter.sh/registered"
NODE_INITIALIZED = "karpenter.sh/initialized"

CAPACITY_TYPE_SPOT = "spot"
CAPACITY_TYPE_ON_DEMAND = "on-demand"
CAPACITY_TYPE_RESERVED = "reserved"
CAPACITY_TYPES = frozenset({CAPACITY_TYPE_SPOT, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED})

# Kubernetes' stable node labels.
TOPOLOGY_ZONE = "topology.kubernetes.io/zone"
TOPOLOGY_REGION = "topology.kubernetes.io/region"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ARCH = "kubernetes.io/arch"
OS = "kubernetes.io/os"
WINDOWS_BUILD = "node.kubernetes.io/windows-build"
HOSTNAME = "kubernetes.io/hostname"

ARCH_AMD64 = "amd64"
ARCH_ARM64 = "arm64"

# Annotations.
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"
NODEPOOL_HASH = "karpenter.sh/nodepool-hash"
NODEPOOL_HASH_VERSION = "karpenter.sh/nodepool-hash-version"
NODECLAIM_TERMINATION_TIMESTAMP = "karpenter.sh/nodeclaim-termination-timestamp"
MIRROR_POD = "kubernetes.io/config.mirror"
"""On a static pod's mirror: the kubelet runs it, nothing schedules or evicts it."""

# Finalizer (on NodeClaims by the lifecycle controller, on Nodes at registration).
TERMINATION_FINALIZER = "karpenter.sh/termination"

# Taints.
DISRUPTED_TAINT_KEY = "karpenter.sh/disrupted"
DISRUPTED_TAINT_EFFECT = "NoSchedule"
UNREGISTERED_TAINT_KEY = "karpenter.sh/unregistered"
UNREGISTERED_TAINT_EFFECT = "NoExecute"

WELL_KNOWN_LABELS = frozenset(
    {
        NODEPOOL,
        TOPOLOGY_ZONE,
        TOPOLOGY_REGION,
        INSTANCE_TYPE,
        ARCH,
        OS,
        CAPACITY_TYPE,
        WINDOWS_BUILD,
    }
)
"""Labels the core understands; scheduling may leave them undefined. Providers add their own."""

RESTRICTED_LABEL_DOMAINS = frozenset({GROUP})
"""Domains (and their subdomains) whose labels users may not set, except well-known ones."""

RESTRICTED_LABELS = frozenset({HOSTNAME})
"""Individual labels users may not set."""

NORMALIZED_LABELS = MappingProxyType(
    {
        "failure-domain.beta.kubernetes.io/zone": TOPOLOGY_ZONE,
        "failure-domain.beta.kubernetes.io/region": TOPOLOGY_REGION,
        "beta.kubernetes.io/arch": ARCH,
        "beta.kubernetes.io/os": OS,
        "beta.kubernetes.io/instance-type": INSTANCE_TYPE,
    }
)
"""Deprecated beta label keys and the stable keys they stand for."""

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

QUALIFIED_NAME_PATTERN = rf"^({_DNS_SUBDOMAIN}/)?{_NAME}$"
"""A label key, taint key or resource name: an optional DNS-subdomain prefix and a name."""

LABEL_VALUE_PATTERN = rf"^({_NAME})?$"
"""A label value: empty, or at most 63 alphanumerics, ``-``, ``_`` and ``.`` (alphanumeric ends)."""

_DNS_SUBDOMAIN_RE = re.compile(_DNS_SUBDOMAIN)
_NAME_RE = re.compile(_NAME)


def label_domain(key: str) -> str:
    """The prefix before ``/``, or ``""`` when the key has none."""
    prefix, slash, _ = key.partition("/")
    return prefix if slash else ""


def qualified_name_error(name: str, what: str = "label key") -> str | None:
    """Why ``name`` is not a qualified name (a label key, taint key or resource name), or None."""
    prefix, slash, local = name.rpartition("/")
    if slash:
        if not prefix:
            return f"{what} {name!r} has an empty prefix before '/'"
        if len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            return (
                f"{what} {name!r} has an invalid prefix {prefix!r}: it must be a DNS subdomain "
                "(lowercase alphanumerics, '-' and '.', at most 253 characters)"
            )
    if not local:
        return f"{what} {name!r} has an empty name"
    if len(local) > 63:
        return f"{what} {name!r} has a name longer than 63 characters"
    if not _NAME_RE.fullmatch(local):
        return (
            f"{what} {name!r} has an invalid name {local!r}: use alphanumerics, '-', '_' and "
            "'.', starting and ending with an alphanumeric"
        )
    return None


def label_value_error(value: str, what: str = "label value") -> str | None:
    """Why ``value`` is not a valid label value (or taint value), or None if it is."""
    if len(value) > 63:
        return f"{what} {value!r} is longer than 63 characters"
    if value and not _NAME_RE.fullmatch(value):
        return (
            f"{what} {value!r} is invalid: use alphanumerics, '-', '_' and '.', "
            "starting and ending with an alphanumeric"
        )
    return None


def restricted_label_error(key: str) -> str | None:
    """Why users may not set ``key`` (on a NodePool or in requirements), or None if they may."""
    if key in WELL_KNOWN_LABELS:
        return None
    domain = label_domain(key)
    restricted = any(domain == d or domain.endswith("." + d) for d in RESTRICTED_LABEL_DOMAINS)
    if restricted or key in RESTRICTED_LABELS:
        return (
            f"label {key!r} is restricted: it could interfere with Karpenter's own labels; use a "
            f"well-known label ({', '.join(sorted(WELL_KNOWN_LABELS))}) or a label outside the "
            f"{', '.join(sorted(RESTRICTED_LABEL_DOMAINS))} domain"
        )
    return None


def node_class_label_key(group: str, kind: str) -> str:
    """The label naming a node's NodeClass: ``<group>/<lowercase kind>``."""
    return f"{group}/{kind.lower()}"
