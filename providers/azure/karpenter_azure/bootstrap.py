"""The customData a VM boots with: cloud-init that joins the node to the cluster.

It writes a bootstrap kubeconfig (the cluster endpoint, its CA and a bootstrap token from the
settings, for the kubelet's TLS bootstrap), the kubelet's flags (labels, taints, max pods, the
external cloud provider, the kubelet configuration of the AKSNodeClass) to
``/etc/default/kubelet``, and starts the kubelet the AKS node image ships. Upstream builds
AKS's own node bootstrapping contract instead (scriptless customData or a custom script
extension); see docs/azure.md.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import yaml

from karpenter_azure.nodeclass import KubeletConfiguration
from karpenter_core.apis.v1.common import Taint
from karpenter_core.sdk.kubelet import kubelet_flags, taint_text
from karpenter_core.sdk.launch import kubelet_labels

__all__ = ["BootstrapOptions", "custom_data"]


@dataclass(frozen=True, slots=True)
class BootstrapOptions:
    """What a node needs to join."""

    cluster_endpoint: str
    ca_bundle: str
    """Base64 PEM of the API server's CA ("" : the system's trust store)."""
    bootstrap_token: str
    labels: Mapping[str, str]
    taints: Sequence[Taint]
    max_pods: int
    kubelet: KubeletConfiguration | None = None


def _kubelet_flags(options: BootstrapOptions) -> list[str]:
    flags = [
        "--cloud-provider=external",
        "--bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig",
        "--kubeconfig=/var/lib/kubelet/kubeconfig",
        f"--max-pods={options.max_pods}",
    ]
    labels = kubelet_labels(options.labels)
    if labels:
        flags.append("--node-labels=" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())))
    if options.taints:
        flags.append("--register-with-taints=" + ",".join(map(taint_text, options.taints)))
    kubelet = options.kubelet
    if kubelet is not None:
        flags += kubelet_flags(
            ("--cpu-manager-policy", kubelet.cpu_manager_policy),
            ("--cpu-cfs-quota", kubelet.cpu_cfs_quota),
            ("--cpu-cfs-quota-period", kubelet.cpu_cfs_quota_period),
            ("--topology-manager-policy", kubelet.topology_manager_policy),
            ("--container-log-max-size", kubelet.container_log_max_size),
            ("--container-log-max-files", kubelet.container_log_max_files),
            ("--image-gc-high-threshold", kubelet.image_gc_high_threshold_percent),
            ("--image-gc-low-threshold", kubelet.image_gc_low_threshold_percent),
        )
        if kubelet.allowed_unsafe_sysctls:
            flags.append("--allowed-unsafe-sysctls=" + ",".join(kubelet.allowed_unsafe_sysctls))
        flags += kubelet_flags(("--pod-max-pids", kubelet.pod_pids_limit))
    return flags


def custom_data(options: BootstrapOptions) -> str:
    """The base64 cloud-config for ``options``."""
    cluster: dict[str, str] = {"server": options.cluster_endpoint}
    if options.ca_bundle:
        cluster["certificate-authority-data"] = options.ca_bundle
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": "kubelet-bootstrap", "user": {"token": options.bootstrap_token}}],
        "contexts": [
            {"name": "bootstrap", "context": {"cluster": "cluster", "user": "kubelet-bootstrap"}}
        ],
        "current-context": "bootstrap",
    }
    config = {
        "write_files": [
            {
                "path": "/var/lib/kubelet/bootstrap-kubeconfig",
                "permissions": "0600",
                "content": yaml.safe_dump(kubeconfig, sort_keys=False),
            },
            {
                "path": "/etc/default/kubelet",
                "permissions": "0644",
                "content": "KUBELET_FLAGS=" + " ".join(_kubelet_flags(options)) + "\n",
            },
        ],
        "runcmd": [["systemctl", "enable", "--now", "kubelet"]],
    }
    text = "#cloud-config\n" + yaml.safe_dump(config, sort_keys=False)
    return base64.b64encode(text.encode()).decode()
