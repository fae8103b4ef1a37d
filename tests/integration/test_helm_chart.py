"""The Helm charts with real helm and kubectl (built and cached with the control plane) against
the local kube-apiserver: lint, template with an EKS install's values, the schema's refusals,
server-side dry-run of the rendered objects, install, and the controller run with the rendered
Deployment's environment as the chart's ServiceAccount provisioning pods.

The controller runs the KWOK provider: the AWS provider would launch EC2 instances, which needs
a moto server and the registrar (providers/aws/tests/integration/test_aws_e2e.py does that).
The chart is EKS's, so the test binds the KWOK provider's ClusterRole to the chart's
ServiceAccount beside the chart's own RBAC.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from karpenter_conformance.cluster import build
from karpenter_conformance.controller import ControllerProcess
from karpenter_conformance.identity import service_account_kubeconfig
from karpenter_core import rbac
from karpenter_core.operator.kube import KubeClient
from tests.integration import controller_harness as harness

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "karpenter"
CRD_CHART = ROOT / "charts" / "karpenter-crd"
AWS_VALUES = CHART / "ci" / "aws-values.yaml"
ROLE_ARN = "arn:aws:iam::111122223333:role/KarpenterController-upgraded"
RELEASE = "karpenter-chart-test"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"
# The columns `kubectl get` shows for each resource in upstream Karpenter v1.x (name, priority:
# 1 only with -o wide).
UPSTREAM_COLUMNS = {
    ("karpenter.sh", "nodepools"): [
        ("Name", 0),
        ("NodeClass", 0),
        ("Nodes", 0),
        ("Ready", 0),
        ("Age", 0),
        ("Weight", 1),
        ("CPU", 1),
        ("Memory", 1),
    ],
    ("karpenter.sh", "nodeclaims"): [
        ("Name", 0),
        ("Type", 0),
        ("Capacity", 0),
        ("Zone", 0),
        ("Node", 0),
        ("Ready", 0),
        ("Age", 0),
        ("ImageID", 1),
        ("ID", 1),
        ("NodePool", 1),
        ("NodeClass", 1),
        ("Drifted", 1),
    ],
    ("karpenter.k8s.aws", "ec2nodeclasses"): [("Name", 0), ("Ready", 0), ("Age", 0), ("Role", 1)],
}


def _run(tool: str, *args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> str:
    """Run a cached tool; return its stdout or fail with its output."""
    command = [str(build.bin_dir() / tool), *args]
    if kubeconfig is not None:
        command += ["--kubeconfig", str(kubeconfig)]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _refused(*args: str) -> str:
    """Run helm, expecting a refusal; return what it said."""
    command = [str(build.bin_dir() / "helm"), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, f"{' '.join(command)} succeeded:\n{done.stdout}"
    return done.stderr


def _template(namespace: str, *extra: str) -> list[dict[str, Any]]:
    text = _run(
        "helm",
        "template",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--values",
        str(AWS_VALUES),
        *extra,
    )
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _by_kind(documents: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in documents if doc["kind"] == kind]


@pytest.fixture(scope="module")
def kubeconfig(kube_cluster: Any) -> Path:
    """The admin kubeconfig of the session's cluster."""
    return Path(kube_cluster.kubeconfig)


def test_helm_lint_passes_both_charts() -> None:
    _run("helm", "lint", "--strict", str(CHART), "--values", str(AWS_VALUES))
    _run("helm", "lint", "--strict", str(CRD_CHART))


