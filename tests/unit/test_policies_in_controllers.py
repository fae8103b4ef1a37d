"""PREFERENCE_POLICY and MIN_VALUES_POLICY reach the controllers' scheduling runs.

A provisioning pass runs against the in-process fake Kubernetes API with the KWOK provider; the
disruption controller hands the policies to the planner for every simulation.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_conformance.waiting import wait_until
from karpenter_core.apis import labels as wk
from karpenter_core.controllers.context import Context
from karpenter_core.controllers.disruption import DisruptionController
from karpenter_core.controllers.provisioning import Provisioner
from karpenter_core.operator.kube import KubeClient
from karpenter_core.operator.operator import Operator
from karpenter_core.operator.settings import Settings
from karpenter_kwok.plugin import karpenter_register_providers

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
PODS = "/api/v1/namespaces/default/pods"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
ZONE_AFFINITY = {
    "nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 1,
                "preference": {
                    "matchExpressions": [
                        {"key": wk.TOPOLOGY_ZONE, "operator": "In", "values": ["test-zone-d"]}
                    ]
                },
            }
        ]
    }
}


def _nodepool(requirements: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "web"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": requirements,
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                }
            },
        },
    }


class Pass:
    """One provisioning pass on a fake cluster, under the given settings."""

    def __init__(self, settings: Settings) -> None:
        self.fake = FakeKube()
        self.kube = KubeClient(self.fake.api_client())
        [record] = karpenter_register_providers()
        self.operator = Operator(settings, record, self.kube, controllers=lambda _: [])
        self.fake.put(
            NODECLASSES,
            {
                "apiVersion": "karpenter.kwok.sh/v1alpha1",
                "kind": "KWOKNodeClass",
                "metadata": {"name": "default"},
                "spec": {},
            },
        )
        self._thread = threading.Thread(target=self.operator.run, daemon=True)
        self._thread.start()
        wait_until(self.operator.ready, "the operator's informers synced", timeout=20.0)
        op = self.operator
        self.provisioner = Provisioner(
            Context(op.settings, op.kube, op.state, op.provider, op.events)
        )

    def provision(self, nodepool: dict[str, Any], affinity: dict[str, Any] | None) -> list[Any]:
        """Create the NodePool and one unschedulable pod, run one pass, return the NodeClaims."""
        state = self.operator.state
        self.kube.create(NODEPOOLS, nodepool)
        spec: dict[str, Any] = {
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]
        }
        if affinity:
            spec["affinity"] = affinity
        self.kube.create(
            PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}
        )
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        self.kube.patch(f"{PODS}/p/status", {"status": {"conditions": [condition]}})
        wait_until(lambda: state.pending_pods() and state.nodepools(), "the pod and NodePool seen")
        self.provisioner.provision()
        return self.fake.items(NODECLAIMS)

    def stop(self) -> None:
        self.operator.shutdown()
        self._thread.join(15)
        self.kube.close()
        self.fake.stop()


@pytest.fixture
def run_pass() -> Iterator[Any]:
    started: list[Pass] = []

    def run(settings: Settings, nodepool: dict[str, Any], affinity: Any = None) -> list[Any]:
        started.append(Pass(settings))
        return started[-1].provision(nodepool, affinity)

    yield run
    for one in started:
        one.stop()


def _settings(**changes: Any) -> Settings:
    return Settings(disable_leader_election=True, metrics_port=0, health_probe_port=0, **changes)


def _zones(claim: dict[str, Any]) -> list[str] | None:
    for requirement in claim["spec"]["requirements"]:
        if requirement["key"] == wk.TOPOLOGY_ZONE:
            return list(requirement.get("values") or ())
    return None


@pytest.mark.parametrize("policy", ["Respect", "Ignore"])
def test_the_preference_policy_reaches_provisioning(run_pass: Any, policy: str) -> None:
    pool = _nodepool([{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}])
    [claim] = run_pass(_settings(preference_policy=policy), pool, ZONE_AFFINITY)
    if policy == "Respect":
        assert _zones(claim) == ["test-zone-d"]
    else:
        assert _zones(claim) != ["test-zone-d"]


@pytest.mark.parametrize("policy", ["Strict", "BestEffort"])
def test_the_min_values_policy_reaches_provisioning(run_pass: Any, policy: str) -> None:
    # The KWOK catalog has two architectures: three cannot be met.
    pool = _nodepool(
        [{"key": wk.ARCH, "operator": "Exists", "minValues": 3}],
    )
    claims = run_pass(_settings(min_values_policy=policy), pool)
    if policy == "Strict":
        assert claims == []
    else:
        assert len(claims) == 1


def test_the_disruption_controller_hands_the_policies_to_the_planner() -> None:
    settings = _settings(preference_policy="Ignore", min_values_policy="BestEffort")
    context = Context(settings, None, None, None, None)  # type: ignore[arg-type]
    options = DisruptionController(context)._options()
    assert (options.preference_policy, options.min_values_policy) == ("Ignore", "BestEffort")
