"""What the fake GCE server holds before a test touches it: the region's zones, GKE node images
(Container-Optimized OS in ``gke-node-images``, Ubuntu in ``ubuntu-os-gke-cloud``, named as GKE
names them, one older deprecated build per line), the cluster's subnetwork, one GKE cluster with
a node pool and its instance template, and a few machine types and Billing SKUs for when the
packaged catalog's seed (``testing.seed`` / ``testing.billing``) is not there."""

from __future__ import annotations

import zlib
from typing import Any

CLUSTER = "test-cluster"
NODE_POOL = "default-pool"
TEMPLATE = f"gke-{CLUSTER}-{NODE_POOL}-1a2b3c4d"
SUBNETWORK = "default"
COS_PROJECT = "gke-node-images"
UBUNTU_PROJECT = "ubuntu-os-gke-cloud"
GKE_VERSIONS = ("1.33.5-gke.1080000", "1.34.1-gke.1829001", "1.35.0-gke.1795000")
"""GKE versions with node images; the cluster runs the middle one."""
COMPUTE_SERVICE = "6F81-5844-456A"
"""The Cloud Billing service id of Compute Engine."""
_COS = ("121-18867-199-38", "121-18867-90-4")
"""COS builds: the current one, and an older one of each line (deprecated)."""
_UBUNTU = ("v20260416", "v20260301")


def zone_names(region: str) -> list[str]:
    """The region's zones: a, b and c, and f for us-central1 (as GCE has them)."""
    return [f"{region}-{z}" for z in ("a", "b", "c", *("f" if region == "us-central1" else ""))]


def images() -> dict[str, list[dict[str, Any]]]:
    """GKE node images by project, newest first; the older build of each line deprecated."""
    out: dict[str, list[dict[str, Any]]] = {COS_PROJECT: [], UBUNTU_PROJECT: []}
    for age, (cos, ubuntu) in enumerate(zip(_COS, _UBUNTU, strict=True)):
        created = f"2026-0{4 - age}-16T10:00:00.000-07:00"
        for gke in GKE_VERSIONS:
            base, build = gke.split("-gke.")
            key = base.replace(".", "")
            minor = "-".join(base.split(".")[:2])
            names = {
                COS_PROJECT: [
                    (f"gke-{key}-gke{build}-cos-{cos}-c-pre", "X86_64", "cos-121-lts"),
                    (f"gke-{key}-gke{build}-cos-arm64-{cos}-c-pre", "ARM64", "cos-arm64-121-lts"),
                    (f"gke-{key}-gke{build}-cos-{cos}-c-nvda", "X86_64", "cos-121-lts"),
                ],
                UBUNTU_PROJECT: [
                    (
                        f"ubuntu-gke-2404-{minor}-amd64-{ubuntu}",
                        "X86_64",
                        f"ubuntu-gke-2404-{minor}-amd64",
                    ),
                    (
                        f"ubuntu-gke-2404-{minor}-arm64-{ubuntu}",
                        "ARM64",
                        f"ubuntu-gke-2404-{minor}-arm64",
                    ),
                    (f"ubuntu-gke-2204-{minor}-{ubuntu}", "X86_64", f"ubuntu-gke-2204-{minor}"),
                    (
                        f"ubuntu-gke-2204-{minor}-arm64-{ubuntu}",
                        "ARM64",
                        f"ubuntu-gke-2204-{minor}-arm64",
                    ),
                ],
            }
            for project, rows in names.items():
                for name, arch, family in rows:
                    image: dict[str, Any] = {
                        "name": name,
                        "family": family,
                        "architecture": arch,
                        "creationTimestamp": created,
                        "status": "READY",
                        "diskSizeGb": "100",
                        "labels": {"kubernetes-version": base.replace(".", "-")},
                    }
                    if age:
                        image["deprecated"] = {"state": "DEPRECATED"}
                    out[project].append(image)
    return out