def test_template_follows_the_values_and_the_set_flag_of_an_upgrade() -> None:
    documents = _template(
        "kube-system",
        "--set",
        f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={ROLE_ARN}",
    )
    kinds = sorted({doc["kind"] for doc in documents})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ]
    (account,) = _by_kind(documents, "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ROLE_ARN}
    (deployment,) = _by_kind(documents, "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["spec"]["serviceAccountName"] == account["metadata"]["name"] == RELEASE
    assert pod["metadata"]["annotations"] == {"example.com/team": "platform"}
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["CLUSTER_NAME"] == env["KARPENTER_AWS_CLUSTER_NAME"] == "my-cluster"
    assert env["KARPENTER_AWS_INTERRUPTION_QUEUE"] == "Karpenter-my-cluster"
    assert env["FEATURE_GATES"] == "NodeRepair=false,SpotToSpotConsolidation=true"
    assert env["AWS_REGION"] == "us-west-2"
    (spread,) = pod["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    for binding in _by_kind(documents, "ClusterRoleBinding") + _by_kind(documents, "RoleBinding"):
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": RELEASE, "namespace": "kube-system"}
        ]
        assert binding["roleRef"]["name"].startswith(RELEASE)


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("settings.featureGates.nodeOverlay=true", "nodeOverlay"),
        ("settings.featureGates.reservedCapacity=true", "reservedCapacity"),
        ("settings.eksControlPlane=true", "eksControlPlane"),
        ("webhook.enabled=true", "webhook"),
        ("settings.assumeRoleARN=arn:aws:iam::1:role/x", "assumeRoleARN"),
        ("settings.amiRefreshInterval=5m", "subnetRefreshInterval"),
        ("controller.image.repository=public.ecr.aws/karpenter/controller", "upstream"),
    ],
)
def test_values_the_chart_does_not_support_are_refused_by_name(setting: str, named: str) -> None:
    message = _refused(
        "template", RELEASE, str(CHART), "--values", str(AWS_VALUES), "--set", setting
    )
    assert named in message, message


def test_rendered_charts_pass_a_server_side_dry_run(kubeconfig: Path) -> None:
    namespace = harness.unique("chart-dry-run")
    _run("kubectl", "create", "namespace", namespace, kubeconfig=kubeconfig)
    try:
        rendered = _run(
            "helm", "template", RELEASE, str(CHART), "-n", namespace, "-f", str(AWS_VALUES)
        )
        crds = _run("helm", "template", "karpenter-crd", str(CRD_CHART))
        for manifest in (crds, rendered):
            out = _run(
                "kubectl",
                "apply",
                "--server-side",
                "--force-conflicts",
                "--dry-run=server",
                "-f",
                "-",
                kubeconfig=kubeconfig,
                stdin=manifest,
            )
            assert out.count("(server dry run)") == manifest.count("\nkind: "), out
    finally:
        _run("kubectl", "delete", "namespace", namespace, "--wait=false", kubeconfig=kubeconfig)


@pytest.fixture
def installed(kubeconfig: Path) -> Iterator[str]:
    """The chart installed by helm into a fresh namespace; uninstalled afterwards."""
    namespace = harness.unique("chart")
    _run(
        "helm",
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        "--create-namespace",
        "--values",
        str(AWS_VALUES),
        "--set",
        f"serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={ROLE_ARN}",
        kubeconfig=kubeconfig,
    )
    try:
        yield namespace
    finally:
        _run("helm", "uninstall", RELEASE, "--namespace", namespace, kubeconfig=kubeconfig)
        _run("kubectl", "delete", "namespace", namespace, "--wait=false", kubeconfig=kubeconfig)


def _kwok_rules_for(namespace: str) -> list[dict[str, Any]]:
    """The KWOK provider's ClusterRole and binding, renamed for the release, bound to its
    ServiceAccount."""
    objects = []
    for doc in rbac.manifests(namespace, "kwok"):
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding") and doc["metadata"][
            "name"
        ].endswith("-kwok"):
            doc["metadata"]["name"] = f"{RELEASE}-kwok"
            if doc["kind"] == "ClusterRoleBinding":
                doc["roleRef"]["name"] = f"{RELEASE}-kwok"
                doc["subjects"] = [
                    {"kind": "ServiceAccount", "name": RELEASE, "namespace": namespace}
                ]
            objects.append(doc)
    assert len(objects) == 2, objects
    return objects


