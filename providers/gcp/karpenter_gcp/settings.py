"""Settings of the GCP provider: flags ``--gcp-<name>`` or variables ``KARPENTER_GCP_<NAME>``
(with the GCP provider alone, also ``--<name>`` and the variable each option names: the
community GCP provider's, so one deployment's values serve both).

Credentials are Google's Application Default Credentials (Workload Identity on GKE, or
``GOOGLE_APPLICATION_CREDENTIALS``), read by google-auth itself; with ``--gcp-api-endpoint``
(a fake GCE server) the clients send none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from karpenter_core.sdk.record import ProviderOption
from karpenter_core.sdk.settings import (
    OptionError,
    OptionReader,
    boolean,
    fraction,
    matching,
    missing_options,
    url,
)

__all__ = ["FALLBACK_REGION", "OPTIONS", "PROVIDER", "GCPSettings", "SettingsError"]

_DECLARED = (
    # name, help, default, upstream's variable, read by simulate
    ("project-id", "Google Cloud project of the GKE cluster; its instances go there (required "
     "to launch)", None, "PROJECT_ID", False),
    ("region", "Region of the cluster's nodes, e.g. us-central1 (offline, us-central1 when none "
     "is set)", None, "CLUSTER_LOCATION", True),
    ("cluster-location", "Location of the GKE cluster itself: its region, or a zone for a zonal "
     "cluster (default: the region)", None, "NODE_LOCATION", False),
    ("cluster-name", "Name of the GKE cluster; labels every instance Karpenter creates "
     "(required to launch)", None, "CLUSTER_NAME", False),
    ("node-pool", "GKE node pool whose instance template new nodes copy their bootstrap "
     "metadata, network and service account from", "default-pool",
     "DEFAULT_NODEPOOL_TEMPLATE_NAME", False),
    ("service-account", "Service account of instances whose GCENodeClass names none (default: "
     "the node pool template's)", None, "DEFAULT_NODEPOOL_SERVICE_ACCOUNT", False),
    ("interruption", "Delete the NodeClaims of preempted spot instances at once (reads zone "
     "operations)", "true", "INTERRUPTION", False),
    ("vm-memory-overhead-percent", "Fraction of a VM's memory the hypervisor and guest kernel "
     "keep", "0.07", "VM_MEMORY_OVERHEAD_PERCENT", True),
    ("api-endpoint", "Endpoint of the Compute, GKE and Cloud Billing APIs, with no credentials "
     "(testing against the fake GCE server; default: Google's)", None, None, False),
)  # fmt: skip
OPTIONS = tuple(
    ProviderOption(name, help_, default=default, env=env, simulate=simulate)
    for name, help_, default, env, simulate in _DECLARED
)

PROVIDER = "gcp"
"""The provider's name, which prefixes its options."""
FALLBACK_REGION = "us-central1"
"""The region an offline simulation uses when none is configured."""

_PROJECT = re.compile(r"([a-z][-a-z0-9.]*[a-z0-9]:)?[a-z][-a-z0-9]{4,28}[a-z0-9]")
"""A project ID (``my-project-123``; older domain-scoped ones: ``example.com:project``)."""
_REGION = re.compile(r"[a-z]+-[a-z]+\d+")
_LOCATION = re.compile(r"[a-z]+-[a-z]+\d+(-[a-z])?")
_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
"""A GKE cluster or node pool name: lower case, digits and ``-``, up to 40."""
_SERVICE_ACCOUNT = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]+")

SettingsError = OptionError
"""A provider setting has a value that cannot be used."""


@dataclass(frozen=True, slots=True)
class GCPSettings:
    """The GCP provider's settings, parsed."""

    project_id: str = ""
    region: str = ""
    cluster_location: str = ""
    cluster_name: str = ""
    node_pool: str = "default-pool"
    service_account: str = ""
    interruption: bool = True
    vm_memory_overhead_percent: float = 0.07
    api_endpoint: str = ""

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> GCPSettings:
        """Parse option values keyed by option name (missing or None: the default)."""
        get = OptionReader(PROVIDER, OPTIONS, values)
        region = get("region", matching(_REGION, "a Google Cloud region (e.g. us-central1)"))
        return cls(
            project_id=get("project-id", matching(_PROJECT, "a project ID (e.g. my-project)")),
            region=region,
            cluster_location=get(
                "cluster-location",
                matching(_LOCATION, "a region or zone (e.g. us-central1, us-central1-a)"),
            )
            or region,
            cluster_name=get("cluster-name", matching(_NAME, "a GKE cluster name")),
            node_pool=get("node-pool", matching(_NAME, "a GKE node pool name")),
            service_account=get(
                "service-account", matching(_SERVICE_ACCOUNT, "a service account e-mail")
            ),
            interruption=get("interruption", boolean),
            vm_memory_overhead_percent=get("vm-memory-overhead-percent", fraction),
            api_endpoint=get("api-endpoint", url("http", "https", example="http://127.0.0.1:8080")),
        )

    def launch_problems(self) -> list[str]:
        """The settings a launch needs that are missing, as ``--flag (ENV or FORMER)``."""
        required = {
            "project-id": self.project_id,
            "region": self.region,
            "cluster-name": self.cluster_name,
            "node-pool": self.node_pool,
        }
        return missing_options(PROVIDER, OPTIONS, required)
