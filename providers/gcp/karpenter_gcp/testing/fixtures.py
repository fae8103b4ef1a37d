"""What the fake GCE server holds besides machine types and SKUs (``testing.seed`` and
``testing.billing``): the region's zones, GKE node images (Container-Optimized OS in
``gke-node-images``, Ubuntu in ``ubuntu-os-gke-cloud``, named as GKE names them, an older
deprecated build of each line), the cluster's subnetwork, and one GKE cluster's node pool with
its instance template. Each function returns the resources' JSON as the API answers it;
``url`` is the Compute API's base (``<endpoint>/compute/v1``)."""

from __future__ import annotations

import zlib
from typing import Any

CLUSTER = "test-cluster"
NODE_POOL = "default-pool"
TEMPLATE = f"gke-{CLUSTER}-{NODE_POOL}-1a2b3c4d"
COS_PROJECT = "gke-node-images"
UBUNTU_PROJECT = "ubuntu-os-gke-cloud"
GKE_VERSIONS = ("1.33.5-gke.1080000", "1.34.1-gke.1829001", "1.35.0-gke.1795000")
"""GKE versions with node images; the cluster runs the middle one."""
_BUILDS = (("121-18867-199-38", "v20260416"), ("121-18867-90-4", "v20260301"))
"""(COS, Ubuntu) builds: the current one, then an older, deprecated one."""
_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


def resource_id(name: str) -> str:
    """A stable numeric id for a seeded resource."""
    return str(1_000_000_000_000 + zlib.crc32(name.encode()))


def zone_names(region: str) -> list[str]:
    """The region's zones: a, b and c, and f for us-central1 (as GCE has them)."""
    return [f"{region}-{z}" for z in ("a", "b", "c", *("f" if region == "us-central1" else ""))]


def zones(project: str, region: str, url: str) -> dict[str, dict[str, Any]]:
    """The region's zones by name."""
    base = f"{url}/projects/{project}"
    return {
        zone: {
            "kind": "compute#zone",
            "id": resource_id(zone),
            "name": zone,
            "status": "UP",
            "region": f"{base}/regions/{region}",
            "selfLink": f"{base}/zones/{zone}",
            "availableCpuPlatforms": ["Intel Cascade Lake", "AMD Milan", "Ampere Altra"],
        }
        for zone in zone_names(region)
    }


def _image_names(gke: str, cos: str, ubuntu: str) -> dict[str, list[tuple[str, str, str]]]:
    """(name, architecture, family) of the node images of GKE version ``gke`` by project."""
    base, build = gke.split("-gke.")
    key, minor = base.replace(".", ""), "-".join(base.split(".")[:2])
    prefix = f"gke-{key}-gke{build}-cos"
    u24, u22 = f"ubuntu-gke-2404-{minor}", f"ubuntu-gke-2204-{minor}"
    return {
        COS_PROJECT: [
            (f"{prefix}-{cos}-c-pre", "X86_64", "cos-121-lts"),
            (f"{prefix}-arm64-{cos}-c-pre", "ARM64", "cos-arm64-121-lts"),
            (f"{prefix}-{cos}-c-nvda", "X86_64", "cos-121-lts"),
        ],
        UBUNTU_PROJECT: [
            (f"{u24}-amd64-{ubuntu}", "X86_64", f"{u24}-amd64"),
            (f"{u24}-arm64-{ubuntu}", "ARM64", f"{u24}-arm64"),
            (f"{u22}-{ubuntu}", "X86_64", u22),
            (f"{u22}-arm64-{ubuntu}", "ARM64", f"{u22}-arm64"),
        ],
    }


def images(url: str, versions: tuple[str, ...] = GKE_VERSIONS) -> dict[str, list[dict[str, Any]]]:
    """The node images of GKE ``versions`` by project (``1.34.1-gke.1829001``; a bare
    Kubernetes version gets build 1000000), the older build of each line deprecated."""
    out: dict[str, list[dict[str, Any]]] = {COS_PROJECT: [], UBUNTU_PROJECT: []}
    for age, (cos, ubuntu) in enumerate(_BUILDS):
        for version in versions:
            gke = version.removeprefix("v")
            gke = gke if "-gke." in gke else f"{gke}-gke.1000000"
            for project, rows in _image_names(gke, cos, ubuntu).items():
                for name, arch, family in rows:
                    image: dict[str, Any] = {
                        "kind": "compute#image",
                        "id": resource_id(name),
                        "name": name,
                        "family": family,
                        "architecture": arch,
                        "creationTimestamp": f"2026-0{4 - age}-16T10:00:00.000-07:00",
                        "status": "READY",
                        "sourceType": "RAW",
                        "diskSizeGb": "100",
                        "labels": {"kubernetes-version": gke.split("-")[0].replace(".", "-")},
                        "selfLink": f"{url}/projects/{project}/global/images/{name}",
                    }
                    if age:
                        image["deprecated"] = {"state": "DEPRECATED"}
                    out[project].append(image)
    return out