def test_the_controller_with_the_charts_environment_and_identity_provisions_pods(
    installed: str,
    kubeconfig: Path,
    kube_client: client.ApiClient,
    pool: str,
    tmp_path: Path,
) -> None:
    namespace = installed
    manifest = yaml.safe_load_all(
        _run("helm", "get", "manifest", RELEASE, "-n", namespace, kubeconfig=kubeconfig)
    )
    (deployment,) = [doc for doc in manifest if doc and doc["kind"] == "Deployment"]
    env: dict[str, str] = {}
    for variable in deployment["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:  # the downward API's namespace
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
            env[variable["name"]] = namespace
    # Ports are the test process's own (several controllers share this machine); a NodeClaim's
    # progress is rechecked every second, a variable the chart does not set.
    del env["METRICS_PORT"], env["HEALTH_PROBE_PORT"]
    env["NODECLAIM_REQUEUE"] = "1s"
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token_kubeconfig = service_account_kubeconfig(
        kubeconfig, namespace, account, tmp_path / "kubeconfig"
    )
    admin = KubeClient.from_config(str(kubeconfig))
    kwok_rbac = _kwok_rules_for(namespace)
    try:
        rbac.apply(admin, kwok_rbac)
    finally:
        admin.close()
    controller = ControllerProcess("kwok", token_kubeconfig, tmp_path, env=env)
    workloads = harness.unique("chart-workload")
    core = client.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": workloads}})
    try:
        controller.wait_ready()
        harness.create_nodepool(kube_client, harness.nodepool(pool, pool))
        harness.apply_deployment(kube_client, workloads, harness.deployment("app", pool, 3))
        harness.wait_running(controller, kube_client, workloads, pool, 3, "3 pods running")
        assert controller.forbidden() == [], controller.log_tail()
    finally:
        client.AppsV1Api(kube_client).delete_collection_namespaced_deployment(workloads)
        harness.cleanup_pool(kube_client, pool)
        controller.stop()
        core.delete_namespace(workloads)
        rbac_api = client.RbacAuthorizationV1Api(kube_client)
        rbac_api.delete_cluster_role_binding(f"{RELEASE}-kwok")
        rbac_api.delete_cluster_role(f"{RELEASE}-kwok")


@pytest.mark.parametrize(("group", "plural"), sorted(UPSTREAM_COLUMNS))
def test_the_apiservers_table_has_upstreams_columns(
    kube_client: client.ApiClient, group: str, plural: str
) -> None:
    url = f"{kube_client.configuration.host}/apis/{group}/v1/{plural}"
    response = kube_client.call_api("GET", url, header_params={"Accept": TABLE})
    response.read()
    table = json.loads(response.data)
    assert table["kind"] == "Table"
    columns = [(c["name"], c.get("priority", 0)) for c in table["columnDefinitions"]]
    assert columns == UPSTREAM_COLUMNS[(group, plural)]


def test_service_monitor_extra_rules_and_sidecars_render_as_upstreams_values_ask() -> None:
    rule = {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}
    documents = _template(
        "monitoring",
        "--api-versions",
        "monitoring.coreos.com/v1",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "serviceMonitor.endpointConfig.interval=30s",
        "--set-json",
        f"additionalClusterRoleRules=[{json.dumps(rule)}]",
        "--set-json",
        'controller.sidecarContainer=[{"name": "proxy", "image": "example.local/proxy"}]',
        "--set-json",
        'controller.extraVolumeMounts=[{"name": "token", "mountPath": "/var/run/token"}]',
    )
    (monitor,) = _by_kind(documents, "ServiceMonitor")
    assert monitor["spec"]["endpoints"] == [
        {"port": "http-metrics", "path": "/metrics", "interval": "30s"}
    ]
    (core,) = [r for r in _by_kind(documents, "ClusterRole") if r["metadata"]["name"] == RELEASE]
    assert core["rules"][-1] == rule
    (deployment,) = _by_kind(documents, "Deployment")
    controller, proxy = deployment["spec"]["template"]["spec"]["containers"]
    mounts = [{"name": "token", "mountPath": "/var/run/token"}]
    assert controller["volumeMounts"] == proxy["volumeMounts"] == mounts
