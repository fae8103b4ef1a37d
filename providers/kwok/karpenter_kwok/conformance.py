"""The KWOK provider's conformance profile: its fake cloud is the Kubernetes API itself.

Instances are Node objects in the API the provider is given, so ``start`` only creates the
insufficient-capacity file the profile writes faults into (a file, so a provider in another
process sees them too). ``launch_unmanaged`` creates a Node in the cluster ``$KUBECONFIG`` names
(the suite's cluster level points it at its cluster).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.common import CONDITION_READY
from karpenter_core.sdk.profiles import condition
from karpenter_kwok.faults import FAULTS_OPTION
from karpenter_kwok.labels import GROUP, KWOK_NODE, KWOK_NODE_VALUE, PROVIDER_ID_PREFIX
from karpenter_kwok.nodeclass import KIND, VERSION

__all__ = ["KWOKProfile"]

NODE_CLASS = "default"


class KWOKProfile:
    """Faults go into an insufficient-capacity file; NodeClasses are plain manifests."""

    nodes_via: Literal["registrar", "native"] = "native"
    unsupported: Mapping[str, str] = {
        "drifted": "KWOK nodes have nothing that can drift",
    }

    def __init__(self) -> None:
        self._directory: Path | None = None

    @property
    def faults_file(self) -> Path:
        """The insufficient-capacity file (after ``start``)."""
        if self._directory is None:
            raise RuntimeError("the KWOK profile is not started")
        return self._directory / "insufficient-capacity"

    def start(self) -> None:
        """Create the insufficient-capacity file, empty."""
        self._directory = Path(tempfile.mkdtemp(prefix="karpenter-kwok-profile-"))
        self.reset()

    def reset(self) -> None:
        """No faults."""
        self.faults_file.write_text("", encoding="utf-8")

    def stop(self) -> None:
        """Remove the file."""
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def settings(self) -> Mapping[str, str]:
        """Point the provider at the insufficient-capacity file."""
        return {FAULTS_OPTION: str(self.faults_file)}

    def node_class(self, ready: bool = True) -> dict[str, Any]:
        """The default KWOKNodeClass, with a Ready condition."""
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {"name": NODE_CLASS},
            "spec": {},
            "status": {
                "conditions": [
                    condition(
                        CONDITION_READY,
                        ready,
                        "Ready" if ready else "Disabled",
                        "" if ready else "disabled for the conformance suite",
                    )
                ]
            },
        }

    def insufficient_capacity(self, instance_type: str, zone: str, capacity_type: str) -> None:
        """Add the offering to the insufficient-capacity file."""
        with self.faults_file.open("a", encoding="utf-8") as file:
            file.write(f"{instance_type} {zone} {capacity_type}\n")

    def launch_unmanaged(self, tags: Mapping[str, str]) -> str:
        """A KWOK Node no NodeClaim launched, labelled with ``tags``, in the cluster
        ``$KUBECONFIG`` names; its providerID."""
        from kubernetes import client, config

        name = f"kwok-unmanaged-{uuid.uuid4().hex[:8]}"
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {**tags, wk.HOSTNAME: name, KWOK_NODE: KWOK_NODE_VALUE},
                "annotations": {KWOK_NODE: KWOK_NODE_VALUE},
            },
            "spec": {"providerID": PROVIDER_ID_PREFIX + name},
        }
        with config.new_client_from_config(config_file=os.environ.get("KUBECONFIG")) as api:
            client.CoreV1Api(api).create_node(node)
        return PROVIDER_ID_PREFIX + name
