"""A node registrar: plays the kubelet of every instance a cloud provider lists, on KWOK.

A real instance boots, and its kubelet registers a Node carrying the instance's providerID,
labels and resources, tainted ``karpenter.sh/unregistered:NoExecute`` as Karpenter's user data
asks. Instances launched against a fake cloud (moto, a test double) boot nothing, so the
registrar does it for them: every ``interval`` seconds it lists the provider's instances and
creates a KWOK-managed Node for each new one, and, as the cloud node lifecycle controller does,
deletes the Nodes it created whose instance is gone. The provider contract used is ``list()``
only. ``plan`` and ``node_manifest`` decide, purely; ``Registrar`` does the I/O.

Run it beside a controller: ``python -m karpenter_conformance.registrar --provider aws
--kubeconfig ... --aws-cluster-name ... --aws-endpoint-url ...`` (the provider's options, as for
``karpenter controller``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from urllib3.exceptions import HTTPError

from karpenter_core.apis import labels as wk

if TYPE_CHECKING:
    from karpenter_core.apis.v1.nodeclaim import NodeClaim

__all__ = [
    "KWOK_NODE",
    "MANAGED_LABEL",
    "InstanceLister",
    "Plan",
    "Registrar",
    "RegistrarThread",
    "main",
    "node_manifest",
    "node_name",
    "plan",
]

KWOK_NODE = "kwok.x-k8s.io/node"
KWOK_NODE_VALUE = "fake"
"""Annotation (and label) that hands a Node to the local cluster's KWOK controller."""
MANAGED_LABEL = "karpenter-conformance/registrar"
"""Label on the Nodes the registrar created (only those are ever deleted)."""
_MAX_NAME = 253
_INVALID = re.compile(r"[^a-z0-9.-]+")

log = logging.getLogger("karpenter.registrar")


class InstanceLister(Protocol):
    """The part of a CloudProvider the registrar uses."""

    def list(self) -> list[NodeClaim]:
        """Every instance the provider manages, as NodeClaims with status.providerID."""
        ...


def node_name(provider_id: str) -> str:
    """The Node name of an instance: the last part of its providerID (``aws:///us-east-1a/i-0abc``
    is ``i-0abc``), lowercased and made DNS-safe; empty when nothing usable is left."""
    tail = provider_id.rstrip("/").rsplit("/", 1)[-1].lower()
    return _INVALID.sub("-", tail)[:_MAX_NAME].strip("-.")


def node_manifest(instance: NodeClaim) -> dict[str, Any]:
    """The Node the instance's kubelet would register: providerID, the instance's labels and
    resources, the unregistered taint, handed to KWOK and marked as the registrar's."""
    provider_id = instance.status.provider_id or ""
    name = node_name(provider_id)
    resources = instance.status.model_dump(
        mode="json", by_alias=True, include={"capacity", "allocatable"}
    )
    capacity = resources["capacity"]
    allocatable = resources["allocatable"] or capacity
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                **instance.metadata.labels,
                wk.HOSTNAME: name,
                KWOK_NODE: KWOK_NODE_VALUE,
                MANAGED_LABEL: "true",
            },
            "annotations": {KWOK_NODE: KWOK_NODE_VALUE},
        },
        "spec": {
            "providerID": provider_id,
            "taints": [{"key": wk.UNREGISTERED_TAINT_KEY, "effect": wk.UNREGISTERED_TAINT_EFFECT}],
        },
        "status": {"capacity": capacity, "allocatable": allocatable, "phase": "Pending"},
    }


@dataclass(frozen=True, slots=True)
class Plan:
    """One round's work: Node manifests to create and Node names to delete."""

    create: list[dict[str, Any]]
    delete: list[str]


def plan(
    instances: Iterable[NodeClaim],
    nodes: Iterable[Mapping[str, Any]],
    registered: Iterable[str] = (),
) -> Plan:
    """What to do given the listed instances and the cluster's Nodes (raw JSON).

    An instance gets a Node when none has its providerID, the name is free, it is not being
    terminated (``metadata.deletionTimestamp`` in the provider's view) and it was not
    registered before (``registered``: providerIDs whose Node was created; a Node deleted
    while its instance still lists is a node being terminated, not one to boot again). A Node
    the registrar created is deleted once its instance is no longer listed.
    """
    done = set(registered)
    listed = {i.status.provider_id: i for i in instances if i.status.provider_id}
    taken: set[str] = set()
    present: set[str] = set()
    delete = []
    for node in nodes:
        metadata = node.get("metadata") or {}
        taken.add(metadata.get("name", ""))
        provider_id = (node.get("spec") or {}).get("providerID") or ""
        present.add(provider_id)
        ours = (metadata.get("labels") or {}).get(MANAGED_LABEL) == "true"
        if ours and provider_id not in listed and not metadata.get("deletionTimestamp"):
            delete.append(metadata["name"])
    create = []
    for provider_id in sorted(listed):
        name = node_name(provider_id)
        if provider_id in present or provider_id in done or not name or name in taken:
            continue
        if listed[provider_id].metadata.deletion_timestamp is not None:
            continue
        taken.add(name)
        create.append(node_manifest(listed[provider_id]))
    return Plan(create=create, delete=sorted(delete))


