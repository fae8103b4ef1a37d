"""What the input fuzzer (``test_fuzz_inputs``) mutates and how it judges each case.

The corpus is the manifests users start from: the YAML blocks of the docs, the core's and each
provider's default scenario, and older Karpenter APIs for ``karpenter convert``. Strategies mutate
them (wrong types, missing and misspelt fields, huge, zero and negative quantities, bad durations
and cron schedules, unknown kinds, duplicate names, owner reference cycles, broken YAML). Every
case must end in a result or in a one-line error: never a traceback, never over ``CASE_SECONDS``.
"""

from __future__ import annotations

import copy
import math
import os
import re
import signal
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
CASE_SECONDS = 10.0
"""No case may take longer."""

CASES = int(os.environ.get("FUZZ_CASES", "200"))
"""Cases in all, shared among the fuzzer's targets by ``SHARES`` (``FUZZ_CASES=5000`` for the
long run, ``benchmarks/fuzz.py``)."""

SHARES = {"simulate": 0.4, "convert": 0.2, "decode": 0.25, "provider": 0.15}


def cases(target: str) -> int:
    """This target's share of ``CASES`` (at least one)."""
    return max(1, round(CASES * SHARES[target]))


_T = TypeVar("_T")


class CaseTimeout(Exception):
    """A case ran over ``CASE_SECONDS``."""


