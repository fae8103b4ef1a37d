"""Label keys the KWOK provider puts on its instance types and nodes."""

from __future__ import annotations

__all__ = [
    "GROUP",
    "INSTANCE_CPU",
    "INSTANCE_FAMILY",
    "INSTANCE_MEMORY",
    "INSTANCE_SIZE",
    "KWOK_NODE",
    "KWOK_NODE_VALUE",
    "PROVIDER_ID_PREFIX",
    "WELL_KNOWN_LABELS",
]

GROUP = "karpenter.kwok.sh"
"""API group of KWOKNodeClass, and the domain of the instance labels."""

INSTANCE_SIZE = f"{GROUP}/instance-size"
INSTANCE_FAMILY = f"{GROUP}/instance-family"
INSTANCE_CPU = f"{GROUP}/instance-cpu"
INSTANCE_MEMORY = f"{GROUP}/instance-memory"

WELL_KNOWN_LABELS = frozenset({INSTANCE_SIZE, INSTANCE_FAMILY, INSTANCE_CPU, INSTANCE_MEMORY})
"""Instance labels pods may select on; every KWOK instance type defines them."""

KWOK_NODE = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
"""Annotation (and label) that hands a Node to the KWOK controller."""

PROVIDER_ID_PREFIX = "kwok://"