class Registrar:
    """Registers a Node for every instance ``provider`` lists, every ``interval`` seconds."""

    def __init__(
        self, provider: InstanceLister, api_client: k8s.ApiClient, interval: float = 1.0
    ) -> None:
        self.provider = provider
        self.interval = interval
        self._core = k8s.CoreV1Api(api_client)
        self._registered: set[str] = set()

    def sync_once(self) -> Plan:
        """List instances and Nodes, create and delete Nodes; returns what was planned. A
        failure to list (an error answer, or no answer while the apiserver restarts) skips the
        round (logged); a failed create or delete is retried next round."""
        try:
            instances = self.provider.list()
        except Exception as error:
            log.warning("registrar: listing instances failed: %s", error)
            return Plan(create=[], delete=[])
        try:
            response = self._core.list_node(_preload_content=False)
        except k8s.ApiException as error:
            log.warning("registrar: listing nodes failed: %s %s", error.status, error.reason)
            return Plan(create=[], delete=[])
        except HTTPError as error:  # the apiserver unreachable (restarting)
            log.warning("registrar: listing nodes failed: %s", error)
            return Plan(create=[], delete=[])
        nodes = json.loads(response.data)["items"]
        work = plan(instances, nodes, self._registered)
        for manifest in work.create:
            self._create(manifest)
        for name in work.delete:
            self._delete(name)
        self._registered &= {i.status.provider_id for i in instances if i.status.provider_id}
        return work

    def run(self, stop: threading.Event) -> None:
        """Sync every ``interval`` seconds until ``stop`` is set."""
        while not stop.is_set():
            self.sync_once()
            stop.wait(self.interval)

    def start(self) -> RegistrarThread:
        """Run in a daemon thread; stop it with ``.stop()`` or by leaving a ``with`` block."""
        return RegistrarThread(self)

    def _create(self, manifest: Mapping[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        provider_id = manifest["spec"]["providerID"]
        try:
            self._core.create_node(manifest, _preload_content=False)
        except k8s.ApiException as error:
            if error.status != 409:
                log.warning("registrar: creating node %s failed: %s", name, _reason(error))
                return
        except HTTPError as error:
            log.warning("registrar: creating node %s failed: %s", name, error)
            return
        self._registered.add(provider_id)
        log.info("registrar: registered node %s for %s", name, provider_id)

    def _delete(self, name: str) -> None:
        try:
            self._core.delete_node(name, _preload_content=False)
        except k8s.ApiException as error:
            if error.status != 404:
                log.warning("registrar: deleting node %s failed: %s", name, _reason(error))
                return
        except HTTPError as error:
            log.warning("registrar: deleting node %s failed: %s", name, error)
            return
        log.info("registrar: deleted node %s, its instance is gone", name)


class RegistrarThread:
    """A registrar running in a daemon thread."""

    def __init__(self, registrar: Registrar) -> None:
        self.registrar = registrar
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=registrar.run, args=(self._stop,), name="registrar", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current round."""
        self._stop.set()
        self._thread.join(timeout)

    def __enter__(self) -> RegistrarThread:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _reason(error: k8s.ApiException) -> str:
    detail = error.reason or ""
    if error.body:
        try:
            detail = json.loads(error.body).get("message", detail)
        except (ValueError, AttributeError):
            detail = str(error.body)[:300]
    return f"{error.status} {detail}"


def _api_client(kubeconfig: str | None) -> k8s.ApiClient:
    if kubeconfig:
        return k8s_config.new_client_from_config(config_file=kubeconfig)
    try:
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(client_configuration=configuration)
        return k8s.ApiClient(configuration)
    except k8s_config.ConfigException:
        return k8s_config.new_client_from_config()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m karpenter_conformance.registrar --provider NAME [provider options]``."""
    from karpenter_core.cloudprovider.plugin import (
        ProviderContext,
        ProviderOption,
        ProviderRecord,
        option_env,
        option_flag,
    )
    from karpenter_core.cloudprovider.registry import UnknownProviderError, discover
    from karpenter_core.cloudprovider.types import CloudProviderError

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--provider")
    provider_name = pre.parse_known_args(argv)[0].provider
    parser = argparse.ArgumentParser(
        prog="python -m karpenter_conformance.registrar",
        description="Register a KWOK Node for every instance the provider lists "
        "(the provider's options follow --provider).",
    )
    parser.add_argument("--provider", required=True, help="cloud provider whose instances to list")
    parser.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG"),
        help="kubeconfig file (default: $KUBECONFIG, in-cluster, ~/.kube/config)",
    )
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between rounds")
    record: ProviderRecord | None = None
    options: Sequence[ProviderOption] = ()
    if provider_name:
        try:
            record = discover().provider(provider_name)
        except UnknownProviderError as error:
            parser.error(str(error))
        options = record.options
    for option in options:
        flag = option_flag(provider_name, option.name)
        former = f", or {option.env}" if option.env else ""
        env = f" [env {option_env(provider_name, option.name)}{former}]"
        parser.add_argument(flag, default=None, help=f"{option.help}{env}")
        if flag != f"--{option.name}":  # today's unprefixed flag, as for karpenter controller
            parser.add_argument(f"--{option.name}", default=None, help=argparse.SUPPRESS)
    args = vars(parser.parse_args(argv))
    if record is None:
        parser.error("--provider is required")
    settings = record.settings(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        api_client = _api_client(args["kubeconfig"])
        provider = record.factory(ProviderContext(settings=settings, kube_client=api_client))
    except (k8s_config.ConfigException, CloudProviderError) as error:
        print(f"Error: {error}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    Registrar(provider, api_client, args["interval"]).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
