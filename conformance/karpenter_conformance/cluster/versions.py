"""Pinned versions of the local control plane: the one place to change them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KubernetesRelease:
    """A k8s.io/kubernetes release and the matching staging-module version."""

    version: str
    staging: str

    @property
    def minor(self) -> str:
        """Minor version number, e.g. ``"36"`` for v1.36.3."""
        return self.version.split(".")[1]


KUBERNETES = KubernetesRelease(version="v1.36.3", staging="v0.36.3")
# Tried in order when the module proxy refuses a module of the pinned release.
KUBERNETES_FALLBACKS: tuple[KubernetesRelease, ...] = (
    KubernetesRelease(version="v1.37.2", staging="v0.37.2"),
    KubernetesRelease(version="v1.35.4", staging="v0.35.4"),
)
ETCD = "v3.6.16"
KWOK = "v0.8.0"
# helm, built from its Go module to render, lint and install the charts in charts/.
HELM = "v3.22.0"

# KWOK's cluster image for the docker backend (KWOK release + the Kubernetes it bundles).
KWOK_CLUSTER_IMAGE = f"registry.k8s.io/kwok/cluster:{KWOK}-k8s.v1.36.1"

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KWOK_MODULE = "sigs.k8s.io/kwok"
HELM_MODULE = "helm.sh/helm/v3"

# Stage files shipped in the kwok module, relative to its kustomize/stage/ directory.
KWOK_STAGES: tuple[str, ...] = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat/node-heartbeat.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def versions_key() -> str:
    """Cache-directory name identifying the pinned version set."""
    return f"k8s-{KUBERNETES.version}_etcd-{ETCD}_kwok-{KWOK}"
