"""The GCENodeClass CRD as served by a real kube-apiserver: it accepts what the model accepts.

Every object of the table goes to the pydantic model and, as a server-side dry run, to the
apiserver; both must accept it or both refuse it (the apiserver with the expected message).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from pydantic import ValidationError

from karpenter_conformance.cluster import crds as cluster_crds
from karpenter_core.sdk.crds import crd_path, node_class_crd
from karpenter_core.sdk.testing import NodeClassStore, node_class_manifest, pruned
from karpenter_gcp.nodeclass import GROUP, NODE_CLASS, PLURAL, VERSION, GCENodeClass

pytestmark = pytest.mark.integration


COS = {"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}]}
KUBELET = {
    "clusterDNS": ["10.0.0.10"],
    "maxPods": 64,
    "podsPerCore": 4,
    "systemReserved": {"cpu": "100m", "memory": "100Mi", "ephemeral-storage": "1Gi", "pid": "100"},
    "kubeReserved": {"cpu": "200m"},
    "evictionHard": {"memory.available": "5%", "nodefs.available": "10%"},
    "evictionSoft": {"memory.available": "500Mi"},
    "evictionSoftGracePeriod": {"memory.available": "1m30s"},
    "evictionMaxPodGracePeriod": 60,
    "imageGCHighThresholdPercent": 90,
    "imageGCLowThresholdPercent": 10,
    "cpuCFSQuota": False,
}


def _with(**fields: Any) -> dict[str, Any]:
    return {**COS, **fields}


def _terms(*terms: dict[str, str]) -> dict[str, Any]:
    return {"imageSelectorTerms": list(terms)}


GOOD: dict[str, dict[str, Any]] = {
    "a COS alias": COS,
    "every field": _with(
        serviceAccount="nodes@my-project.iam.gserviceaccount.com",
        imageFamily="ContainerOptimizedOS",
        disks=[
            {"sizeGiB": 100, "category": "pd-balanced", "boot": True},
            {"sizeGiB": 375, "category": "local-ssd"},
            {"sizeGiB": 10, "category": "hyperdisk-balanced"},
        ],
        labels={"team": "a", **{f"k{i}": "v" for i in range(19)}},
        metadata={"serial-port-logging-enable": "true"},
        networkTags=["web", "a" * 63, *(f"t{i}" for i in range(18))],
        networkConfig={
            "enablePrivateNodes": True,
            "subnetwork": "projects/p/regions/us-central1/subnetworks/nodes",
        },
        kubeletConfiguration=KUBELET,
    ),
    "the default service account": _with(
        serviceAccount="123-compute@developer.gserviceaccount.com"
    ),
    "a pinned COS alias": _terms({"alias": "ContainerOptimizedOS@125.19216.104.126"}),
    "a pinned Ubuntu alias": _terms({"alias": "Ubuntu@v20260416"}),
    "an image id": _terms({"id": "projects/p/global/images/my-image"}),
    "a COS channel": _terms({"family": "ContainerOptimizedOS", "channel": "regular"}),
    "the cluster's channel": _terms({"family": "ContainerOptimizedOS", "channel": "cluster"}),
    "a pinned COS family": _terms({"family": "ContainerOptimizedOS", "version": "1.2.3.4"}),
    "Ubuntu 24.04, latest": _terms({"family": "Ubuntu2404", "version": "latest"}),
    "Ubuntu 22.04, pinned": _terms({"family": "Ubuntu2204", "version": "v20250101"}),
    "several terms": _terms({"id": "projects/p/global/images/a"}, {"alias": "Ubuntu@latest"}),
    "thirty terms": _terms(*({"alias": "Ubuntu@latest"} for _ in range(30))),
    "the Ubuntu family": _with(imageFamily="Ubuntu"),
    "ten disks": _with(disks=[{"sizeGiB": 10}] * 10),
    "empty kubelet settings": _with(kubeletConfiguration={}),
}

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "no image selector terms": ({}, "spec.imageSelectorTerms: Required value"),
    "empty image selector terms": (_terms(), "should have at least 1 items"),
    "31 image selector terms": (
        _terms(*({"alias": "Ubuntu@latest"} for _ in range(31))),
        "must have at most 30 items",
    ),
    "an empty term": (
        _terms({}),
        "each term must set exactly one of: alias, id, or family (with channel or version)",
    ),
    "an alias without a version": (
        _terms({"alias": "Ubuntu"}),
        "'alias' is improperly formatted, must match the format 'family@version'",
    ),
    "an alias of an unknown family": (
        _terms({"alias": "Bottlerocket@latest"}),
        "family is not supported, must be one of the following: 'ContainerOptimizedOS,Ubuntu'",
    ),
    "a COS alias of a bad version": (
        _terms({"alias": "ContainerOptimizedOS@125"}),
        "ContainerOptimizedOS version must be 'latest' or 'milestone.build.build.build'",
    ),
    "an Ubuntu alias of a bad version": (
        _terms({"alias": "Ubuntu@2026-04-16"}),
        "Ubuntu version must be 'latest' or 'vYYYYMMDD'",
    ),
    "a long alias": (_terms({"alias": "Ubuntu@" + "v" * 60}), "Too long"),
    "a long id": (_terms({"id": "i" * 161}), "Too long"),
    "a family without a version": (
        _terms({"family": "Ubuntu2404"}),
        "family requires either channel or version to be set",
    ),
    "a channel without a family": (
        _terms({"channel": "stable"}),
        "channel and version require family to be set",
    ),
    "a channel and a version": (
        _terms({"family": "ContainerOptimizedOS", "channel": "stable", "version": "latest"}),
        "channel and version cannot both be set",
    ),
    "a channel for Ubuntu": (
        _terms({"family": "Ubuntu2404", "channel": "stable"}),
        "channel is only supported for family ContainerOptimizedOS",
    ),
    "an alias and an id": (
        _terms({"alias": "Ubuntu@latest", "id": "projects/p/global/images/a"}),
        "exactly one of alias, id, or family must be set",
    ),
    "a COS family of a bad version": (
        _terms({"family": "ContainerOptimizedOS", "version": "v20260416"}),
        "ContainerOptimizedOS version must be 'latest' or",
    ),
    "an Ubuntu 24.04 family of a bad version": (
        _terms({"family": "Ubuntu2404", "version": "1.2.3.4"}),
        "Ubuntu2404 version must be 'latest' or 'vYYYYMMDD'",
    ),
    "an Ubuntu 22.04 family of a bad version": (
        _terms({"family": "Ubuntu2204", "version": "v2026"}),
        "Ubuntu2204 version must be 'latest' or 'vYYYYMMDD'",
    ),
    "the bare Ubuntu family in a term": (
        _terms({"family": "Ubuntu", "version": "latest"}),
        'Unsupported value: "Ubuntu"',
    ),
    "an unknown channel": (
        _terms({"family": "ContainerOptimizedOS", "channel": "beta"}),
        'Unsupported value: "beta"',
    ),
    "a channel beside COS latest": (
        _terms(
            {"family": "ContainerOptimizedOS", "channel": "stable"},
            {"family": "ContainerOptimizedOS", "version": "latest"},
        ),
        "channel: and version: latest cannot both appear in the same imageSelectorTerms",
    ),
    "an unknown image family": (_with(imageFamily="Ubuntu2404"), 'Unsupported value: "Ubuntu2404"'),
    "a service account that is not one": (
        _with(serviceAccount="nodes@example.com"),
        "spec.serviceAccount in body should match",
    ),
    "a small disk": (_with(disks=[{"sizeGiB": 9}]), "size invalid"),
    "two boot disks": (
        _with(disks=[{"boot": True}, {"sizeGiB": 50, "boot": True}]),
        "at most one disk may be the boot disk",
    ),
    "a local SSD boot disk": (
        _with(disks=[{"category": "local-ssd", "boot": True}]),
        "a local SSD cannot be the boot disk",
    ),
    "a local SSD of another size": (
        _with(disks=[{"category": "local-ssd", "sizeGiB": 3000}]),
        "a local SSD has GCE's fixed size: sizeGiB 375 or unset",
    ),
    "a label value with a space": (
        _with(labels={"team": "machine learning"}),
        "should match '^[a-z0-9_-]{0,63}$'",
    ),
    "an unknown disk category": (
        _with(disks=[{"sizeGiB": 10, "category": "pd-fast"}]),
        'Unsupported value: "pd-fast"',
    ),
    "eleven disks": (_with(disks=[{"sizeGiB": 10}] * 11), "must have at most 10 items"),
    "an empty label key": (_with(labels={"": "v"}), "empty tag keys aren't supported"),
    "the cluster name label": (
        _with(labels={"gce:gce-cluster-name": "v"}),
        "tag contains a restricted tag matching gce:gce-cluster-name",
    ),
    "a cluster label": (
        _with(labels={"kubernetes.io/cluster/c": "owned"}),
        "tag contains a restricted tag matching kubernetes.io/cluster/",
    ),
    "the nodepool label": (
        _with(labels={"karpenter.sh/nodepool": "v"}),
        "tag contains a restricted tag matching karpenter.sh/nodepool",
    ),
    "the nodeclaim label": (
        _with(labels={"karpenter.sh/nodeclaim": "v"}),
        "tag contains a restricted tag matching karpenter.sh/nodeclaim",
    ),
    "the nodeclass label": (
        _with(labels={"karpenter.k8s.gcp/gcenodeclass": "v"}),
        "tag contains a restricted tag matching karpenter.k8s.gcp/gcenodeclass",
    ),
    "21 labels": (_with(labels={f"k{i}": "v" for i in range(21)}), "must have at most 20 items"),
    "a reserved metadata key": (
        _with(metadata={"kube-env": "x"}),
        "spec.metadata contains a reserved GKE metadata key",
    ),
    "another reserved metadata key": (
        _with(metadata={"kubelet-config": "x"}),
        "spec.metadata contains a reserved GKE metadata key",
    ),
    "an upper-case network tag": (
        _with(networkTags=["Web"]),
        "spec.networkTags[0] in body should match",
    ),
    "a long network tag": (_with(networkTags=["a" * 64]), "Too long"),
    "21 network tags": (
        _with(networkTags=[f"t{i}" for i in range(21)]),
        "must have at most 20 items",
    ),
    "image GC high not above low": (
        _with(
            kubeletConfiguration={
                "imageGCHighThresholdPercent": 50,
                "imageGCLowThresholdPercent": 50,
            }
        ),
        "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
    ),
    "soft eviction without a grace period": (
        _with(kubeletConfiguration={"evictionSoft": {"memory.available": "5%"}}),
        "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
    ),
    "an unknown reserved resource": (
        _with(kubeletConfiguration={"systemReserved": {"gpu": "1"}}),
        "valid keys for systemReserved are",
    ),
    "a negative reserved quantity": (
        _with(kubeletConfiguration={"kubeReserved": {"cpu": "-1"}}),
        "in body should match",
    ),
    "negative max pods": (
        _with(kubeletConfiguration={"maxPods": -1}),
        "should be greater than or equal to 0",
    ),
}


def manifest(spec: dict[str, Any]) -> dict[str, Any]:
    return node_class_manifest(NODE_CLASS, spec, "gcenc")


def model_error(spec: dict[str, Any]) -> str | None:
    """The model's complaint about ``spec``, or None when it accepts it."""
    try:
        GCENodeClass.from_manifest(manifest(spec))
    except ValidationError as error:
        return str(error)
    return None