def subnetworks(project: str, region: str, url: str) -> dict[str, dict[str, Any]]:
    """The cluster's node subnetwork, with GKE's secondary ranges for pods and services."""
    ranges = {"pods": "10.4.0.0/14", "services": "10.8.0.0/20"}
    return {
        "default": {
            "kind": "compute#subnetwork",
            "id": resource_id("default"),
            "name": "default",
            "region": f"{url}/projects/{project}/regions/{region}",
            "network": f"{url}/projects/{project}/global/networks/default",
            "ipCidrRange": "10.128.0.0/20",
            "gatewayAddress": "10.128.0.1",
            "privateIpGoogleAccess": True,
            "stackType": "IPV4_ONLY",
            "secondaryIpRanges": [
                {"rangeName": f"gke-{CLUSTER}-{kind}-1a2b3c4d", "ipCidrRange": cidr}
                for kind, cidr in ranges.items()
            ],
            "selfLink": f"{url}/projects/{project}/regions/{region}/subnetworks/default",
        }
    }


def _kube_env(region: str) -> str:
    labels = "cloud.google.com/gke-nodepool=default-pool,cloud.google.com/gke-os-distribution=cos"
    lines = {
        "CLUSTER_NAME": CLUSTER,
        "CLUSTER_LOCATION": region,
        "ENABLE_NODE_BFQ_IO_SCHEDULER": "'true'",
        "KUBERNETES_MASTER_NAME": "10.0.0.2",
        "CA_CERT": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==",
        "KUBELET_ARGS": "--v=2 --cloud-provider=external --cert-dir=/var/lib/kubelet/pki/ "
        f"--kubeconfig=/var/lib/kubelet/kubeconfig --max-pods=110 --node-labels={labels}",
        "NODE_TAINTS": "''",
        "VERSION": GKE_VERSIONS[1],
    }
    return "".join(f"{key}: {value}\n" for key, value in lines.items())


def instance_templates(project: str, region: str, url: str) -> dict[str, dict[str, Any]]:
    """The node pool's instance template, with the metadata, labels, network tags, network
    interface and service account GKE writes for its nodes."""
    metadata = {
        "kube-env": _kube_env(region),
        "kube-labels": "cloud.google.com/gke-nodepool=default-pool",
        "cluster-name": CLUSTER,
        "cluster-location": region,
        "cluster-uid": "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a6978",
        "configure-sh": "#!/usr/bin/env bash\n# GKE node setup\n",
        "user-data": "#cloud-config\nwrite_files: []\n",
        "gci-update-strategy": "update_disabled",
        "gci-metrics-enabled": "true",
        "disable-legacy-endpoints": "true",
        "kubelet-config": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n",
    }
    labels = {"goog-gke-node": "", "goog-k8s-cluster-name": CLUSTER}
    labels |= {"goog-k8s-node-pool-name": NODE_POOL, "goog-k8s-cluster-location": region}
    image = (
        f"{url}/projects/{COS_PROJECT}/global/images/gke-1341-gke1829001-cos-{_BUILDS[0][0]}-c-pre"
    )
    pods = {"ipCidrRange": "/24", "subnetworkRangeName": f"gke-{CLUSTER}-pods-1a2b3c4d"}
    properties = {
        "machineType": "e2-medium",
        "tags": {"items": [f"gke-{CLUSTER}-1a2b3c4d-node"]},
        "labels": labels,
        "metadata": {"items": [{"key": k, "value": v} for k, v in metadata.items()]},
        "networkInterfaces": [
            {
                "network": f"{url}/projects/{project}/global/networks/default",
                "subnetwork": f"{url}/projects/{project}/regions/{region}/subnetworks/default",
                "aliasIpRanges": [pods],
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
                    "sourceImage": image,
                },
            }
        ],
        "serviceAccounts": [{"email": "default", "scopes": _SCOPES}],
        "scheduling": {"automaticRestart": True, "onHostMaintenance": "MIGRATE"},
    }
    return {
        TEMPLATE: {
            "kind": "compute#instanceTemplate",
            "id": resource_id(TEMPLATE),
            "name": TEMPLATE,
            "creationTimestamp": "2026-11-30T09:00:00.000-07:00",
            "properties": properties,
            "selfLink": f"{url}/projects/{project}/global/instanceTemplates/{TEMPLATE}",
        }
    }


def node_pools(project: str, region: str, url: str) -> dict[tuple[str, str, str], Any]:
    """The GKE node pool (container v1 NodePool JSON) by (location, cluster, name)."""
    pool_zones = zone_names(region)[:3]
    pool = {
        "name": NODE_POOL,
        "status": "RUNNING",
        "version": GKE_VERSIONS[1],
        "config": {
            "machineType": "e2-medium",
            "diskSizeGb": 100,
            "diskType": "pd-balanced",
            "imageType": "COS_CONTAINERD",
            "serviceAccount": "default",
            "oauthScopes": _SCOPES,
        },
        "locations": pool_zones,
        "instanceGroupUrls": [
            f"{url}/projects/{project}/zones/{zone}/instanceGroupManagers/{TEMPLATE}-grp"
            for zone in pool_zones
        ],
    }
    return {(region, CLUSTER, NODE_POOL): pool}
