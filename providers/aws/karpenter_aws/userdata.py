"""Instance user data per AMI family: how a new instance joins the cluster.

AL2023 gets a MIME multi-part archive ending in a nodeadm ``NodeConfig``; Bottlerocket a TOML
settings document; AL2 a MIME archive ending in an ``/etc/eks/bootstrap.sh`` script; Windows a
PowerShell script; Custom the EC2NodeClass's ``spec.userData`` unchanged. The user's own
``spec.userData`` is merged in (Karpenter's settings win). Pure: the functions return plain text,
which the caller base64-encodes into the launch template.
"""

from __future__ import annotations

import email.message
import email.parser
import email.policy
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, time
from typing import Any, cast

import yaml

from karpenter_aws.nodeclass import (
    AMI_FAMILY_AL2,
    AMI_FAMILY_AL2023,
    AMI_FAMILY_BOTTLEROCKET,
    AMI_FAMILY_CUSTOM,
    AMI_FAMILY_WINDOWS2019,
    AMI_FAMILY_WINDOWS2022,
    AMI_FAMILY_WINDOWS2025,
    EC2NodeClass,
    KubeletConfiguration,
)
from karpenter_core.apis.v1.common import Taint
from karpenter_core.sdk.kubelet import kubelet_flags, taint_text
from karpenter_core.sdk.launch import with_registration_taint

__all__ = [
    "BOUNDARY",
    "CONTENT_TYPE_NODECONFIG",
    "CONTENT_TYPE_SHELL",
    "NODECONFIG_API_VERSION",
    "BootstrapOptions",
    "UserDataError",
    "build_user_data",
    "to_toml",
]

BOUNDARY = "//"
"""The MIME boundary of the archives Karpenter writes."""
CONTENT_TYPE_SHELL = 'text/x-shellscript; charset="us-ascii"'
CONTENT_TYPE_NODECONFIG = "application/node.eks.aws"
NODECONFIG_API_VERSION = "node.eks.aws/v1alpha1"

_MIME_PREFIXES = ("MIME-Version:", "Content-Type:")
_WINDOWS_FAMILIES = (AMI_FAMILY_WINDOWS2019, AMI_FAMILY_WINDOWS2022, AMI_FAMILY_WINDOWS2025)


class UserDataError(ValueError):
    """The EC2NodeClass's ``spec.userData`` cannot be read in its AMI family's format."""


@dataclass(frozen=True, slots=True)
class BootstrapOptions:
    """What a node needs to join the cluster, and the EC2NodeClass settings user data carries.

    ``ca_bundle`` is the cluster CA as base64 (as EKS returns it); ``service_cidr`` is the
    cluster's service CIDR (AL2023 requires it); ``cluster_dns`` is used when the kubelet
    configuration does not set ``clusterDNS``. The registration taint is always added to
    ``taints``.
    """

    cluster_name: str
    cluster_endpoint: str
    ca_bundle: str | None = None
    service_cidr: str | None = None
    cluster_dns: Sequence[str] = ()
    kubelet: KubeletConfiguration | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Taint] = ()
    custom_user_data: str | None = None
    instance_store_policy: str | None = None
    node_class_name: str | None = None

    @classmethod
    def for_node_class(
        cls,
        node_class: EC2NodeClass,
        *,
        cluster_name: str,
        cluster_endpoint: str,
        ca_bundle: str | None = None,
        service_cidr: str | None = None,
        cluster_dns: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
        taints: Sequence[Taint] = (),
        max_pods: int | None = None,
    ) -> BootstrapOptions:
        """Options from an EC2NodeClass (kubelet, userData, instanceStorePolicy) and the cluster.

        ``max_pods`` (e.g. the instance type's pod capacity) applies when the kubelet
        configuration does not set ``maxPods``.
        """
        kubelet = node_class.spec.kubelet
        if max_pods is not None and (kubelet is None or kubelet.max_pods is None):
            kubelet = (kubelet or KubeletConfiguration()).model_copy(update={"max_pods": max_pods})
        return cls(
            cluster_name=cluster_name,
            cluster_endpoint=cluster_endpoint,
            ca_bundle=ca_bundle,
            service_cidr=service_cidr,
            cluster_dns=tuple(cluster_dns),
            kubelet=kubelet,
            labels=dict(labels or {}),
            taints=tuple(taints),
            custom_user_data=node_class.spec.user_data,
            instance_store_policy=node_class.spec.instance_store_policy,
            node_class_name=node_class.metadata.name,
        )

    def all_taints(self) -> list[Taint]:
        """``taints`` plus the registration taint (once)."""
        return with_registration_taint(self.taints)

    def dns_ips(self) -> list[str]:
        """The cluster DNS addresses: the kubelet's clusterDNS, else ``cluster_dns``."""
        if self.kubelet is not None and self.kubelet.cluster_dns:
            return list(self.kubelet.cluster_dns)
        return list(self.cluster_dns)

    def error(self, detail: str) -> UserDataError:
        """A UserDataError naming the EC2NodeClass and its spec.userData field."""
        owner = f"EC2NodeClass {self.node_class_name!r}" if self.node_class_name else "EC2NodeClass"
        return UserDataError(f"{owner} spec.userData: {detail}")


