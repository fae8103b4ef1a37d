"""How a node joins the cluster: the bootstrap metadata of a GKE node pool's instance template.

GKE's node image reads ``kube-env`` (the kubelet's flags under ``KUBELET_ARGS``, the cluster's
certificates) and ``kube-labels`` from the instance metadata. A launch copies them, with the
network interfaces, network tags, labels and service account, from the instance template of one
of the cluster's node pools (the node pool's instance group is ``<template>-grp``), then writes
its own node labels, taints, max pods and zone, and the GCENodeClass's metadata over them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions

from karpenter_core.sdk.types import CloudProviderError
from karpenter_gcp.errors import RETRY

__all__ = ["NodeTemplate", "node_metadata", "read_template", "template_name"]

KUBE_ENV = "kube-env"
KUBE_LABELS = "kube-labels"
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


def template_name(node_pool: Mapping[str, Any]) -> str:
    """The instance template of a GKE node pool (its JSON): its first instance group's name
    without ``-grp``; ValueError when it has none."""
    urls = node_pool.get("instanceGroupUrls") or ()
    if not urls:
        raise ValueError(f"GKE node pool {node_pool.get('name')!r} has no instanceGroupUrls")
    return re.sub(r"-grp$", "", str(urls[0]).rsplit("/", 1)[-1])


def read_template(
    clients: Any, project: str, location: str, cluster: str, pool: str
) -> NodeTemplate:
    """The instance template of GKE node pool ``pool`` (``clients``: ``node_pool`` and
    ``instance_templates``); ``CloudProviderError`` when it cannot be read."""
    try:
        node_pool = clients.node_pool(location, cluster, pool)
        template = clients.instance_templates.get(
            project=project, instance_template=template_name(node_pool), retry=RETRY
        )
    except (exceptions.GoogleAPICallError, ValueError, OSError) as error:
        raise CloudProviderError(
            f"reading GKE node pool {pool!r}'s instance template: {error}"
        ) from None
    return NodeTemplate.from_template(json.loads(type(template).to_json(template)))


def node_metadata(
    template: NodeTemplate,
    *,
    labels: Mapping[str, str],
    taints: Sequence[str],
    max_pods: int,
    zone: str,
    custom: Mapping[str, str],
) -> dict[str, str]:
    """The instance metadata: the template's, ``custom`` (the GCENodeClass's) over it except
    ``kube-env`` and ``kube-labels``, in which the node's ``labels`` join the template's (the
    node pool's own left out), ``taints`` and ``max_pods`` replace its, and ``ZONE`` is set."""
    items = {**template.metadata, **{k: v for k, v in custom.items() if k not in _OWNED}}
    inherited = _parse_labels(template.metadata.get(KUBE_LABELS, ""))
    merged = {k: v for k, v in inherited.items() if k not in POOL_LABELS} | dict(labels)
    label_text = ",".join(f"{k}={v}" for k, v in sorted(merged.items()))
    items[KUBE_LABELS] = label_text
    flags = [f"--node-labels={label_text}", f"--max-pods={max_pods}"]
    if taints:
        flags.append("--register-with-taints=" + ",".join(taints))
    env = template.metadata.get(KUBE_ENV, "")
    env = _set_entry(env, "ZONE", zone)
    args = next((v for k, v in _entries(env) if k == "KUBELET_ARGS"), "")
    kept = [f for f in args.split() if not f.startswith(_OWNED_FLAGS)]
    items[KUBE_ENV] = _set_entry(env, "KUBELET_ARGS", " ".join([*kept, *flags]))
    return items


_OWNED = frozenset({KUBE_ENV, KUBE_LABELS})


def _parse_labels(text: str) -> dict[str, str]:
    pairs = (part.strip().partition("=") for part in text.split(","))
    return {key: value for key, sep, value in pairs if key and sep}


def _entries(env: str) -> list[tuple[str, str]]:
    pairs = (line.partition(": ") for line in env.splitlines())
    return [(key, value) for key, sep, value in pairs if sep]


def _set_entry(env: str, key: str, value: str) -> str:
    """``env`` (``KEY: value`` lines) with ``key`` set to ``value`` (added when missing)."""
    lines = env.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith(f"{key}: ")), len(lines))
    lines[at : at + 1] = [f"{key}: {value}"]
    return "\n".join(lines) + "\n"
