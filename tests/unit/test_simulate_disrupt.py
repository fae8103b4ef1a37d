"""`karpenter simulate`: the policy flags, and `--disrupt` on pending pods, drift, blocks and
expiration, end to end through the installed console script (KWOK catalog unless told)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.cli.disrupt import drift_check
from karpenter_core.cloudprovider.types import CloudProviderError
from karpenter_core.disruption.candidates import candidates
from karpenter_core.scheduling.snapshot import Snapshot
from tests.unit.disruption_fixtures import NOW, node, pool

pytestmark = pytest.mark.slow  # every test runs the karpenter command in a subprocess

KARPENTER = str(Path(sys.executable).parent / "karpenter")

NODEPOOL = """---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: %(name)s}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      %(expire)s
      requirements:
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
  disruption:
    consolidationPolicy: %(policy)s
    consolidateAfter: %(after)s
    budgets: [{nodes: "100%%"}]
"""

NODE = """---
apiVersion: v1
kind: Node
metadata:
  name: %(name)s
  creationTimestamp: "%(created)s"
  labels:
    karpenter.sh/nodepool: %(pool)s
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: c-%(cpu)dx-amd64-linux
    topology.kubernetes.io/zone: test-zone-a
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: %(name)s
spec:
  providerID: kwok://%(name)s
status:
  capacity: {cpu: "%(cpu)d", memory: %(memory)dGi, pods: "110"}
  allocatable: {cpu: "%(cpu)d", memory: %(memory)dGi, pods: "110"}
"""

POD = """---
apiVersion: v1
kind: Pod
metadata:
  name: %(name)s
  namespace: shop
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-rs, uid: u1, controller: true}]
spec:
  %(bind)s
  containers:
  - name: app
    image: registry.k8s.io/pause:3.9
    resources: {requests: {cpu: "1", memory: 1Gi}}
"""


def nodepool(
    name: str = "default", policy: str = "WhenEmptyOrUnderutilized", after: str = "0s", expire=""
) -> str:
    expire_after = f"expireAfter: {expire}" if expire else ""
    return NODEPOOL % {"name": name, "policy": policy, "after": after, "expire": expire_after}


def kwok_node(
    name: str, cpu: int, pool_name: str = "default", age: timedelta = timedelta(hours=1)
) -> str:
    created = (datetime.now(UTC) - age).strftime("%Y-%m-%dT%H:%M:%SZ")
    return NODE % {
        "name": name,
        "cpu": cpu,
        "memory": 2 * cpu,
        "pool": pool_name,
        "created": created,
    }


def pods(names: list[str], on: str | None) -> str:
    bind = f"nodeName: {on}" if on else ""
    return "".join(POD % {"name": name, "bind": bind} for name in names)


def simulate(tmp_path: Path, manifests: str, *args: str, env: dict[str, str] | None = None) -> Any:
    path = tmp_path / "cluster.yaml"
    path.write_text(manifests)
    result = subprocess.run(
        [KARPENTER, "simulate", "-o", "json", "-f", str(path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# --- policy flags --------------------------------------------------------------------------------

POLICY_SCENARIO = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
        - key: node.kubernetes.io/instance-type
          operator: In
          values: [c-1x-amd64-linux, c-2x-amd64-linux, c-4x-amd64-linux]
          minValues: 3
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: web}}
    spec:
      affinity:
        nodeAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            preference:
              matchExpressions: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]
      containers:
      - name: app
        resources: {requests: {cpu: 1500m, memory: 1Gi}}
"""


def test_min_values_policy_flag_decides_whether_min_values_may_be_relaxed(tmp_path):
    # 3 CPU fit only c-2x and c-4x of the three types minValues asks for.
    strict = simulate(tmp_path, POLICY_SCENARIO)
    assert strict["nodeclaims"] == []
    assert all("minValues" in u["reason"] for u in strict["unschedulable"])
    relaxed = simulate(tmp_path, POLICY_SCENARIO, "--min-values-policy", "BestEffort")
    assert relaxed["unschedulable"] == []
    assert [c["instance_type"] for c in relaxed["nodeclaims"]] == ["c-4x-amd64-linux"]