def subnetwork(project: str, region: str) -> dict[str, Any]:
    """The cluster's node subnetwork, with GKE's secondary ranges for pods and services."""
    return {
        "name": SUBNETWORK,
        "region": region,
        "network": f"projects/{project}/global/networks/default",
        "ipCidrRange": "10.128.0.0/20",
        "gatewayAddress": "10.128.0.1",
        "privateIpGoogleAccess": True,
        "stackType": "IPV4_ONLY",
        "secondaryIpRanges": [
            {"rangeName": f"gke-{CLUSTER}-pods-1a2b3c4d", "ipCidrRange": "10.4.0.0/14"},
            {"rangeName": f"gke-{CLUSTER}-services-1a2b3c4d", "ipCidrRange": "10.8.0.0/20"},
        ],
    }


def instance_template(project: str, region: str, base: str) -> dict[str, Any]:
    """The node pool's instance template, with the metadata GKE writes for its nodes."""
    version = GKE_VERSIONS[1]
    kube_env = "\n".join(
        (
            f"CLUSTER_NAME: {CLUSTER}",
            "ENABLE_NODE_BFQ_IO_SCHEDULER: 'true'",
            "KUBELET_ARGS: --v=2 --cloud-provider=external --experimental-mounter-path="
            "/home/kubernetes/containerized_mounter/mounter --cert-dir=/var/lib/kubelet/pki/ "
            "--kubeconfig=/var/lib/kubelet/kubeconfig --max-pods=110 "
            "--node-labels=cloud.google.com/gke-nodepool=default-pool,"
            "cloud.google.com/gke-os-distribution=cos",
            "KUBERNETES_MASTER_NAME: 10.0.0.2",
            "CA_CERT: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
            f"NODE_TAINTS: ''\nKUBE_PROXY_TOKEN: ''\nVERSION: {version}",
        )
    )
    metadata = {
        "kube-env": kube_env + "\n",
        "kube-labels": "cloud.google.com/gke-nodepool=default-pool,"
        "cloud.google.com/gke-os-distribution=cos",
        "cluster-name": CLUSTER,
        "cluster-location": region,
        "cluster-uid": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978",
        "configure-sh": "#!/usr/bin/env bash\n# GKE node setup\n",
        "user-data": "#cloud-config\nwrite_files: []\n",
        "gci-update-strategy": "update_disabled",
        "gci-metrics-enabled": "true",
        "enable-oslogin": "false",
        "disable-legacy-endpoints": "true",
        "kubelet-config": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "maxPods: 110\n",
    }
    network = f"{base}/projects/{project}/global/networks/default"
    return {
        "kind": "compute#instanceTemplate",
        "name": TEMPLATE,
        "description": "",
        "properties": {
            "machineType": "e2-medium",
            "tags": {"items": [f"gke-{CLUSTER}-1a2b3c4d-node"]},
            "labels": {
                "goog-gke-node": "",
                "goog-k8s-cluster-name": CLUSTER,
                "goog-k8s-node-pool-name": NODE_POOL,
                "goog-k8s-cluster-location": region,
            },
            "metadata": {"items": [{"key": k, "value": v} for k, v in metadata.items()]},
            "networkInterfaces": [
                {
                    "network": network,
                    "subnetwork": f"{base}/projects/{project}/regions/{region}/subnetworks/default",
                    "aliasIpRanges": [
                        {
                            "ipCidrRange": "/24",
                            "subnetworkRangeName": f"gke-{CLUSTER}-pods-1a2b3c4d",
                        }
                    ],
                }
            ],
            "disks": [
                {
                    "boot": True,
                    "autoDelete": True,
                    "type": "PERSISTENT",
                    "initializeParams": {
                        "diskSizeGb": "100",
                        "diskType": "pd-balanced",
                        "sourceImage": f"{base}/projects/{COS_PROJECT}/global/images/"
                        f"gke-1341-gke1829001-cos-{_COS[0]}-c-pre",
                    },
                }
            ],
            "serviceAccounts": [
                {
                    "email": "default",
                    "scopes": ["https://www.googleapis.com/auth/cloud-platform"],
                }
            ],
            "scheduling": {"automaticRestart": True, "onHostMaintenance": "MIGRATE"},
            "shieldedInstanceConfig": {
                "enableSecureBoot": False,
                "enableIntegrityMonitoring": True,
            },
        },
    }