def build_user_data(ami_family: str, options: BootstrapOptions) -> str:
    """The user data (plain text, not base64) for an instance of ``ami_family``.

    Raises UserDataError when ``spec.userData`` is not valid in the family's format, and
    ValueError when AL2023 lacks the service CIDR.
    """
    if ami_family == AMI_FAMILY_AL2023:
        return _al2023(options)
    if ami_family == AMI_FAMILY_BOTTLEROCKET:
        return _bottlerocket(options)
    if ami_family == AMI_FAMILY_AL2:
        return _al2(options)
    if ami_family in _WINDOWS_FAMILIES:
        return _windows(options)
    if ami_family == AMI_FAMILY_CUSTOM:
        return options.custom_user_data or ""
    raise ValueError(f"unknown AMI family {ami_family!r}")


# MIME archives


def _is_mime(text: str) -> bool:
    return text.lstrip().startswith(_MIME_PREFIXES)


def _part(content_type: str, content: str) -> tuple[str, str]:
    return f"Content-Type: {content_type}", content


def _mime_parts(options: BootstrapOptions, text: str) -> list[tuple[str, str]]:
    """The (header lines, content) parts of a MIME multi-part archive."""
    message = email.parser.Parser(policy=email.policy.compat32).parsestr(text.lstrip())
    if not message.is_multipart():
        raise options.error(
            "MIME user data must be a multipart archive (Content-Type: multipart/mixed; "
            'boundary="...")'
        )
    payload = message.get_payload()
    if not isinstance(payload, list) or message.defects:
        raise options.error(
            "the MIME archive cannot be parsed: check the boundary lines and the headers"
        )
    parts = []
    # The payload of a multipart message is a list of messages.
    for part in cast("list[email.message.Message]", payload):
        if part.is_multipart():
            raise options.error("nested MIME multipart archives are not supported")
        content = part.get_payload()
        headers = "\n".join(f"{name}: {value}" for name, value in part.items())
        parts.append((headers or "Content-Type: text/plain", str(content)))
    return parts


def _archive(parts: Sequence[tuple[str, str]]) -> str:
    """A MIME multi-part archive of (header lines, content) ``parts``, boundary ``//``."""
    lines = [
        "MIME-Version: 1.0",
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"',
        "",
    ]
    for headers, content in parts:
        lines += [f"--{BOUNDARY}", headers, "", content.rstrip("\n")]
    lines.append(f"--{BOUNDARY}--")
    return "\n".join(lines) + "\n"


# AL2023: nodeadm NodeConfig


