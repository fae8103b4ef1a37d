"""Reading Kubernetes manifests into the scheduler's ``Snapshot`` (``karpenter simulate``'s input).

This package does the I/O (files, stdin, YAML) that the scheduling package must not.
"""

from karpenter_core.manifests.errors import ManifestError
from karpenter_core.manifests.loader import (
    Document,
    load_default_scenario,
    load_documents,
    parse_documents,
)
from karpenter_core.manifests.snapshot_builder import SimulationInput, build_snapshot

__all__ = [
    "Document",
    "ManifestError",
    "SimulationInput",
    "build_snapshot",
    "load_default_scenario",
    "load_documents",
    "parse_documents",
]