def node_pool(project: str, region: str, base: str) -> dict[str, Any]:
    """The GKE node pool (container v1 NodePool JSON) whose template launches copy."""
    return {
        "name": NODE_POOL,
        "status": "RUNNING",
        "version": GKE_VERSIONS[1],
        "config": {
            "machineType": "e2-medium",
            "diskSizeGb": 100,
            "diskType": "pd-balanced",
            "imageType": "COS_CONTAINERD",
            "serviceAccount": "default",
            "oauthScopes": ["https://www.googleapis.com/auth/cloud-platform"],
            "metadata": {"disable-legacy-endpoints": "true"},
        },
        "locations": zone_names(region)[:3],
        "instanceGroupUrls": [
            f"{base}/projects/{project}/zones/{zone}/instanceGroupManagers/{TEMPLATE}-grp"
            for zone in zone_names(region)[:3]
        ],
        "selfLink": f"{base}/v1/projects/{project}/locations/{region}/clusters/{CLUSTER}"
        f"/nodePools/{NODE_POOL}",
    }


def machine_types(region: str) -> dict[str, list[dict[str, Any]]]:
    """A few machine types per zone (Compute MachineType JSON), for when the packaged catalog's
    seed is not installed."""
    shapes = [
        ("e2-medium", 2, 4096),
        ("e2-standard-4", 4, 16384),
        ("n2-standard-2", 2, 8192),
        ("n2-standard-8", 8, 32768),
        ("t2a-standard-4", 4, 16384),
    ]
    gpu = {"guestAcceleratorType": "nvidia-l4", "guestAcceleratorCount": 1}
    out: dict[str, list[dict[str, Any]]] = {}
    for zone in zone_names(region):
        rows = [
            {
                "name": n,
                "guestCpus": c,
                "memoryMb": m,
                "isSharedCpu": False,
                "maximumPersistentDisks": 128,
                "maximumPersistentDisksSizeGb": "263168",
            }
            for n, c, m in shapes
        ]
        rows.append(
            {
                "name": "g2-standard-4",
                "guestCpus": 4,
                "memoryMb": 16384,
                "accelerators": [gpu],
                "maximumPersistentDisks": 128,
            }
        )
        out[zone] = rows
    return out


def skus(region: str = "us-central1") -> list[dict[str, Any]]:
    """Per-vCPU and per-GiB Billing SKUs (on-demand and spot) of a few families in ``region``."""
    prices = {"E2": (0.021811, 0.002923), "N2": (0.031611, 0.004237), "T2A": (0.0308, 0.0041)}
    out = []
    for family, (cpu, ram) in prices.items():
        for spot, factor in (("", 1.0), ("Spot Preemptible ", 0.3)):
            for what, unit, price in (("Core", "h", cpu), ("Ram", "GiBy.h", ram)):
                name = f"{spot}{family} Instance {what} running in Americas"
                out.append(
                    _sku(
                        name,
                        what,
                        "Preemptible" if spot else "OnDemand",
                        region,
                        unit,
                        price * factor,
                    )
                )
    return out


def _sku(name: str, group: str, usage: str, region: str, unit: str, price: float) -> dict:
    nanos = round(price * 1e9)
    crc = zlib.crc32(name.encode())
    sku_id = f"{crc >> 16:04X}-{crc & 0xFFFF:04X}-{len(name):04X}"
    return {
        "name": f"services/{COMPUTE_SERVICE}/skus/{sku_id}",
        "skuId": sku_id,
        "description": name,
        "category": {
            "serviceDisplayName": "Compute Engine",
            "resourceFamily": "Compute",
            "resourceGroup": group,
            "usageType": usage,
        },
        "serviceRegions": [region],
        "pricingInfo": [
            {
                "effectiveTime": "2026-12-01T00:00:00Z",
                "pricingExpression": {
                    "usageUnit": unit,
                    "displayQuantity": 1,
                    "baseUnit": unit,
                    "tieredRates": [
                        {
                            "startUsageAmount": 0,
                            "unitPrice": {"currencyCode": "USD", "units": "0", "nanos": nanos},
                        }
                    ],
                },
                "currencyConversionRate": 1,
            }
        ],
        "serviceProviderName": "Google",
    }
