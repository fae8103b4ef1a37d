"""`karpenter simulate` end to end, through the installed console script."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test runs the karpenter command in a subprocess

KARPENTER = str(Path(sys.executable).parent / "karpenter")

NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
      requirements:
%s
"""

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: %d
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        resources: {requests: {cpu: "%s", memory: 1Gi}}
"""

GOOD_REQUIREMENTS = (
    """        - {key: karpenter.kwok.sh/instance-family, operator: In, values: [c, m]}"""
)


def karpenter(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KARPENTER, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_default_scenario_places_all_50_pods_and_reports_the_cost():
    result = karpenter("simulate", "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["provider"] == "kwok"
    placed = [pod for claim in report["nodeclaims"] for pod in claim["pods"]]
    assert len(placed) == len(set(placed)) == 50
    assert report["unschedulable"] == []
    assert report["summary"]["pods"] == 50
    assert report["summary"]["cost_per_hour"] == pytest.approx(
        sum(claim["price"] for claim in report["nodeclaims"]), abs=1e-5
    )
    # Cheaper than upstream's single c-128x spot node (2.4324/h) for the same pods.
    assert report["summary"]["cost_per_hour"] < 2.4324
    for claim in report["nodeclaims"]:
        assert claim["instance_type"].split("-")[0] in ("c", "m")
        assert claim["capacity_type"] in ("spot", "on-demand")
        assert claim["instance_type_options"] >= 1


def test_table_output_names_the_nodes_and_the_cost():
    result = karpenter("simulate")
    assert result.returncode == 0, result.stderr
    assert "INSTANCE TYPE" in result.stdout
    assert "50 pod(s)" in result.stdout
    assert "cost " in result.stdout


def test_manifests_from_files_and_stdin(tmp_path):
    nodepool = write(tmp_path, "nodepool.yaml", NODEPOOL % GOOD_REQUIREMENTS)
    result = karpenter(
        "simulate", "-f", nodepool, "-f", "-", "-o", "json", stdin=DEPLOYMENT % (3, "1")
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    pods = sorted(p for claim in report["nodeclaims"] for p in claim["pods"])
    assert pods == ["shop/web-0", "shop/web-1", "shop/web-2"]


def test_pod_no_instance_type_can_hold_is_reported_with_a_reason(tmp_path):
    nodepool = write(tmp_path, "nodepool.yaml", NODEPOOL % GOOD_REQUIREMENTS)
    pods = write(tmp_path, "pods.yaml", DEPLOYMENT % (1, "300"))
    result = karpenter("simulate", "-f", nodepool, "-f", pods, "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["unschedulable"] == [
        {"pod": "shop/web-0", "reason": "no instance type has 300 CPU"}
    ]


def test_nodepool_no_instance_type_satisfies_is_a_warning(tmp_path):
    requirements = "        - {key: kubernetes.io/arch, operator: In, values: [s390x]}"
    nodepool = write(tmp_path, "nodepool.yaml", NODEPOOL % requirements)
    pods = write(tmp_path, "pods.yaml", DEPLOYMENT % (1, "1"))
    result = karpenter("simulate", "-f", nodepool, "-f", pods, "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["warnings"] == ["NodePool default: no instance type satisfies its requirements"]


BAD_INPUTS = {
    "malformed YAML": (
        "nodepool.yaml",
        "kind: NodePool\nmetadata: {name: x\n",
        ["nodepool.yaml", "line"],
    ),
    "unknown operator": (
        "nodepool.yaml",
        NODEPOOL % "        - {key: kubernetes.io/arch, operator: Matches, values: [amd64]}",
        ["nodepool.yaml", "NodePool default", "requirements[0].operator", "Matches"],
    ),
    "minValues above the number of values": (
        "nodepool.yaml",
        NODEPOOL
        % "        - {key: karpenter.kwok.sh/instance-family, operator: In, values: [c], minValues: 2}",
        ["nodepool.yaml", "NodePool default", "requirements[0]", "minValues"],
    ),
    "wildcard instance type": (
        "nodepool.yaml",
        NODEPOOL
        % "        - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.*]}",
        ["nodepool.yaml", "NodePool default", "requirements[0]", "m5.*", "instance-family"],
    ),
    "negative quantity": (
        "pods.yaml",
        DEPLOYMENT % (1, "-1"),
        ["pods.yaml", "Deployment shop/web", "resources.requests.cpu", "negative"],
    ),
    "unparsable quantity": (
        "pods.yaml",
        DEPLOYMENT % (1, "lots"),
        ["pods.yaml", "Deployment shop/web", "resources.requests.cpu", "'lots'"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_clear_line_and_a_non_zero_exit(tmp_path, case):
    name, text, expected = BAD_INPUTS[case]
    path = write(tmp_path, name, text)
    result = karpenter("simulate", "-f", path)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1, message
    for fragment in expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_missing_file(tmp_path):
    result = karpenter("simulate", "-f", str(tmp_path / "absent.yaml"))
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert "absent.yaml" in result.stderr
