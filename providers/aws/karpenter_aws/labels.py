"""Label, tag and annotation keys of the AWS provider."""

from __future__ import annotations

GROUP = "karpenter.k8s.aws"
"""API group of EC2NodeClass and prefix of the provider's labels."""

PROVIDER_ID_PREFIX = "aws:///"
"""providerIDs look like ``aws:///<zone>/<instance-id>``."""

LABEL_INSTANCE_CATEGORY = f"{GROUP}/instance-category"
LABEL_INSTANCE_FAMILY = f"{GROUP}/instance-family"
LABEL_INSTANCE_GENERATION = f"{GROUP}/instance-generation"
LABEL_INSTANCE_SIZE = f"{GROUP}/instance-size"
LABEL_INSTANCE_CPU = f"{GROUP}/instance-cpu"
LABEL_INSTANCE_CPU_MANUFACTURER = f"{GROUP}/instance-cpu-manufacturer"
LABEL_INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ = f"{GROUP}/instance-cpu-sustained-clock-speed-mhz"
LABEL_INSTANCE_MEMORY = f"{GROUP}/instance-memory"
LABEL_INSTANCE_EBS_BANDWIDTH = f"{GROUP}/instance-ebs-bandwidth"
LABEL_INSTANCE_NETWORK_BANDWIDTH = f"{GROUP}/instance-network-bandwidth"
LABEL_INSTANCE_HYPERVISOR = f"{GROUP}/instance-hypervisor"
LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT = f"{GROUP}/instance-encryption-in-transit-supported"
LABEL_INSTANCE_GPU_NAME = f"{GROUP}/instance-gpu-name"
LABEL_INSTANCE_GPU_MANUFACTURER = f"{GROUP}/instance-gpu-manufacturer"
LABEL_INSTANCE_GPU_COUNT = f"{GROUP}/instance-gpu-count"
LABEL_INSTANCE_GPU_MEMORY = f"{GROUP}/instance-gpu-memory"
LABEL_INSTANCE_ACCELERATOR_NAME = f"{GROUP}/instance-accelerator-name"
LABEL_INSTANCE_ACCELERATOR_MANUFACTURER = f"{GROUP}/instance-accelerator-manufacturer"
LABEL_INSTANCE_ACCELERATOR_COUNT = f"{GROUP}/instance-accelerator-count"
LABEL_INSTANCE_LOCAL_NVME = f"{GROUP}/instance-local-nvme"
LABEL_INSTANCE_CAPABILITY_FLEX = f"{GROUP}/instance-capability-flex"
LABEL_TOPOLOGY_ZONE_ID = "topology.k8s.aws/zone-id"
LABEL_NODECLASS = f"{GROUP}/ec2nodeclass"
"""Label (and tag) naming the EC2NodeClass a node was launched from."""

ANNOTATION_NODECLASS_HASH = f"{GROUP}/ec2nodeclass-hash"
ANNOTATION_NODECLASS_HASH_VERSION = f"{GROUP}/ec2nodeclass-hash-version"
ANNOTATION_INSTANCE_PROFILE = f"{GROUP}/instance-profile"

TAG_CLUSTER_PREFIX = "kubernetes.io/cluster/"
TAG_NODEPOOL = "karpenter.sh/nodepool"
TAG_NODECLAIM = "karpenter.sh/nodeclaim"
TAG_NODECLASS = LABEL_NODECLASS
TAG_EKS_CLUSTER_NAME = "eks:eks-cluster-name"
TAG_NAME = "Name"


def cluster_tag(cluster_name: str) -> str:
    """The tag key marking resources owned by ``cluster_name``."""
    return f"{TAG_CLUSTER_PREFIX}{cluster_name}"