def _is_yaml_mapping(text: str) -> bool:
    try:
        return isinstance(yaml.safe_load(text), dict)
    except yaml.YAMLError:
        return False


def _al2023_user_parts(options: BootstrapOptions) -> list[tuple[str, str]]:
    text = options.custom_user_data or ""
    if not text.strip():
        return []
    if _is_mime(text):
        return _mime_parts(options, text)
    if _is_yaml_mapping(text):
        return [_part(CONTENT_TYPE_NODECONFIG, text)]
    return [_part(CONTENT_TYPE_SHELL, text)]


def _taint_dict(taint: Taint) -> dict[str, str]:
    out = {"key": taint.key, "effect": taint.effect}
    if taint.value:
        out["value"] = taint.value
    return out


def _node_labels_flag(labels: Mapping[str, str]) -> str | None:
    if not labels:
        return None
    joined = ",".join(f"{key}={labels[key]}" for key in sorted(labels))
    return f'--node-labels="{joined}"'


def _node_config(options: BootstrapOptions) -> dict[str, Any]:
    if not options.service_cidr:
        raise ValueError(
            "AL2023 user data needs the cluster's service CIDR (nodeadm's spec.cluster.cidr); "
            "set the service-cidr setting (SERVICE_CIDR)"
        )
    cluster: dict[str, Any] = {
        "name": options.cluster_name,
        "apiServerEndpoint": options.cluster_endpoint,
    }
    if options.ca_bundle:
        cluster["certificateAuthority"] = options.ca_bundle
    cluster["cidr"] = options.service_cidr
    kubelet_config: dict[str, Any] = {}
    if options.kubelet is not None:
        kubelet_config = options.kubelet.model_dump(mode="json", by_alias=True, exclude_none=True)
    dns = options.dns_ips()
    if dns:
        kubelet_config["clusterDNS"] = dns
    kubelet_config["registerWithTaints"] = [_taint_dict(t) for t in options.all_taints()]
    kubelet: dict[str, Any] = {"config": kubelet_config}
    flag = _node_labels_flag(options.labels)
    if flag is not None:
        kubelet["flags"] = [flag]
    spec: dict[str, Any] = {"cluster": cluster, "kubelet": kubelet}
    if options.instance_store_policy == "RAID0":
        spec["instance"] = {"localStorage": {"strategy": "RAID0"}}
    return {"apiVersion": NODECONFIG_API_VERSION, "kind": "NodeConfig", "spec": spec}


def _al2023(options: BootstrapOptions) -> str:
    config = yaml.safe_dump(_node_config(options), sort_keys=False, default_flow_style=False)
    parts = _al2023_user_parts(options)
    parts.append(_part(CONTENT_TYPE_NODECONFIG, "# Karpenter Generated NodeConfig\n" + config))
    return _archive(parts)


# AL2 and Windows: bootstrap scripts with kubelet flags


def _quoted(value: str) -> str:
    """``value`` in single quotes for a POSIX shell."""
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _ps_quoted(value: str) -> str:
    """``value`` in single quotes for PowerShell."""
    return "'" + value.replace("'", "''") + "'"


def _joined(name: str, values: Mapping[str, Any] | None, separator: str) -> str | None:
    if not values:
        return None
    joined = ",".join(f"{key}{separator}{values[key]}" for key in sorted(values))
    return f'{name}="{joined}"'


