"""Provisioning with the whole operator and the KWOK provider on the in-process fake API.

No kube-scheduler runs on the fake, so no pod is ever marked Unschedulable or bound: every pod
stays awaiting the kube-scheduler's first decision, which is what the provisioner acts on here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from karpenter_conformance.fakekube import FakeKube
from karpenter_conformance.waiting import wait_until
from karpenter_core.operator.kube import KubeClient
from karpenter_core.operator.operator import Operator
from karpenter_core.operator.settings import Settings
from karpenter_kwok.plugin import karpenter_register_providers

NODECLAIMS = "/apis/karpenter.sh/v1/nodeclaims"
NODEPOOLS = "/apis/karpenter.sh/v1/nodepools"
NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/default/pods"
NODECLASSES = "/apis/karpenter.kwok.sh/v1alpha1/kwoknodeclasses"
TIMEOUT = 20.0


@pytest.fixture
def cluster() -> Iterator[tuple[FakeKube, KubeClient, Operator]]:
    """The operator (every controller, short batch windows) on a fresh fake API."""
    fake = FakeKube()
    kube = KubeClient(fake.api_client())
    fake.put(
        NODECLASSES,
        {
            "apiVersion": "karpenter.kwok.sh/v1alpha1",
            "kind": "KWOKNodeClass",
            "metadata": {"name": "default"},
            "spec": {},
        },
    )
    settings = Settings(
        disable_leader_election=True,
        metrics_port=0,
        health_probe_port=0,
        batch_idle_duration=0.05,
        batch_max_duration=0.3,
    )
    [record] = karpenter_register_providers()
    operator = Operator(settings, record, kube, controller_stop_timeout=5.0)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(operator.run()), daemon=True)
    thread.start()
    try:
        wait_until(operator.ready, "the operator's informers synced", timeout=TIMEOUT)
        yield fake, kube, operator
    finally:
        operator.shutdown()
        thread.join(15)
        kube.close()
        fake.stop()
    assert result == [0], "the operator stopped cleanly"


def _nodepool() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "web"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {
                            "key": "karpenter.kwok.sh/instance-family",
                            "operator": "In",
                            "values": ["c"],
                        },
                        {
                            "key": "karpenter.sh/capacity-type",
                            "operator": "In",
                            "values": ["on-demand"],
                        },
                    ],
                    "nodeClassRef": {
                        "group": "karpenter.kwok.sh",
                        "kind": "KWOKNodeClass",
                        "name": "default",
                    },
                }
            },
            "disruption": {"consolidateAfter": "Never"},
        },
    }


def test_pods_awaiting_the_kube_scheduler_launch_only_what_existing_room_cannot_hold(
    cluster: tuple[FakeKube, KubeClient, Operator],
) -> None:
    """Six 1-CPU pods, an existing node with 4 CPU free: NodeClaims for two pods' worth, without
    waiting for an Unschedulable verdict; the four that fit are left to the kube-scheduler."""
    fake, kube, operator = cluster
    kube.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "existing", "labels": {"kubernetes.io/os": "linux"}},
            "status": {
                "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )
    state = operator.state
    wait_until(lambda: state.node("existing"), "the node seen", timeout=TIMEOUT)
    kube.create(NODEPOOLS, _nodepool())
    for n in range(6):
        kube.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"web-{n}"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}
                    ]
                },
            },
        )

    def requested() -> int:
        claims = fake.items(NODECLAIMS)
        return sum(int(c["spec"]["resources"]["requests"]["cpu"]) for c in claims)

    wait_until(lambda: requested() == 2, "NodeClaims for the 2 pods beyond 4 CPU", timeout=TIMEOUT)
    wait_until(
        lambda: sum(state.nomination(f"default/web-{n}") is not None for n in range(6)) == 2,
        "the 2 pods nominated to the NodeClaims",
        timeout=TIMEOUT,
    )
    time.sleep(1.0)  # several batch windows: later passes launch nothing more for them
    assert requested() == 2
    assert all(state.nomination(f"default/web-{n}") != "existing" for n in range(6)), (
        "the kube-scheduler places the others; they are not nominated"
    )
