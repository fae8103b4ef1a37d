"""What nodes need to join the cluster: its endpoint, CA bundle and service CIDR.

The settings give them; what they leave out is read once from EKS DescribeCluster. A complete
answer is kept; after a failed or incomplete one the settings (and what EKS did say) are used and
EKS is asked again after ``CLUSTER_RETRY``. ``ClusterResolver.check`` refuses a launch whose nodes
could not join.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from karpenter_aws.clients import AWSClients
from karpenter_aws.errors import AWS_ERRORS, describe_error
from karpenter_aws.nodeclass import AMI_FAMILY_AL2023, KIND, EC2NodeClass
from karpenter_aws.settings import AWSSettings
from karpenter_core.sdk.types import CreateError

__all__ = ["CLUSTER_RETRY", "ClusterInfo", "ClusterResolver", "cluster_dns_ip"]

log = logging.getLogger("karpenter.aws")

CLUSTER_RETRY = timedelta(minutes=1)
"""How long after a failed (or incomplete) EKS DescribeCluster it is tried again."""


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What nodes need to join the cluster."""

    endpoint: str
    ca_bundle: str
    service_cidr: str
    lookup_error: str = ""
    """Why EKS DescribeCluster did not fill in what the settings leave out ("" when it did)."""

    @property
    def cluster_dns(self) -> tuple[str, ...]:
        """The cluster DNS address: the tenth address of the service CIDR (EKS's kube-dns)."""
        address = cluster_dns_ip(self.service_cidr)
        return (address,) if address else ()


def cluster_dns_ip(service_cidr: str) -> str | None:
    """The tenth address of ``service_cidr``, or None when it is not a CIDR."""
    try:
        network = ipaddress.ip_network(service_cidr.strip(), strict=False)
    except ValueError:
        return None
    return str(network[10]) if network.num_addresses > 10 else None


class ClusterResolver:
    """The cluster's endpoint, CA and service CIDR: the settings, else EKS DescribeCluster."""

    def __init__(
        self, settings: AWSSettings, clients: AWSClients, clock: Callable[[], datetime]
    ) -> None:
        self._settings = settings
        self._clients = clients
        self._clock = clock
        self._lock = threading.Lock()
        self._info: ClusterInfo | None = None
        self._retry: tuple[datetime, ClusterInfo] | None = None

    def get(self) -> ClusterInfo:
        """The cluster's details: kept once complete, else asked again after ``CLUSTER_RETRY``."""
        now = self._clock()
        with self._lock:
            if self._info is not None:
                return self._info
            retry = self._retry
        if retry is not None and now < retry[0]:
            return retry[1]
        info = self._lookup()
        with self._lock:
            if info.lookup_error:
                self._retry = (now + CLUSTER_RETRY, info)
            else:
                self._info = info
        return info

    def _lookup(self) -> ClusterInfo:
        settings = self._settings
        endpoint = settings.cluster_endpoint
        ca_bundle = settings.cluster_ca_bundle
        service_cidr = settings.service_cidr
        if endpoint and ca_bundle and service_cidr:
            return ClusterInfo(endpoint, ca_bundle, service_cidr)
        problem = ""
        cluster: dict[str, Any] = {}
        try:
            cluster = self._clients.eks.describe_cluster(name=settings.cluster_name)["cluster"]
        except AWS_ERRORS as error:
            problem = describe_error(f"reading EKS cluster {settings.cluster_name!r} failed", error)
            log.warning("%s", problem)
        network = cluster.get("kubernetesNetworkConfig") or {}
        endpoint = endpoint or cluster.get("endpoint") or ""
        ca_bundle = ca_bundle or (cluster.get("certificateAuthority") or {}).get("data") or ""
        service_cidr = (
            service_cidr or network.get("serviceIpv4Cidr") or network.get("serviceIpv6Cidr") or ""
        )
        if not problem and not (endpoint and service_cidr):
            problem = f"EKS cluster {settings.cluster_name!r} reports no " + (
                "endpoint" if not endpoint else "service CIDR"
            )
        return ClusterInfo(endpoint, ca_bundle, service_cidr, problem)

    def check(self, cluster: ClusterInfo, node_class: EC2NodeClass) -> None:
        """``CreateError`` when nodes of ``node_class`` could not join: no cluster endpoint, or
        no service CIDR for AL2023 (nodeadm needs it)."""
        name = self._settings.cluster_name
        why = f" ({cluster.lookup_error})" if cluster.lookup_error else ""
        if not cluster.endpoint:
            raise CreateError(
                "ClusterDiscoveryFailed",
                f"the endpoint of cluster {name!r} is unknown{why}: set --cluster-endpoint "
                "(CLUSTER_ENDPOINT) or allow eks:DescribeCluster",
            )
        if node_class.resolved_ami_family() == AMI_FAMILY_AL2023 and not cluster.service_cidr:
            raise CreateError(
                "ClusterCIDRUnknown",
                f"{KIND} {node_class.metadata.name!r} uses AL2023, whose nodeadm needs the "
                f"service CIDR of cluster {name!r}, which is unknown{why}: set --service-cidr "
                "(SERVICE_CIDR) or allow eks:DescribeCluster",
            )