def _kubelet_flags(options: BootstrapOptions) -> list[str]:
    flags = [
        _node_labels_flag(options.labels),
        '--register-with-taints="' + ",".join(map(taint_text, options.all_taints())) + '"',
    ]
    kubelet = options.kubelet
    if kubelet is not None:
        flags += kubelet_flags(
            ("--max-pods", kubelet.max_pods), ("--pods-per-core", kubelet.pods_per_core)
        )
        flags += [
            _joined("--system-reserved", kubelet.system_reserved, "="),
            _joined("--kube-reserved", kubelet.kube_reserved, "="),
            _joined("--eviction-hard", kubelet.eviction_hard, "<"),
            _joined("--eviction-soft", kubelet.eviction_soft, "<"),
            _joined("--eviction-soft-grace-period", kubelet.eviction_soft_grace_period, "="),
        ]
        flags += kubelet_flags(
            ("--eviction-max-pod-grace-period", kubelet.eviction_max_pod_grace_period),
            ("--image-gc-high-threshold", kubelet.image_gc_high_threshold_percent),
            ("--image-gc-low-threshold", kubelet.image_gc_low_threshold_percent),
            ("--cpu-cfs-quota", kubelet.cpu_cfs_quota),
        )
    return [flag for flag in flags if flag]


def _eks_bootstrap_script(options: BootstrapOptions) -> str:
    command = [
        f"/etc/eks/bootstrap.sh {_quoted(options.cluster_name)} "
        f"--apiserver-endpoint {_quoted(options.cluster_endpoint)}"
        + (f" --b64-cluster-ca {_quoted(options.ca_bundle)}" if options.ca_bundle else "")
    ]
    dns = options.dns_ips()
    if dns and ":" in dns[0]:
        command.append("--ip-family ipv6")
    if dns:
        command.append(f"--dns-cluster-ip {_quoted(dns[0])}")
    if options.kubelet is not None and options.kubelet.max_pods is not None:
        command.append("--use-max-pods false")
    command.append(f"--kubelet-extra-args {_quoted(' '.join(_kubelet_flags(options)))}")
    if options.instance_store_policy == "RAID0":
        command.append("--local-disks raid0")
    return "\n".join(
        [
            "#!/bin/bash -xe",
            "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1",
            " \\\n".join(command),
        ]
    )


def _al2(options: BootstrapOptions) -> str:
    text = options.custom_user_data or ""
    parts: list[tuple[str, str]] = []
    if text.strip():
        parts = _mime_parts(options, text) if _is_mime(text) else [_part(CONTENT_TYPE_SHELL, text)]
    parts.append(_part(CONTENT_TYPE_SHELL, _eks_bootstrap_script(options)))
    return _archive(parts)


def _windows(options: BootstrapOptions) -> str:
    lines = ["<powershell>"]
    if options.custom_user_data:
        lines.append(options.custom_user_data.rstrip("\n"))
    lines.append(
        '[string]$EKSBootstrapScriptFile = "$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1"'
    )
    command = (
        f"& $EKSBootstrapScriptFile -EKSClusterName {_ps_quoted(options.cluster_name)} "
        f"-APIServerEndpoint {_ps_quoted(options.cluster_endpoint)}"
    )
    if options.ca_bundle:
        command += f" -Base64ClusterCA {_ps_quoted(options.ca_bundle)}"
    command += f" -KubeletExtraArgs {_ps_quoted(' '.join(_kubelet_flags(options)))}"
    dns = options.dns_ips()
    if dns:
        command += f" -DNSClusterIP {_ps_quoted(dns[0])}"
    lines += [command, "</powershell>"]
    return "\n".join(lines)


# Bottlerocket: TOML settings


