"""How a node joins the cluster: the bootstrap metadata of a GKE node pool's instance template.

GKE's node image reads ``kube-env`` (the kubelet's flags under ``KUBELET_ARGS``, the cluster's
certificates) and ``kube-labels`` from the instance metadata. A launch copies them, with the
network interfaces, network tags, labels and service account, from the instance template of one
of the cluster's node pools (whose instance group is ``<template>-grp``), then writes the node's
labels, taints, max pods, kubelet settings and zone, and adds the GCENodeClass's metadata
(which may not name the keys the bootstrap owns).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from google.api_core import exceptions

from karpenter_core.apis import labels as wk
from karpenter_core.sdk.launch import kubelet_labels
from karpenter_core.sdk.types import CloudProviderError, Offering
from karpenter_gcp.errors import RETRY

__all__ = ["NodeTemplate", "node_labels", "node_metadata", "read_template"]

POOL_LABELS = ("cloud.google.com/gke-nodepool", "goog-k8s-node-pool-name")
"""The node pool's own identity: not copied onto a Karpenter node."""
_OWNED_FLAGS = ("--node-labels=", "--register-with-taints=", "--max-pods=")


@dataclass(frozen=True, slots=True)
class NodeTemplate:
    """What a launch copies from a GKE node pool's instance template."""

    metadata: Mapping[str, str]
    labels: Mapping[str, str]
    tags: tuple[str, ...]
    network_interfaces: tuple[Mapping[str, Any], ...]
    service_accounts: tuple[Mapping[str, Any], ...]

    @classmethod
    def from_template(cls, template: Mapping[str, Any]) -> NodeTemplate:
        """From an instance template's JSON (``properties``)."""
        props: Mapping[str, Any] = template.get("properties") or {}
        items = (props.get("metadata") or {}).get("items") or ()
        return cls(
            metadata={str(i["key"]): str(i.get("value", "")) for i in items},
            labels={k: v for k, v in (props.get("labels") or {}).items() if k not in POOL_LABELS},
            tags=tuple((props.get("tags") or {}).get("items") or ()),
            network_interfaces=tuple(props.get("networkInterfaces") or ()),
            service_accounts=tuple(props.get("serviceAccounts") or ()),
        )


def read_template(
    clients: Any, project: str, location: str, cluster: str, pool: str
) -> NodeTemplate:
    """The instance template of GKE node pool ``pool``: its first instance group's name without
    ``-grp`` (``clients``: ``node_pool``, ``instance_templates``); ``CloudProviderError`` when
    it cannot be read."""
    try:
        urls = clients.node_pool(location, cluster, pool).get("instanceGroupUrls") or ()
        if not urls:
            raise ValueError("it has no instanceGroupUrls")
        name = re.sub(r"-grp$", "", str(urls[0]).rsplit("/", 1)[-1])
        template = clients.instance_templates.get(
            project=project, instance_template=name, retry=RETRY
        )
    except (exceptions.GoogleAPICallError, ValueError, OSError) as error:
        raise CloudProviderError(f"reading GKE node pool {pool!r}'s template: {error}") from None
    return NodeTemplate.from_template(json.loads(type(template).to_json(template)))


def node_labels(
    labels: Mapping[str, str], instance_type: str, offering: Offering
) -> dict[str, str]:
    """The labels a node registers with: the NodeClaim's ``labels``, its offering's, and GKE's
    provisioning labels (as GKE's spot nodes have them), those node admission allows."""
    spot = offering.capacity_type == wk.CAPACITY_TYPE_SPOT
    gke = {"cloud.google.com/gke-provisioning": "spot" if spot else "standard"}
    offered = {wk.INSTANCE_TYPE: instance_type, wk.TOPOLOGY_ZONE: offering.zone}
    offered[wk.CAPACITY_TYPE] = offering.capacity_type
    spot_label = {"cloud.google.com/gke-spot": "true"} if spot else {}
    return kubelet_labels({**labels, **offered, **gke, **spot_label})


def node_metadata(
    template: NodeTemplate,
    labels: Mapping[str, str],
    taints: Sequence[str],
    max_pods: int,
    zone: str,
    custom: Mapping[str, str],
    kubelet: Mapping[str, Any],
) -> dict[str, str]:
    """The instance metadata: the template's with ``custom`` added; ``labels`` join the
    template's node labels (the node pool's own left out), ``taints`` and ``max_pods`` replace
    its, ``kubelet`` (KubeletConfiguration fields) goes over its ``kubelet-config``, and
    ``kube-env`` gets the ``ZONE``."""
    inherited = _pairs(template.metadata.get("kube-labels", "").split(","), "=")
    merged = {k: v for k, v in inherited.items() if k not in POOL_LABELS} | dict(labels)
    label_text = ",".join(f"{k}={v}" for k, v in sorted(merged.items()))
    flags = [f"--node-labels={label_text}", f"--max-pods={max_pods}"]
    flags += ["--register-with-taints=" + ",".join(taints)] if taints else []
    env = _set(template.metadata.get("kube-env", ""), "ZONE", zone)
    args = _pairs(env.splitlines(), ": ").get("KUBELET_ARGS", "").split()
    kept = [flag for flag in args if not flag.startswith(_OWNED_FLAGS)]
    env = _set(env, "KUBELET_ARGS", " ".join([*kept, *flags]))
    config = yaml.safe_load(template.metadata.get("kubelet-config", "")) or {}
    config = {**config, **kubelet, "maxPods": max_pods}
    return {
        **template.metadata,
        **custom,
        "kube-labels": label_text,
        "kube-env": env,
        "kubelet-config": yaml.safe_dump(config, sort_keys=False),
    }


def _pairs(parts: Sequence[str], separator: str) -> dict[str, str]:
    split = (part.strip().partition(separator) for part in parts)
    return {key: value for key, sep, value in split if key and sep}


def _set(env: str, key: str, value: str) -> str:
    """``env`` (``KEY: value`` lines) with ``key`` set to ``value`` (added when missing)."""
    lines = env.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(f"{key}: ")), len(lines))
    lines[at : at + 1] = [f"{key}: {value}"]
    return "\n".join(lines) + "\n"