CRD_PATH = crd_path(NODE_CLASS)


@pytest.fixture(scope="module")
def installed_crd(kube_cluster: Any) -> str:
    """The GCENodeClass CRD generated now from the model, applied and Established."""
    (name,) = cluster_crds.apply_documents(kube_cluster.kubeconfig, [node_class_crd(NODE_CLASS)])
    return name


@pytest.fixture
def node_classes(kube_client: client.ApiClient, installed_crd: str) -> Iterator[NodeClassStore]:
    store = NodeClassStore(client.CustomObjectsApi(kube_client), NODE_CLASS, manifest)
    try:
        yield store
    finally:
        store.delete_created()


@pytest.mark.parametrize("spec", GOOD.values(), ids=GOOD.keys())
def test_both_accept(node_classes: NodeClassStore, spec: dict[str, Any]) -> None:
    assert model_error(spec) is None
    stored = node_classes.dry_run(spec)

    parsed = GCENodeClass.from_manifest(stored)
    model_spec = parsed.spec.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert pruned(model_spec) == pruned(stored["spec"]), (
        "the model and the apiserver disagree on the defaults"
    )


@pytest.mark.parametrize(("spec", "message"), BAD.values(), ids=BAD.keys())
def test_both_refuse(node_classes: NodeClassStore, spec: dict[str, Any], message: str) -> None:
    error = model_error(spec)
    assert error is not None, "the model accepts what the apiserver should refuse"
    assert message in node_classes.rejection(spec)


