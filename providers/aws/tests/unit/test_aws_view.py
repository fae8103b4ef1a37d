"""The NodeClaim view of instances, from what it is handed (no AWS, no cluster)."""

from __future__ import annotations

from datetime import UTC, datetime
from fractions import Fraction

from karpenter_aws.instances import Instance
from karpenter_aws.instancetype import RESOURCE_EFA, BuildOptions, instance_type
from karpenter_aws.labels import (
    ANNOTATION_INSTANCE_PROFILE,
    LABEL_NODECLASS,
    LABEL_TOPOLOGY_ZONE_ID,
    TAG_NODECLAIM,
    TAG_NODECLASS,
    TAG_NODEPOOL,
)
from karpenter_aws.nodeclass import HASH_ANNOTATION, EC2NodeClass, nodeclass_hash
from karpenter_aws.nodeclass import NODE_CLASS as INFO_EC2
from karpenter_aws.view import created_annotations, machine, nodeclaim_view
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.sdk.machines import MachineView
from karpenter_core.sdk.nodeclass import NodeClassBinding
from karpenter_core.sdk.record import ProviderContext
from karpenter_core.sdk.types import InstanceType

NOW = datetime(2026, 1, 1, tzinfo=UTC)
INFO = {
    "InstanceType": "c5n.large",
    "ProcessorInfo": {"SupportedArchitectures": ["x86_64"]},
    "VCpuInfo": {"DefaultVCpus": 2},
    "MemoryInfo": {"SizeInMiB": 5376},
    "NetworkInfo": {"EfaInfo": {"MaximumEfaInterfaces": 1}},
    "SupportedUsageClasses": ["on-demand", "spot"],
}
NODE_CLASS = EC2NodeClass.model_validate(
    {
        "metadata": {"name": "default"},
        "spec": {
            "role": "KarpenterNodeRole",
            "subnetSelectorTerms": [{"tags": {"k": "v"}}],
            "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
        },
        "status": {
            "subnets": [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az6"}],
            "instanceProfile": "profile-1",
        },
    }
)


class Reads:
    """What the view is handed, counting the EC2NodeClass reads."""

    def __init__(self) -> None:
        self.node_class_reads = 0

    def instance_types(self, _: EC2NodeClass | None) -> list[InstanceType]:
        built = instance_type(INFO, BuildOptions(), {"us-east-1a": "", "us-east-1b": ""})
        assert built is not None
        return [built]

    def node_class(self, kind: str, name: str) -> EC2NodeClass | None:
        self.node_class_reads += 1
        return NODE_CLASS if (kind, name) == ("EC2NodeClass", "default") else None

    def view(self) -> MachineView[EC2NodeClass]:
        context = ProviderContext(clock=lambda: NOW, node_classes=self.node_class)
        binding = NodeClassBinding[EC2NodeClass]("aws", INFO_EC2, context)
        return nodeclaim_view(binding, self.instance_types, lambda: {"us-east-1b": "use1-az1"})


def instance(zone: str = "us-east-1a", state: str = "running", **tags: str) -> Instance:
    return Instance(
        "i-1", "c5n.large", zone, state, "ami-1", "subnet-1", ("sg-1",), "spot", tags, NOW
    )


def test_a_launched_nodeclaim_gets_labels_annotations_and_status() -> None:
    nodeclaim = NodeClaim.model_validate(
        {
            "metadata": {"name": "default-abcde", "labels": {wk.NODEPOOL: "default"}},
            "spec": {
                "requirements": [],
                "nodeClassRef": {
                    "group": "karpenter.k8s.aws",
                    "kind": "EC2NodeClass",
                    "name": "default",
                },
                "resources": {"requests": {RESOURCE_EFA: "1"}},
            },
        }
    )
    annotations = created_annotations(NODE_CLASS)
    created = Reads().view().created(nodeclaim, NODE_CLASS, machine(instance()), annotations)
    labels = created.metadata.labels
    assert labels[wk.INSTANCE_TYPE] == "c5n.large" and labels[wk.NODEPOOL] == "default"
    assert labels[LABEL_TOPOLOGY_ZONE_ID] == "use1-az6" and labels[LABEL_NODECLASS] == "default"
    assert created.metadata.annotations[HASH_ANNOTATION] == nodeclass_hash(NODE_CLASS.spec)
    assert created.metadata.annotations[ANNOTATION_INSTANCE_PROFILE] == "profile-1"
    assert created.status.provider_id == "aws:///us-east-1a/i-1"
    assert created.status.capacity[RESOURCE_EFA] == Fraction(1)
    assert nodeclaim.status.provider_id is None


def test_an_instance_read_back_as_a_nodeclaim() -> None:
    tags = {TAG_NODECLAIM: "default-abcde", TAG_NODECLASS: "default", TAG_NODEPOOL: "default"}
    claim = (
        Reads()
        .view()
        .nodeclaim(machine(instance(zone="us-east-1b", state="shutting-down", **tags)))
    )
    assert claim.metadata.name == "default-abcde"
    assert claim.metadata.deletion_timestamp == NOW
    assert claim.metadata.labels[wk.NODEPOOL] == "default"
    assert claim.metadata.labels[LABEL_TOPOLOGY_ZONE_ID] == "use1-az1"  # from the region's zones
    assert claim.spec.node_class_ref.name == "default"
    assert RESOURCE_EFA not in claim.status.capacity
    assert claim.status.allocatable["cpu"] < claim.status.capacity["cpu"]


def test_an_untagged_instance_of_an_unknown_node_class() -> None:
    claim = Reads().view().nodeclaim(machine(instance(zone="us-east-1c")))
    assert claim.metadata.name == "i-1"
    assert claim.metadata.deletion_timestamp is None
    assert claim.spec.node_class_ref.name == "unknown"
    assert LABEL_TOPOLOGY_ZONE_ID not in claim.metadata.labels
    assert LABEL_NODECLASS not in claim.metadata.labels


def test_a_list_reads_each_node_class_once() -> None:
    reads = Reads()
    tagged = instance(**{TAG_NODECLASS: "default"})
    other = instance(**{TAG_NODECLASS: "other"})
    claims = reads.view().nodeclaims(map(machine, [tagged, tagged, other]))
    assert len(claims) == 3
    assert reads.node_class_reads == 2
