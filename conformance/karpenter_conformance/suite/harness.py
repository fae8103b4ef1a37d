"""What the checks act on: a provider built from its record, pointed at the profile's fake cloud.

One ``Harness`` per session starts the profile and the contract level's Kubernetes API; before
each check it resets both, puts the profile's NodeClass in the provider's NodeClass read view
(``ProviderContext.node_classes``, as the controller's informer cache gives it) and builds a
fresh provider.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from karpenter_conformance.suite.kubeapi import ObjectAPI
from karpenter_core.apis import labels as wk
from karpenter_core.apis.v1.nodeclaim import NodeClaim
from karpenter_core.apis.v1.nodepool import NodePool
from karpenter_core.cloudprovider.plugin import ProviderContext, ProviderRecord
from karpenter_core.cloudprovider.types import CloudProvider, InstanceType

__all__ = ["NODEPOOL", "Harness", "Violation", "expect"]

NODEPOOL = "conformance"


class Violation(AssertionError):
    """The provider broke the contract: "the provider <did>; expected <expected>"."""

    def __init__(self, did: str, expected: str) -> None:
        super().__init__(f"the provider {did}; expected {expected}")


def expect(condition: object, did: str, expected: str) -> None:
    """Raise ``Violation(did, expected)`` unless ``condition``."""
    if not condition:
        raise Violation(did, expected)


class Harness:
    """The record, its profile, the Kubernetes API the provider reads, and the provider."""

    def __init__(self, record: ProviderRecord, profile: Any) -> None:
        if not record.node_classes:
            raise Violation("declares no NodeClass", "one to launch from")
        self.record = record
        self.profile = profile
        info = record.node_classes[0]
        self.node_class_info = info
        self.node_classes: dict[tuple[str, str], Any] = {}
        """The read view's objects, by kind and name."""
        self.api = ObjectAPI()
        self._names = itertools.count(1)
        self._provider: CloudProvider | None = None

    def start(self) -> None:
        """Start the profile's fake cloud."""
        self.profile.start()

    def stop(self) -> None:
        """Stop the fake cloud and the Kubernetes API."""
        try:
            self.profile.stop()
        finally:
            self.api.stop()

    def reset(self) -> None:
        """A clean cloud and API holding the profile's ready NodeClass; a new provider."""
        self.profile.reset()
        self.api.clear()
        self.node_classes.clear()
        self.put_node_class(self.profile.node_class(ready=True))
        self._provider = None

    @property
    def provider(self) -> CloudProvider:
        """The provider under test (built on first use after each reset)."""
        if self._provider is None:
            self._provider = self.build()
        return self._provider

    def build(self) -> CloudProvider:
        """A provider from the record's factory, with the profile's settings."""
        values = {k.replace("-", "_"): v for k, v in self.profile.settings().items()}
        context = ProviderContext(
            settings=self.record.settings(values),
            kube_client=self.api.client(),
            node_classes=lambda kind, name: self.node_classes.get((kind, name)),
        )
        return self.record.factory(context)

    def put_node_class(self, manifest: dict[str, Any]) -> None:
        """Put ``manifest`` (status included) in the provider's NodeClass read view, decoded as
        the controller's informer decodes it (the model's ``from_manifest``, else
        ``model_validate``)."""
        model = self.node_class_info.model
        decode = getattr(model, "from_manifest", model.model_validate)
        name = manifest["metadata"]["name"]
        self.node_classes[(self.node_class_info.kind, name)] = decode(manifest)

    def node_class_name(self) -> str:
        """The name of the profile's NodeClass."""
        return str(self.profile.node_class(ready=True)["metadata"]["name"])

    def nodepool(self) -> NodePool:
        """A NodePool using the profile's NodeClass."""
        info = self.node_class_info
        return NodePool.from_manifest(
            {
                "metadata": {"name": NODEPOOL, "uid": "conformance-nodepool"},
                "spec": {
                    "template": {
                        "spec": {
                            "requirements": [],
                            "nodeClassRef": {
                                "group": info.group,
                                "kind": info.kind,
                                "name": self.node_class_name(),
                            },
                        }
                    }
                },
            }
        )

    def instance_types(self) -> list[InstanceType]:
        """What the provider offers for the suite's NodePool."""
        return list(self.provider.get_instance_types(self.nodepool()))

    def nodeclaim(
        self,
        requirements: Sequence[Mapping[str, Any]] = (),
        requests: Mapping[str, str] | None = None,
    ) -> NodeClaim:
        """A new NodeClaim of the suite's NodePool, as the provisioner makes them."""
        info = self.node_class_info
        name = f"{NODEPOOL}-{next(self._names):05d}"
        return NodeClaim.from_manifest(
            {
                "metadata": {
                    "name": name,
                    "uid": str(uuid.uuid4()),
                    "labels": {wk.NODEPOOL: NODEPOOL},
                    "annotations": {"karpenter.sh/nodepool-hash": "1"},
                },
                "spec": {
                    "requirements": [
                        {"key": wk.NODEPOOL, "operator": "In", "values": [NODEPOOL]},
                        *requirements,
                    ],
                    "nodeClassRef": {
                        "group": info.group,
                        "kind": info.kind,
                        "name": self.node_class_name(),
                    },
                    "resources": {"requests": dict(requests or {"cpu": "100m"})},
                },
            }
        )

    def instances(self) -> list[str]:
        """providerIDs of every instance the provider lists."""
        return [c.status.provider_id or "" for c in self.provider.list()]