@contextmanager
def time_limit(seconds: float = CASE_SECONDS) -> Iterator[None]:
    """Raise ``CaseTimeout`` in the block once ``seconds`` have passed (main thread only)."""

    def expired(signum: int, frame: object) -> None:
        raise CaseTimeout(f"over {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# -- the corpus -------------------------------------------------------------------------------


def _doc_blocks() -> Iterator[tuple[str, str]]:
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", text, re.S)):
            yield f"{path.name}#{i}", textwrap.dedent(block)


def _scenarios() -> Iterator[tuple[str, str]]:
    yield (
        "core default",
        resources.files("karpenter_core").joinpath("scenarios", "default.yaml").read_text(),
    )
    for path in sorted(ROOT.glob("providers/*/karpenter_*/scenarios/*.yaml")):
        yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


_OLDER_APIS = """\
apiVersion: karpenter.sh/v1alpha5
kind: Provisioner
metadata: {name: default}
spec:
  providerRef: {name: default}
  requirements:
    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
    - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
  limits: {resources: {cpu: 1000, memory: 1000Gi}}
  ttlSecondsAfterEmpty: 30
  ttlSecondsUntilExpired: 2592000
  kubeletConfiguration: {maxPods: 110, systemReserved: {cpu: 100m}}
  taints: [{key: team, value: a, effect: NoSchedule}]
  weight: 10
---
apiVersion: karpenter.k8s.aws/v1alpha1
kind: AWSNodeTemplate
metadata: {name: default}
spec:
  amiFamily: AL2
  subnetSelector: {karpenter.sh/discovery: my-cluster}
  securityGroupSelector: {karpenter.sh/discovery: my-cluster}
  instanceProfile: KarpenterNodeInstanceProfile
---
apiVersion: karpenter.sh/v1beta1
kind: NodePool
metadata: {name: pool}
spec:
  template:
    spec:
      nodeClassRef: {apiVersion: karpenter.k8s.aws/v1beta1, kind: EC2NodeClass, name: beta}
      requirements: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
      kubelet: {maxPods: 50}
  disruption:
    consolidationPolicy: WhenUnderutilized
    expireAfter: 720h
    budgets: [{nodes: "10%", schedule: "0 9 * * mon-fri", duration: 8h}]
---
apiVersion: karpenter.k8s.aws/v1beta1
kind: EC2NodeClass
metadata: {name: beta}
spec:
  amiFamily: AL2023
  role: KarpenterNodeRole
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: my-cluster}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      nodeSelector: {karpenter.sh/provisioner-name: default}
      containers: [{name: web, image: nginx, resources: {requests: {cpu: "1"}}}]
"""

_WORKLOADS = """\
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: data}
spec:
  replicas: 2
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: pg, resources: {requests: {cpu: 500m, memory: 1Gi}}}]
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule,
           labelSelector: {matchLabels: {app: db}}}
      tolerations: [{key: team, operator: Equal, value: a, effect: NoSchedule}]
  volumeClaimTemplates:
    - metadata: {name: data}
      spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 10Gi}}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: batch}
spec:
  parallelism: 4
  completions: 8
  template:
    spec:
      restartPolicy: Never
      containers: [{name: work, image: busybox, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: lone
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: rs, uid: "1", controller: true}]
spec:
  priority: 10
  containers: [{name: c, image: x, resources: {requests: {memory: 512Mi}}}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions: [{key: kubernetes.io/arch, operator: In, values: [amd64]}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: db}
spec: {maxUnavailable: 1, selector: {matchLabels: {app: db}}}
---
apiVersion: v1
kind: Node
metadata:
  name: existing
  labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m-4x-amd64-linux}
spec:
  taints: [{key: dedicated, effect: NoSchedule}]
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  allocatable: {cpu: 3900m, memory: 15Gi, pods: "110"}
---
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: existing, labels: {karpenter.sh/nodepool: default}}
spec:
  nodeClassRef: {group: karpenter.kwok.sh, kind: KWOKNodeClass, name: default}
  requirements: [{key: node.kubernetes.io/instance-type, operator: In, values: [m-4x-amd64-linux]}]
  expireAfter: 24h
status: {nodeName: existing, providerID: kwok://existing}
"""


def _parsed(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


SIMULATE_CORPUS: list[tuple[str, list[Any]]] = [
    *((name, _parsed(text)) for name, text in _scenarios()),
    *((name, _parsed(text)) for name, text in _doc_blocks()),
    ("workloads", _parsed(_WORKLOADS) + _parsed(next(_scenarios())[1])),
]
"""Manifests ``karpenter simulate`` reads (each a list of objects)."""

CONVERT_CORPUS: list[tuple[str, list[Any]]] = [
    ("older APIs", _parsed(_OLDER_APIS)),
    *((name, _parsed(text)) for name, text in _doc_blocks() if "NodePool" in text),
]
"""Manifests ``karpenter convert`` reads."""

# -- mutations --------------------------------------------------------------------------------

KINDS = (
    "Pod",
    "Deployment",
    "StatefulSet",
    "ReplicaSet",
    "DaemonSet",
    "Job",
    "CronJob",
    "Node",
    "NodePool",
    "NodeClaim",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "PodDisruptionBudget",
    "KWOKNodeClass",
    "EC2NodeClass",
    "AKSNodeClass",
    "Provisioner",
    "AWSNodeTemplate",
    "List",
    "NodePoolList",
    "Widget",
    "",
)

BAD_STRINGS = (
    "",
    " ",
    "abc",
    "-1",
    "0",
    "1e400",
    "-5Gi",
    "999999999999999999Ei",
    "0.0000000001m",
    "NaN",
    "Infinity",
    "1h-3m",
    "-30s",
    "P1D",
    "Never",
    "never",
    "0s",
    "9999999999999h",
    "1.5.5",
    "* * *",
    "@daily",
    "@never",
    "0 0 31 2 *",
    "60 * * * *",
    "*/0 * * * *",
    "0 9 * * mon-fri",
    "100%",
    "-10%",
    "1000%",
    "a" * 300,
    "ünïcödé/ключ",
    "key=value",
    "${CLUSTER_NAME}",
    "kubernetes.io/arch",
    "node.kubernetes.io/instance-type",
    "karpenter.sh/capacity-type",
    "In",
    "NotIn",
    "Gt",
    "Exists",
    "m-*",
)

BAD_SCALARS: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(BAD_STRINGS),
    st.sampled_from(
        (None, True, False, 0, 1, -1, 2**31, 2**63, 10**30, -(10**30), 1e308, -0.5, math.nan)
    ),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)

BAD_VALUES: st.SearchStrategy[Any] = st.one_of(
    BAD_SCALARS,
    st.lists(BAD_SCALARS, max_size=3),
    st.dictionaries(st.sampled_from(BAD_STRINGS), BAD_SCALARS, max_size=3),
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a value in ``value`` (the root first)."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*path, index))


def _parent(root: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        root = root[step]
    return root


def _misspelt(key: str, draw: Callable[[st.SearchStrategy[_T]], _T]) -> str:
    if not key:
        return "x"
    i = draw(st.integers(0, len(key) - 1))
    how = draw(st.sampled_from(("drop", "double", "case", "suffix")))
    if how == "drop":
        return key[:i] + key[i + 1 :] or "x"
    if how == "double":
        return key[:i] + key[i] + key[i:]
    if how == "case":
        return key.swapcase()
    return key + "s"


@st.composite
def mutated_value(draw: Callable[[st.SearchStrategy[_T]], _T], docs: list[Any]) -> None:
    """Replace, drop, misspell or duplicate one value somewhere in ``docs`` (in place)."""
    paths = [p for p in _paths(docs) if len(p) >= 2]
    if not paths:
        return
    path = draw(st.sampled_from(paths))
    parent, last = _parent(docs, path), path[-1]
    action = draw(st.sampled_from(("set", "set", "set", "drop", "rename", "grow")))
    if action == "set":
        parent[last] = draw(BAD_VALUES)
    elif action == "drop":
        del parent[last]
    elif action == "rename" and isinstance(parent, dict):
        parent[_misspelt(str(last), draw)] = parent.pop(last)
    elif action == "grow":
        size = draw(st.sampled_from((0, 1, 1000, 10**6, 10**9, 2**62)))
        value = parent[last]
        if isinstance(value, list) and value:
            parent[last] = value * min(size, 50)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            parent[last] = value * size if size else 0
        elif isinstance(value, str):
            parent[last] = draw(st.sampled_from((f"{size}", f"-{size}", f"{size}Ei", "0")))


@st.composite
def _mutated_documents(draw: Callable[[st.SearchStrategy[_T]], _T], docs: list[Any]) -> None:
    """A document-level change (in place): unknown kinds, duplicates, owner cycles."""
    if not docs:
        return
    i = draw(st.integers(0, len(docs) - 1))
    action = draw(st.sampled_from(("kind", "duplicate", "cycle", "apiVersion", "drop", "shape")))
    doc = docs[i]
    if action == "kind" and isinstance(doc, dict):
        doc["kind"] = draw(st.sampled_from(KINDS))
    elif action == "apiVersion" and isinstance(doc, dict):
        doc["apiVersion"] = draw(
            st.sampled_from(("v1", "apps/v1", "karpenter.sh/v1", "karpenter.sh/v9", "x", ""))
        )
    elif action == "duplicate":
        docs.append(copy.deepcopy(doc))
    elif action == "drop":
        docs.pop(i)
    elif action == "shape":
        docs[i] = draw(BAD_VALUES)
    elif action == "cycle":
        named = [d for d in docs if isinstance(d, dict) and isinstance(d.get("metadata"), dict)]
        for a, b in zip(named, named[1:] + named[:1], strict=True):
            a["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": str(b.get("apiVersion")),
                    "kind": str(b.get("kind")),
                    "name": str(b["metadata"].get("name")),
                    "uid": "u",
                    "controller": True,
                }
            ]


@st.composite
def manifests(
    draw: Callable[[st.SearchStrategy[_T]], _T], corpus: list[tuple[str, list[Any]]]
) -> str:
    """A corpus entry, mutated, as YAML text (sometimes broken as text too)."""
    _, docs = draw(st.sampled_from(corpus))
    docs = copy.deepcopy(docs)
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            draw(mutated_value(docs))
        else:
            draw(_mutated_documents(docs))
    text = yaml.safe_dump_all(docs, sort_keys=False)
    if draw(st.integers(0, 9)) == 0:
        at = draw(st.integers(0, len(text)))
        how = draw(st.sampled_from(("cut", "insert")))
        if how == "cut":
            text = text[:at]
        else:
            junk = draw(
                st.sampled_from(
                    (":", "- ", "\t", "{", "[", "&a", "*a", "!!python/object", "\x00", "%")
                )
            )
            text = text[:at] + junk + text[at:]
    return text


# -- provider data ----------------------------------------------------------------------------

ZONES = ("zone-a", "zone-b", "zone-c", "")
PRICES: st.SearchStrategy[Any] = st.one_of(
    st.floats(min_value=0, max_value=100),
    st.sampled_from((0, 0.0, -1.0, -0.0, math.nan, math.inf, -math.inf, 1e308, 10**30, True, "1")),
)
AMOUNTS: st.SearchStrategy[Any] = st.one_of(
    st.integers(0, 256_000),
    st.sampled_from((0, -1000, 2**63, 10**30, 1.5, math.nan)),
)


@st.composite
def instance_types(draw: Callable[[st.SearchStrategy[_T]], _T]) -> list[Any]:
    """A provider's catalog as a buggy provider might return it: duplicate names, NaN and
    negative prices, no offerings, offerings only in zones a NodePool excludes, odd capacity."""
    from karpenter_core.apis import labels as wk
    from karpenter_core.apis.requirements import Requirements
    from karpenter_core.cloudprovider.types import InstanceType, Offering, Overhead

    out: list[Any] = []
    for _ in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(("a-2", "a-4", "b-8", "", "a-2")))
        offerings = [
            Offering(
                Requirements.from_labels(
                    {
                        wk.TOPOLOGY_ZONE: draw(st.sampled_from(ZONES)),
                        wk.CAPACITY_TYPE: draw(st.sampled_from(("spot", "on-demand", "x"))),
                    }
                ),
                draw(PRICES),
                available=draw(st.booleans()),
            )
            for _ in range(draw(st.integers(0, 4)))
        ]
        labels = {
            wk.INSTANCE_TYPE: name or "unnamed",
            wk.ARCH: "amd64",
            "kubernetes.io/os": "linux",
        }
        capacity = {
            "cpu": draw(AMOUNTS),
            "memory": draw(AMOUNTS) if draw(st.booleans()) else 16 * 2**30 * 1000,
            "pods": draw(st.sampled_from((110_000, 0, -1))),
        }
        overhead = Overhead(kube_reserved={"cpu": draw(AMOUNTS)})
        out.append(
            InstanceType(name, Requirements.from_labels(labels), offerings, capacity, overhead)
        )
    if draw(st.integers(0, 9)) == 0:
        out.append(draw(st.sampled_from((None, "a-2", 3))))
    return out


ZONE_LABEL = "topology.kubernetes.io/zone"
