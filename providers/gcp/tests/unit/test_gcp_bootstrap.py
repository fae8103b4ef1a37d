"""The bootstrap metadata of a launch: a GKE node pool's instance template, with the node's
labels, taints, max pods and zone, and the GCENodeClass's metadata."""

from __future__ import annotations

import pytest
from karpenter_gcp.bootstrap import NodeTemplate, node_metadata, template_name

KUBE_ENV = (
    "CLUSTER_NAME: demo\n"
    "ZONE: us-central1-a\n"
    "KUBELET_ARGS: --v=2 --cloud-provider=external --max-pods=110 "
    "--node-labels=cloud.google.com/gke-nodepool=default-pool,cloud.google.com/gke-os-distribution=cos "
    "--register-with-taints=pool=true:NoSchedule\n"
    "CA_CERT: abc\n"
)
TEMPLATE = {
    "name": "gke-demo-default-pool-1a2b3c4d",
    "properties": {
        "metadata": {
            "items": [
                {"key": "kube-env", "value": KUBE_ENV},
                {
                    "key": "kube-labels",
                    "value": "cloud.google.com/gke-nodepool=default-pool,cloud.google.com/gke-os-distribution=cos",
                },
                {"key": "cluster-name", "value": "demo"},
            ]
        },
        "labels": {
            "goog-k8s-cluster-name": "demo",
            "goog-k8s-node-pool-name": "default-pool",
            "team": "a",
        },
        "tags": {"items": ["gke-demo-1234abcd-node"]},
        "networkInterfaces": [{"network": "global/networks/default"}],
        "serviceAccounts": [{"email": "nodes@p.iam.gserviceaccount.com", "scopes": ["s"]}],
    },
}


def metadata(**overrides: object) -> dict[str, str]:
    args: dict[str, object] = {
        "labels": {"karpenter.sh/nodepool": "default"},
        "taints": ["karpenter.sh/unregistered:NoExecute"],
        "max_pods": 64,
        "zone": "us-central1-b",
        "custom": {},
    }
    args.update(overrides)
    return node_metadata(NodeTemplate.from_template(TEMPLATE), **args)  # type: ignore[arg-type]


def test_the_template_is_read_without_the_pool_identity() -> None:
    template = NodeTemplate.from_template(TEMPLATE)
    assert template.labels == {"goog-k8s-cluster-name": "demo", "team": "a"}
    assert template.tags == ("gke-demo-1234abcd-node",)
    assert template.metadata["cluster-name"] == "demo"


def test_the_kubelet_gets_the_node_labels_taints_and_max_pods() -> None:
    items = metadata()
    assert items["kube-labels"] == (
        "cloud.google.com/gke-os-distribution=cos,karpenter.sh/nodepool=default"
    )
    env = items["kube-env"].splitlines()
    assert env[0] == "CLUSTER_NAME: demo" and env[-1] == "CA_CERT: abc"
    assert "ZONE: us-central1-b" in env
    args = next(line for line in env if line.startswith("KUBELET_ARGS: ")).split()
    assert args[1:3] == ["--v=2", "--cloud-provider=external"]
    assert "--max-pods=64" in args
    assert "--register-with-taints=karpenter.sh/unregistered:NoExecute" in args
    assert not any("pool=true" in a or "gke-nodepool" in a for a in args)


def test_the_nodeclass_metadata_joins_but_cannot_replace_the_bootstrap() -> None:
    items = metadata(custom={"kube-env": "x", "startup-script": "echo hi", "cluster-name": "demo"})
    assert items["startup-script"] == "echo hi"
    assert items["kube-env"].startswith("CLUSTER_NAME: demo")


def test_the_template_of_a_node_pool_is_its_instance_group_without_grp() -> None:
    pool = {
        "name": "default-pool",
        "instanceGroupUrls": [
            "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/"
            "instanceGroupManagers/gke-demo-default-pool-1a2b3c4d-grp"
        ],
    }
    assert template_name(pool) == "gke-demo-default-pool-1a2b3c4d"
    with pytest.raises(ValueError, match="'empty' has no instanceGroupUrls"):
        template_name({"name": "empty"})
