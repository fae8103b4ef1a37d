"""The bootstrap metadata of a launch: a GKE node pool's instance template, with the node's
labels, taints, max pods and zone, and the GCENodeClass's metadata."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from google.cloud import compute_v1

from karpenter_core.sdk.types import CloudProviderError
from karpenter_gcp.bootstrap import NodeTemplate, node_metadata, read_template

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
                {
                    "key": "kubelet-config",
                    "value": "kind: KubeletConfiguration\nmaxPods: 110\nx: 1\n",
                },
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


def metadata(
    custom: dict[str, str] | None = None, kubelet: dict[str, Any] | None = None
) -> dict[str, str]:
    template = NodeTemplate.from_template(TEMPLATE)
    labels = {"karpenter.sh/nodepool": "default"}
    taints = ["karpenter.sh/unregistered:NoExecute"]
    return node_metadata(template, labels, taints, 64, "us-central1-b", custom or {}, kubelet or {})


def test_the_template_is_read_without_the_pool_identity() -> None:
    template = NodeTemplate.from_template(TEMPLATE)
    assert template.labels == {"goog-k8s-cluster-name": "demo", "team": "a"}
    assert template.tags == ("gke-demo-1234abcd-node",)
    assert template.metadata["cluster-name"] == "demo"


def test_the_kubelet_gets_the_node_labels_taints_and_max_pods() -> None:
    items = metadata()
    assert (
        items["kube-labels"]
        == "cloud.google.com/gke-os-distribution=cos,karpenter.sh/nodepool=default"
    )
    env = items["kube-env"].splitlines()
    assert env[0] == "CLUSTER_NAME: demo" and env[-1] == "CA_CERT: abc"
    assert env[1] == "ZONE: us-central1-b"
    args = env[2].split()
    assert args[:3] == ["KUBELET_ARGS:", "--v=2", "--cloud-provider=external"]
    assert "--max-pods=64" in args
    assert "--register-with-taints=karpenter.sh/unregistered:NoExecute" in args
    assert not any("pool=true" in a or "gke-nodepool" in a for a in args)


def test_the_kubelet_config_gets_the_nodeclass_settings_and_max_pods() -> None:
    items = metadata(kubelet={"kubeReserved": {"cpu": "100m"}, "maxPods": 30})
    assert yaml.safe_load(items["kubelet-config"]) == {
        "kind": "KubeletConfiguration",
        "maxPods": 64,
        "x": 1,
        "kubeReserved": {"cpu": "100m"},
    }


def test_the_nodeclass_metadata_is_added() -> None:
    items = metadata({"team": "a"})
    assert items["team"] == "a" and items["cluster-name"] == "demo"


class Clients:
    """``node_pool`` and ``instance_templates.get``, from memory."""

    def __init__(self, pool: dict[str, Any]) -> None:
        self.pool = pool
        self.instance_templates = self
        self.asked: list[str] = []

    def node_pool(self, location: str, cluster: str, name: str) -> dict[str, Any]:
        return self.pool

    def get(self, project: str, instance_template: str, retry: object) -> Any:
        self.asked.append(instance_template)
        return compute_v1.InstanceTemplate(name=instance_template)


def test_the_template_of_a_node_pool_is_its_instance_group_without_grp() -> None:
    url = "https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a/instanceGroupManagers/"
    clients = Clients({"instanceGroupUrls": [url + "gke-demo-default-pool-1a2b3c4d-grp"]})
    read_template(clients, "p", "us-central1", "demo", "default-pool")
    assert clients.asked == ["gke-demo-default-pool-1a2b3c4d"]
    with pytest.raises(CloudProviderError, match=r"'default-pool'.*no instanceGroupUrls"):
        read_template(Clients({}), "p", "us-central1", "demo", "default-pool")