def _bottlerocket_kubernetes(options: BootstrapOptions) -> dict[str, Any]:
    """Karpenter's ``settings.kubernetes`` entries (overriding the user's)."""
    settings: dict[str, Any] = {
        "cluster-name": options.cluster_name,
        "api-server": options.cluster_endpoint,
    }
    if options.ca_bundle:
        settings["cluster-certificate"] = options.ca_bundle
    dns = options.dns_ips()
    if dns:
        settings["cluster-dns-ip"] = dns[0]
    kubelet = options.kubelet
    if kubelet is not None:
        scalars: dict[str, Any] = {
            "max-pods": kubelet.max_pods,
            "eviction-max-pod-grace-period": kubelet.eviction_max_pod_grace_period,
            "cpu-cfs-quota-enforced": kubelet.cpu_cfs_quota,
        }
        if kubelet.image_gc_high_threshold_percent is not None:
            scalars["image-gc-high-threshold-percent"] = str(
                kubelet.image_gc_high_threshold_percent
            )
        if kubelet.image_gc_low_threshold_percent is not None:
            scalars["image-gc-low-threshold-percent"] = str(kubelet.image_gc_low_threshold_percent)
        maps = {
            "system-reserved": kubelet.system_reserved,
            "kube-reserved": kubelet.kube_reserved,
            "eviction-hard": kubelet.eviction_hard,
            "eviction-soft": kubelet.eviction_soft,
            "eviction-soft-grace-period": kubelet.eviction_soft_grace_period,
        }
        settings.update((key, value) for key, value in scalars.items() if value is not None)
        settings.update((key, dict(value)) for key, value in maps.items() if value)
    return settings


def _bottlerocket(options: BootstrapOptions) -> str:
    try:
        document = tomllib.loads(options.custom_user_data or "")
    except tomllib.TOMLDecodeError as error:
        raise options.error(f"Bottlerocket user data must be TOML: {error}") from None
    settings = document.setdefault("settings", {})
    if not isinstance(settings, dict):
        raise options.error("'settings' must be a TOML table")
    kubernetes = settings.setdefault("kubernetes", {})
    if not isinstance(kubernetes, dict):
        raise options.error("'settings.kubernetes' must be a TOML table")
    user_labels = kubernetes.get("node-labels", {})
    if not isinstance(user_labels, dict):
        raise options.error("'settings.kubernetes.node-labels' must be a TOML table")
    kubernetes.update(_bottlerocket_kubernetes(options))
    labels = {**user_labels, **options.labels}
    if labels:
        kubernetes["node-labels"] = labels
    taints: dict[str, list[str]] = {}
    for taint in options.all_taints():
        taints.setdefault(taint.key, []).append(f"{taint.value}:{taint.effect}")
    kubernetes["node-taints"] = taints
    if options.instance_store_policy == "RAID0":
        commands = settings.setdefault("bootstrap-commands", {})
        if not isinstance(commands, dict):
            raise options.error("'settings.bootstrap-commands' must be a TOML table")
        commands["000-mount-instance-storage"] = {
            "commands": [
                ["apiclient", "ephemeral-storage", "init"],
                [
                    "apiclient",
                    "ephemeral-storage",
                    "bind",
                    "--dirs",
                    "/var/lib/containerd",
                    "/var/lib/kubelet",
                    "/var/log/pods",
                ],
            ],
            "mode": "always",
            "essential": True,
        }
    return to_toml(document)


# TOML writing

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\t": "\\t",
    "\n": "\\n",
    "\f": "\\f",
    "\r": "\\r",
}


def _toml_string(value: str) -> str:
    out = []
    for char in value:
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + ", ".join(items) + " }" if value else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml_table(lines: list[str], path: tuple[str, ...], table: Mapping[str, Any]) -> None:
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    arrays = {k: v for k, v in table.items() if _is_table_array(v)}
    scalars = {k: v for k, v in table.items() if k not in tables and k not in arrays}
    for key, value in scalars.items():
        lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    for key, value in tables.items():
        sub = (*path, key)
        if not value or any(not isinstance(v, dict) for v in value.values()):
            lines += ["", f"[{'.'.join(map(_toml_key, sub))}]"]
        _toml_table(lines, sub, value)
    for key, items in arrays.items():
        sub = (*path, key)
        for item in items:
            lines += ["", f"[[{'.'.join(map(_toml_key, sub))}]]"]
            _toml_table(lines, sub, item)


def to_toml(document: Mapping[str, Any]) -> str:
    """``document`` (as ``tomllib`` parses it) written as TOML."""
    lines: list[str] = []
    _toml_table(lines, (), document)
    return "\n".join(lines).lstrip("\n") + "\n"
