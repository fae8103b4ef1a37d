"""User data per AMI family: content, merging with spec.userData, and refusing bad user data."""

from __future__ import annotations

import email.parser
import email.policy
import tomllib
from datetime import date, datetime
from typing import Any

import pytest
import yaml

from karpenter_aws.nodeclass import EC2NodeClass, KubeletConfiguration
from karpenter_aws.userdata import (
    CONTENT_TYPE_NODECONFIG,
    CONTENT_TYPE_SHELL,
    BootstrapOptions,
    UserDataError,
    build_user_data,
    to_toml,
)
from karpenter_core.apis.v1.common import Taint
from karpenter_core.sdk.launch import registration_taint

CA = "LS0tLS1CRUdJTi1DRVJUSUZJQ0FURS0tLS0t"
ENDPOINT = "https://ABCD.gr7.us-east-1.eks.amazonaws.com"
LABELS = {"karpenter.sh/nodepool": "default", "team": "a"}


def node_class(
    alias: str = "al2023@latest", user_data: str | None = None, **spec: Any
) -> EC2NodeClass:
    return EC2NodeClass.from_manifest(
        {
            "metadata": {"name": "default"},
            "spec": {
                "subnetSelectorTerms": [{"tags": {"k": "v"}}],
                "securityGroupSelectorTerms": [{"tags": {"k": "v"}}],
                "amiSelectorTerms": [{"alias": alias}],
                "role": "NodeRole",
                **({"userData": user_data} if user_data is not None else {}),
                **spec,
            },
        }
    )


def options(nc: EC2NodeClass | None = None, **overrides: Any) -> BootstrapOptions:
    kwargs: dict[str, Any] = {
        "cluster_name": "test-cluster",
        "cluster_endpoint": ENDPOINT,
        "ca_bundle": CA,
        "service_cidr": "10.100.0.0/16",
        "labels": LABELS,
        "taints": [Taint(key="dedicated", value="gpu", effect="NoSchedule")],
    }
    kwargs.update(overrides)
    return BootstrapOptions.for_node_class(nc or node_class(), **kwargs)


def mime_parts(text: str) -> list[tuple[str, str]]:
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    assert message.is_multipart()
    assert message.get_boundary() == "//"
    assert not message.defects
    return [(part.get("Content-Type"), part.get_payload()) for part in message.get_payload()]


# AL2023


def node_config(text: str) -> dict[str, Any]:
    parts = mime_parts(text)
    content_type, content = parts[-1]
    assert content_type == CONTENT_TYPE_NODECONFIG
    assert content.startswith("# Karpenter Generated NodeConfig\n")
    return yaml.safe_load(content)


def test_al2023_node_config() -> None:
    nc = node_class(
        kubelet={
            "maxPods": 58,
            "kubeReserved": {"cpu": "80m"},
            "evictionHard": {"memory.available": "5%"},
            "cpuCFSQuota": False,
        },
        instanceStorePolicy="RAID0",
    )
    config = node_config(build_user_data("AL2023", options(nc, cluster_dns=["10.100.0.10"])))
    assert config["apiVersion"] == "node.eks.aws/v1alpha1"
    assert config["kind"] == "NodeConfig"
    assert config["spec"]["cluster"] == {
        "name": "test-cluster",
        "apiServerEndpoint": ENDPOINT,
        "certificateAuthority": CA,
        "cidr": "10.100.0.0/16",
    }
    kubelet = config["spec"]["kubelet"]
    assert kubelet["config"] == {
        "maxPods": 58,
        "kubeReserved": {"cpu": "80m"},
        "evictionHard": {"memory.available": "5%"},
        "cpuCFSQuota": False,
        "clusterDNS": ["10.100.0.10"],
        "registerWithTaints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
        ],
    }
    assert kubelet["flags"] == ['--node-labels="karpenter.sh/nodepool=default,team=a"']
    assert config["spec"]["instance"] == {"localStorage": {"strategy": "RAID0"}}


def test_al2023_kubelet_cluster_dns_wins_and_registration_taint_is_not_doubled() -> None:
    nc = node_class(kubelet={"clusterDNS": ["172.20.0.10"]})
    opts = options(nc, cluster_dns=["10.100.0.10"], taints=[registration_taint()])
    config = node_config(build_user_data("AL2023", opts))
    assert config["spec"]["kubelet"]["config"] == {
        "clusterDNS": ["172.20.0.10"],
        "registerWithTaints": [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}],
    }