def test_the_apiserver_fills_the_defaults(node_classes: NodeClassStore) -> None:
    spec = node_classes.create(
        {"imageSelectorTerms": [{"alias": "Ubuntu@latest"}], "disks": [{"sizeGiB": 50}]}
    )["spec"]

    assert spec["disks"] == [{"sizeGiB": 50, "boot": False}]


def test_status_round_trips(node_classes: NodeClassStore) -> None:
    stored = node_classes.create({"imageSelectorTerms": [{"alias": "ContainerOptimizedOS@latest"}]})
    image = "projects/gke-node-images/global/images/gke-1312-gke1000-cos-117-18613-0-79-c-pre"
    status = {
        "images": [
            {
                "sourceImage": image,
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.k8s.gcp/instance-gpu-count", "operator": "DoesNotExist"},
                ],
            }
        ],
        "subnetwork": "projects/p/regions/us-central1/subnetworks/nodes",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Ready",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1,
            }
        ],
    }
    name = stored["metadata"]["name"]
    updated = node_classes.api.patch_cluster_custom_object_status(
        GROUP, VERSION, PLURAL, name, {"status": status}
    )

    node_class = GCENodeClass.from_manifest(updated)
    assert node_class.not_ready_reason() is None
    assert node_class.status.images[0].source_image == image
    assert updated["status"] == status


def test_the_generated_crd_is_the_shipped_one(installed_crd: str) -> None:
    shipped = [doc for doc in yaml.safe_load_all(CRD_PATH.read_text()) if doc]
    assert installed_crd == f"{PLURAL}.{GROUP}"
    assert shipped == [node_class_crd(NODE_CLASS)]
