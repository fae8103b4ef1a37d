"""The ``CloudProvider`` protocol, instance types and offerings, errors, and requirements."""

from karpenter_core.apis.requirements import Operator, Requirement, Requirements
from karpenter_core.cloudprovider.types import (
    CloudProvider,
    CloudProviderError,
    CreateError,
    InstanceType,
    InsufficientCapacity,
    NodeClaimNotFound,
    NodeClassNotReady,
    NodeClassReadiness,
    Offering,
    Overhead,
    RepairPolicy,
    Resources,
    launch_request,
)

__all__ = [
    "CloudProvider",
    "CloudProviderError",
    "CreateError",
    "InstanceType",
    "InsufficientCapacity",
    "NodeClaimNotFound",
    "NodeClassNotReady",
    "NodeClassReadiness",
    "Offering",
    "Operator",
    "Overhead",
    "RepairPolicy",
    "Requirement",
    "Requirements",
    "Resources",
    "launch_request",
]