def test_al2023_without_labels_or_kubelet() -> None:
    opts = options(labels={}, taints=[])
    config = node_config(build_user_data("AL2023", opts))
    assert "flags" not in config["spec"]["kubelet"]
    assert "instance" not in config["spec"]
    assert len(mime_parts(build_user_data("AL2023", opts))) == 1


def test_al2023_merges_shell_script_user_data_first() -> None:
    script = "#!/bin/bash\necho hello > /tmp/hello\n"
    parts = mime_parts(build_user_data("AL2023", options(node_class(user_data=script))))
    assert parts[0] == (CONTENT_TYPE_SHELL, script.rstrip("\n"))
    assert parts[1][0] == CONTENT_TYPE_NODECONFIG


def test_al2023_merges_a_user_node_config() -> None:
    user = (
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
        "spec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n"
    )
    parts = mime_parts(build_user_data("AL2023", options(node_class(user_data=user))))
    assert parts[0][0] == CONTENT_TYPE_NODECONFIG
    assert yaml.safe_load(parts[0][1])["spec"]["kubelet"]["config"] == {
        "shutdownGracePeriod": "30s"
    }
    assert len(parts) == 2


def test_al2023_keeps_every_part_of_a_user_mime_archive() -> None:
    user = (
        "MIME-Version: 1.0\n"
        'Content-Type: multipart/mixed; boundary="BOUNDARY"\n\n'
        "--BOUNDARY\n"
        "Content-Type: application/node.eks.aws\n\n"
        "apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n\n"
        "--BOUNDARY\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        "#!/bin/bash\necho one\n\n"
        "--BOUNDARY--\n"
    )
    parts = mime_parts(build_user_data("AL2023", options(node_class(user_data=user))))
    assert [content_type for content_type, _ in parts] == [
        CONTENT_TYPE_NODECONFIG,
        CONTENT_TYPE_SHELL,
        CONTENT_TYPE_NODECONFIG,
    ]
    assert "echo one" in parts[1][1]


def test_al2_keeps_the_headers_of_user_parts() -> None:
    user = (
        'Content-Type: multipart/mixed; boundary="==B=="\n\n'
        "--==B==\n"
        "Content-Type: text/x-shellscript\n"
        "Content-Transfer-Encoding: base64\n\n"
        "IyEvYmluL2Jhc2gKZWNobyBoaQo=\n"
        "--==B==--\n"
    )
    text = build_user_data("AL2", options(node_class(alias="al2@latest", user_data=user)))
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text)
    first = message.get_payload()[0]
    assert first["Content-Transfer-Encoding"] == "base64"
    assert first.get_payload(decode=True) == b"#!/bin/bash\necho hi\n"
    assert len(message.get_payload()) == 2


@pytest.mark.parametrize(
    "user",
    [
        "MIME-Version: 1.0\nContent-Type: text/plain\n\nhello\n",
        'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="B"\n\n--B\n'
        "Content-Type: text/x-shellscript\n\necho never closed\n",
    ],
)
def test_al2023_bad_mime_names_the_field(user: str) -> None:
    with pytest.raises(UserDataError, match=r"EC2NodeClass 'default' spec\.userData: "):
        build_user_data("AL2023", options(node_class(user_data=user)))


def test_al2023_needs_the_service_cidr() -> None:
    with pytest.raises(ValueError, match="service CIDR"):
        build_user_data("AL2023", options(service_cidr=None))


# Bottlerocket


def test_bottlerocket_settings() -> None:
    nc = node_class(
        alias="bottlerocket@latest",
        kubelet={
            "maxPods": 110,
            "systemReserved": {"memory": "100Mi"},
            "kubeReserved": {"cpu": "100m"},
            "evictionHard": {"memory.available": "100Mi"},
            "evictionSoft": {"nodefs.available": "15%"},
            "evictionSoftGracePeriod": {"nodefs.available": "2m"},
            "evictionMaxPodGracePeriod": 30,
            "imageGCHighThresholdPercent": 90,
            "imageGCLowThresholdPercent": 60,
            "cpuCFSQuota": True,
        },
    )
    document = tomllib.loads(
        build_user_data("Bottlerocket", options(nc, cluster_dns=["10.1.0.10"]))
    )
    assert document == {
        "settings": {
            "kubernetes": {
                "cluster-name": "test-cluster",
                "api-server": ENDPOINT,
                "cluster-certificate": CA,
                "cluster-dns-ip": "10.1.0.10",
                "max-pods": 110,
                "eviction-max-pod-grace-period": 30,
                "cpu-cfs-quota-enforced": True,
                "image-gc-high-threshold-percent": "90",
                "image-gc-low-threshold-percent": "60",
                "system-reserved": {"memory": "100Mi"},
                "kube-reserved": {"cpu": "100m"},
                "eviction-hard": {"memory.available": "100Mi"},
                "eviction-soft": {"nodefs.available": "15%"},
                "eviction-soft-grace-period": {"nodefs.available": "2m"},
                "node-labels": LABELS,
                "node-taints": {
                    "dedicated": ["gpu:NoSchedule"],
                    "karpenter.sh/unregistered": [":NoExecute"],
                },
            }
        }
    }