def test_preference_policy_flag_decides_whether_preferences_count(tmp_path):
    args = ("--min-values-policy", "BestEffort")
    respect = simulate(tmp_path, POLICY_SCENARIO, *args, "--preference-policy", "Respect")
    ignore = simulate(tmp_path, POLICY_SCENARIO, *args, "--preference-policy", "Ignore")
    assert [c["capacity_type"] for c in respect["nodeclaims"]] == ["on-demand"]
    assert [c["capacity_type"] for c in ignore["nodeclaims"]] == ["spot"]
    assert ignore["summary"]["cost_per_hour"] < respect["summary"]["cost_per_hour"]


def test_policies_come_from_the_controllers_environment_variables(tmp_path):
    env = {**os.environ, "PREFERENCE_POLICY": "Ignore", "MIN_VALUES_POLICY": "BestEffort"}
    report = simulate(tmp_path, POLICY_SCENARIO, env=env)
    assert [c["capacity_type"] for c in report["nodeclaims"]] == ["spot"]


def test_a_policy_flag_with_an_unknown_value_is_a_clear_error(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(POLICY_SCENARIO)
    result = subprocess.run(
        [KARPENTER, "simulate", "-f", str(path), "--preference-policy", "Sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "--preference-policy" in result.stderr and "Traceback" not in result.stderr


# --- pending pods --------------------------------------------------------------------------------


@pytest.mark.parametrize("pending", [3, 6])
def test_pending_pods_are_counted_once_bound_or_pending_alike(tmp_path, pending):
    # Six 1-CPU pods on a c-32x, some of them written as pending: provisioning places them on
    # the c-32x, and disruption replaces it with the c-8x the same pods written as bound get,
    # each pod once.
    def cluster(waiting: int) -> str:
        names = [f"web-{i}" for i in range(6)]
        return (
            nodepool()
            + kwok_node("empty-1", 4)
            + kwok_node("big-1", 32)
            + pods(names[:waiting], None)
            + pods(names[waiting:], "big-1")
        )

    bound = simulate(tmp_path, cluster(0), "--disrupt")["disruption"]
    mixed = simulate(tmp_path, cluster(pending), "--disrupt")["disruption"]
    assert [(d["reason"], d["nodes"]) for d in mixed] == [
        ("empty", ["empty-1"]),
        ("underutilized", ["big-1"]),
    ]
    (replacement,) = mixed[1]["replacements"]
    assert replacement["instance_type"] == "c-8x-amd64-linux"
    assert sorted(replacement["pods"]) == [f"shop/web-{i}" for i in range(6)]
    assert mixed == bound


# --- drift ---------------------------------------------------------------------------------------

AWS_DRIFT = """
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: default}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: demo}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
      - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}
  disruption:
    consolidateAfter: Never
    budgets: [{nodes: "100%%"}]
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-abcde
  annotations:
    karpenter.k8s.aws/ec2nodeclass-hash: "%(hash)s"
    karpenter.k8s.aws/ec2nodeclass-hash-version: py-v1
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements: []
status:
  providerID: aws:///us-east-1a/i-0123456789abcdef0
---
apiVersion: v1
kind: Node
metadata:
  name: ip-10-0-0-1.ec2.internal
  labels:
    karpenter.sh/nodepool: default
    karpenter.sh/initialized: "true"
    karpenter.sh/capacity-type: on-demand
    node.kubernetes.io/instance-type: m5.large
    topology.kubernetes.io/zone: us-east-1a
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
spec:
  providerID: aws:///us-east-1a/i-0123456789abcdef0
status:
  capacity: {cpu: "2", memory: 8Gi, pods: "29"}
  allocatable: {cpu: 1930m, memory: 7Gi, pods: "29"}
"""


def _current_hash() -> str:
    from karpenter_aws.nodeclass import EC2NodeClass, nodeclass_hash

    spec = {
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
    }
    return nodeclass_hash(
        EC2NodeClass.model_validate({"metadata": {"name": "x"}, "spec": spec}).spec
    )


def test_a_nodeclaim_with_a_stale_nodeclass_hash_is_drifted(tmp_path):
    args = ("--disrupt", "--provider", "aws", "--region", "us-east-1")
    stale = simulate(tmp_path, AWS_DRIFT % {"hash": "stale"}, *args)
    assert [(d["reason"], d["drift_reason"], d["nodes"]) for d in stale["disruption"]] == [
        ("drifted", "NodeClassDrift", ["ip-10-0-0-1.ec2.internal"])
    ]
    current = simulate(tmp_path, AWS_DRIFT % {"hash": _current_hash()}, *args)
    assert current["disruption"] == []


class _FailingProvider:
    """A provider whose drift check breaks (only what ``drift_check`` calls)."""

    name = "failing"

    def is_drifted(self, nodeclaim: NodeClaim) -> str:
        raise CloudProviderError("the drift API is down")


def test_a_failing_drift_check_is_noted_and_the_node_is_not_drifted():
    claim = NodeClaim.model_validate(
        {
            "metadata": {"name": "default-x"},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"providerID": "example://a"},
        }
    )
    (candidate,), _ = candidates(Snapshot(nodepools=[pool()], nodes=[node("a")]), NOW)
    notes: list[str] = []
    drifted = drift_check(_FailingProvider(), [claim], notes)  # type: ignore[arg-type]
    assert drifted(candidate) == ""
    assert drifted(candidate) == ""  # asked once per node
    assert notes == [
        "NodeClaim default-x: the failing provider's drift check failed "
        "(CloudProviderError: the drift API is down); taken as not drifted"
    ]


# --- blocks --------------------------------------------------------------------------------------


def test_every_node_left_alone_is_listed_with_the_reason(tmp_path):
    started = datetime.now(UTC)
    event = (started - timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    claim = f"""---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {{name: waiting-claim}}
spec:
  nodeClassRef: {{group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}}
  requirements: []
status:
  providerID: kwok://waiting-1
  lastPodEventTime: "{event}"
"""
    manifests = (
        nodepool("waiting", after="10m")
        + nodepool("emptyonly", policy="WhenEmpty")
        + nodepool("never", after="Never")
        + kwok_node("waiting-1", 4, "waiting")
        + kwok_node("busy-1", 4, "emptyonly")
        + kwok_node("never-1", 4, "never")
        + pods(["a-0"], "waiting-1")
        + pods(["b-0"], "busy-1")
        + claim
        # Where the input holds NodeClaims, a Node without its own is not Karpenter's.
        + claim.replace("waiting-claim", "busy-claim").replace("waiting-1", "busy-1")
        + claim.replace("waiting-claim", "never-claim").replace("waiting-1", "never-1")
    )
    report = simulate(tmp_path, manifests, "--disrupt")
    took = (datetime.now(UTC) - started).total_seconds()
    assert report["disruption"] == []
    blocked = report["disruption_blocked"]
    reason = re.fullmatch(
        r"consolidateAfter \(10m\) has not elapsed since the last pod event \((\d+)s ago\)",
        blocked["waiting-1"],
    )
    assert reason, blocked["waiting-1"]
    assert 11 <= int(reason.group(1)) <= 13 + took, "the age of the last pod event"
    assert blocked["busy-1"] == (
        "NodePool emptyonly has consolidationPolicy WhenEmpty and the node has 1 pod(s) to move"
    )
    assert blocked["never-1"] == "NodePool never has consolidateAfter Never"


# --- expiration ----------------------------------------------------------------------------------


def test_an_expired_node_is_deleted_and_the_capacity_its_pods_need_is_not_saved(tmp_path):
    manifests = (
        nodepool(after="Never", expire="720h")
        + kwok_node("old-1", 8, age=timedelta(days=31))
        + pods([f"web-{i}" for i in range(5)], "old-1")
    )
    report = simulate(tmp_path, manifests, "--disrupt")
    (command,) = report["disruption"]
    assert (command["reason"], command["nodes"], command["replacements"]) == (
        "expired",
        ["old-1"],
        [],
    )
    (launch,) = command["provisioned"]
    assert sorted(launch["pods"]) == [f"shop/web-{i}" for i in range(5)]
    node_price = 0.21718  # c-8x-amd64-linux on-demand in the KWOK catalog
    assert command["savings_per_hour"] == pytest.approx(node_price - launch["price"], abs=1e-6)
    assert command["savings_per_hour"] < node_price