def test_bottlerocket_merges_user_toml_and_karpenter_wins() -> None:
    user = """
[settings.kubernetes]
cluster-name = "wrong"
max-pods = 5
image-gc-low-threshold-percent = "10"

[settings.kubernetes.node-labels]
team = "b"
extra = "yes"

[settings.kubernetes.node-taints]
mine = ["x:NoSchedule"]

[settings.host-containers.admin]
enabled = true

[settings.kernel.sysctl]
"net.ipv4.ip_forward" = "1"

[[settings.container-registry.mirrors]]
registry = "docker.io"
endpoint = ["https://mirror.example.com"]
"""
    nc = node_class(alias="bottlerocket@latest", user_data=user, kubelet={"maxPods": 29})
    document = tomllib.loads(build_user_data("Bottlerocket", options(nc)))
    settings = document["settings"]
    kubernetes = settings["kubernetes"]
    assert kubernetes["cluster-name"] == "test-cluster"
    assert kubernetes["max-pods"] == 29
    assert kubernetes["image-gc-low-threshold-percent"] == "10"
    assert kubernetes["node-labels"] == {
        "team": "a",
        "extra": "yes",
        "karpenter.sh/nodepool": "default",
    }
    assert kubernetes["node-taints"] == {
        "dedicated": ["gpu:NoSchedule"],
        "karpenter.sh/unregistered": [":NoExecute"],
    }
    assert settings["host-containers"] == {"admin": {"enabled": True}}
    assert settings["kernel"] == {"sysctl": {"net.ipv4.ip_forward": "1"}}
    assert settings["container-registry"] == {
        "mirrors": [{"registry": "docker.io", "endpoint": ["https://mirror.example.com"]}]
    }


def test_bottlerocket_raid0_bootstrap_command() -> None:
    nc = node_class(alias="bottlerocket@latest", instanceStorePolicy="RAID0")
    document = tomllib.loads(build_user_data("Bottlerocket", options(nc)))
    command = document["settings"]["bootstrap-commands"]["000-mount-instance-storage"]
    assert command["mode"] == "always"
    assert command["essential"] is True
    assert command["commands"][0] == ["apiclient", "ephemeral-storage", "init"]


@pytest.mark.parametrize(
    ("user", "detail"),
    [
        ("[settings.kubernetes\nmax-pods = 1", "must be TOML"),
        ("settings = 1", "'settings' must be a TOML table"),
        ("[settings]\nkubernetes = 'x'", "'settings.kubernetes' must be a TOML table"),
        ("[settings.kubernetes]\nnode-labels = 3", "node-labels' must be a TOML table"),
    ],
)
def test_bottlerocket_bad_user_data_names_the_field(user: str, detail: str) -> None:
    nc = node_class(alias="bottlerocket@latest", user_data=user)
    with pytest.raises(UserDataError) as raised:
        build_user_data("Bottlerocket", options(nc))
    assert str(raised.value).startswith("EC2NodeClass 'default' spec.userData: ")
    assert detail in str(raised.value)
    assert isinstance(raised.value, ValueError)


# AL2


def test_al2_bootstrap_script() -> None:
    nc = node_class(
        alias="al2@latest",
        kubelet={
            "maxPods": 20,
            "podsPerCore": 2,
            "systemReserved": {"memory": "1Gi", "cpu": "1"},
            "evictionHard": {"nodefs.available": "10%", "memory.available": "5%"},
            "evictionSoft": {"memory.available": "10%"},
            "evictionSoftGracePeriod": {"memory.available": "1m"},
            "evictionMaxPodGracePeriod": 10,
            "imageGCHighThresholdPercent": 80,
            "imageGCLowThresholdPercent": 70,
            "cpuCFSQuota": True,
        },
        instanceStorePolicy="RAID0",
    )
    parts = mime_parts(build_user_data("AL2", options(nc, cluster_dns=["10.100.0.10"])))
    assert len(parts) == 1
    content_type, script = parts[0]
    assert content_type == CONTENT_TYPE_SHELL
    assert script.startswith("#!/bin/bash -xe\n")
    assert (
        f"/etc/eks/bootstrap.sh 'test-cluster' --apiserver-endpoint '{ENDPOINT}' "
        f"--b64-cluster-ca '{CA}'" in script
    )
    assert "--dns-cluster-ip '10.100.0.10'" in script
    assert "--use-max-pods false" in script
    assert "--local-disks raid0" in script
    assert "--ip-family ipv6" not in script
    extra = script.split("--kubelet-extra-args '")[1].split("'")[0]
    assert extra.split(" ") == [
        '--node-labels="karpenter.sh/nodepool=default,team=a"',
        '--register-with-taints="dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"',
        "--max-pods=20",
        "--pods-per-core=2",
        '--system-reserved="cpu=1,memory=1Gi"',
        '--eviction-hard="memory.available<5%,nodefs.available<10%"',
        '--eviction-soft="memory.available<10%"',
        '--eviction-soft-grace-period="memory.available=1m"',
        "--eviction-max-pod-grace-period=10",
        "--image-gc-high-threshold=80",
        "--image-gc-low-threshold=70",
        "--cpu-cfs-quota=true",
    ]


def test_al2_ipv6_and_user_script() -> None:
    nc = node_class(alias="al2@latest", user_data="#!/bin/bash\necho first\n")
    parts = mime_parts(build_user_data("AL2", options(nc, cluster_dns=["fd00::a"])))
    assert parts[0] == (CONTENT_TYPE_SHELL, "#!/bin/bash\necho first")
    assert "--ip-family ipv6" in parts[1][1]
    assert "--use-max-pods" not in parts[1][1]


def test_al2_quotes_single_quotes_for_the_shell() -> None:
    script = mime_parts(build_user_data("AL2", options(cluster_name="it's")))[0][1]
    assert "/etc/eks/bootstrap.sh 'it'\"'\"'s'" in script


def test_max_pods_from_the_instance_type_unless_kubelet_sets_it() -> None:
    opts = options(node_class(alias="al2@latest"), max_pods=58)
    assert opts.kubelet == KubeletConfiguration(max_pods=58)
    set_by_user = node_class(alias="al2@latest", kubelet={"maxPods": 10, "podsPerCore": 1})
    opts = options(set_by_user, max_pods=58)
    assert opts.kubelet is not None
    assert opts.kubelet.max_pods == 10
    assert opts.kubelet.pods_per_core == 1


# Windows and Custom


def test_windows_powershell() -> None:
    nc = node_class(alias="windows2022@latest", user_data="Write-Host hi")
    text = build_user_data("Windows2022", options(nc, cluster_dns=["10.100.0.10"]))
    lines = text.split("\n")
    assert lines[0] == "<powershell>"
    assert lines[1] == "Write-Host hi"
    assert lines[-1] == "</powershell>"
    assert f"-EKSClusterName 'test-cluster' -APIServerEndpoint '{ENDPOINT}'" in text
    assert f"-Base64ClusterCA '{CA}'" in text
    assert "-DNSClusterIP '10.100.0.10'" in text
    assert "karpenter.sh/unregistered:NoExecute" in text


def test_custom_is_user_data_unchanged() -> None:
    user = "anything at all\n  kept: as is"
    nc = node_class(alias="al2023@latest", user_data=user, amiFamily="Custom")
    assert build_user_data("Custom", options(nc)) == user
    assert build_user_data("Custom", options(node_class(amiFamily="Custom"))) == ""


def test_unknown_family() -> None:
    with pytest.raises(ValueError, match="unknown AMI family 'Ubuntu'"):
        build_user_data("Ubuntu", options())


# TOML writer


def test_to_toml_round_trips() -> None:
    document = {
        "title": 'quote " and \\ and \n newline and \x01 and \x7f',
        "flag": False,
        "count": -3,
        "ratio": 0.5,
        "huge": float("inf"),
        "day": date(2024, 1, 2),
        "when": datetime(2024, 1, 2, 3, 4, 5),
        "list": [1, 2, 3],
        "nested_list": [["a", "b"], [1]],
        "mixed": [{"a": 1}, 2],
        "empty": {},
        "a": {"b": {"c": {"dotted.key/x": "v"}}, "scalar": 1},
        "servers": [{"name": "one", "meta": {"rack": 1}}, {"name": "two"}],
    }
    assert tomllib.loads(to_toml(document)) == document
