"""The fake ARM server's REST semantics, independent of HTTP.

``ArmState.handle(method, path, query, body)`` answers one ARM request with (status, body,
headers): it routes the request to its handler and checks the subscription and resource group.
Long-running operations follow ARM's Azure-AsyncOperation pattern: the PUT or DELETE answers at
once (201/202) with an ``Azure-AsyncOperation`` URL and ``Retry-After``; the operation's status is
``InProgress`` until its latency has passed, then ``Succeeded`` or ``Failed`` with an ARM error.
Operations complete lazily, when anything reads the state. The resources' semantics are in
``compute``, ``network`` and ``galleries``; the data they share, the Resource SKUs and Retail
Prices lists are in ``state``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import parse_qs

from karpenter_azure.fake_arm import compute, galleries, network, seed
from karpenter_azure.fake_arm.common import Answer, ArmError, bad
from karpenter_azure.fake_arm.faults import arm_error
from karpenter_azure.fake_arm.state import ArmStore

__all__ = ["Answer", "ArmState", "route"]


Handler = Callable[[ArmStore, Mapping[str, str], Mapping[str, str], Any], Answer]
Scope = Literal["subscription", "gallery", "public"]
"""What a route checks: the fake's subscription and resource group, a gallery's (any
subscription, the gallery's resource group), or nothing (the Retail Prices API)."""


_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)"
_VM = _RG + r"/providers/microsoft\.compute/virtualmachines"
_NIC = _RG + r"/providers/microsoft\.network/networkinterfaces"
_COMMUNITY = (
    _SUB + r"/providers/microsoft\.compute/locations/(?P<location>[^/]+)"
    r"/communitygalleries/(?P<gallery>[^/]+)/images/(?P<image>[^/]+)/versions"
)
_GALLERY = (
    _RG + r"/providers/microsoft\.compute/galleries/(?P<gallery>[^/]+)"
    r"/images/(?P<image>[^/]+)/versions"
)


def _list_skus(state: ArmStore, _: Mapping[str, str], params: Mapping[str, str], __: Any) -> Answer:
    return state.list_skus(params)


def _list_prices(
    state: ArmStore, _: Mapping[str, str], params: Mapping[str, str], __: Any
) -> Answer:
    return state.list_prices(params)


def _get_operation(
    state: ArmStore, args: Mapping[str, str], _: Mapping[str, str], __: Any
) -> Answer:
    return state.operation_status(args["namespace"], args["operation"])


_ROUTES: list[tuple[str, str, Handler, Scope]] = [
    ("GET", _SUB + r"/providers/microsoft\.compute/skus", _list_skus, "subscription"),
    ("GET", _VM + r"/(?P<name>[^/]+)", compute.get_vm, "subscription"),
    ("PUT", _VM + r"/(?P<name>[^/]+)", compute.put_vm, "subscription"),
    ("DELETE", _VM + r"/(?P<name>[^/]+)", compute.delete_vm, "subscription"),
    ("GET", _VM, compute.list_vms, "subscription"),
    (
        "GET",
        _SUB + r"/providers/microsoft\.compute/virtualmachines",
        compute.list_all_vms,
        "subscription",
    ),
    ("GET", _NIC + r"/(?P<name>[^/]+)", network.get_nic, "subscription"),
    ("PUT", _NIC + r"/(?P<name>[^/]+)", network.put_nic, "subscription"),
    ("DELETE", _NIC + r"/(?P<name>[^/]+)", network.delete_nic, "subscription"),
    ("GET", _NIC, network.list_nics, "subscription"),
    (
        "GET",
        _SUB + r"/providers/microsoft\.network/networkinterfaces",
        network.list_all_nics,
        "subscription",
    ),
    (
        "GET",
        _RG
        + r"/providers/microsoft\.network/virtualnetworks/(?P<vnet>[^/]+)/subnets/(?P<name>[^/]+)",
        network.get_subnet,
        "subscription",
    ),
    ("GET", _COMMUNITY, galleries.list_community_versions, "subscription"),
    ("GET", _COMMUNITY + r"/(?P<version>[^/]+)", galleries.get_community_version, "subscription"),
    ("GET", _GALLERY, galleries.list_gallery_versions, "gallery"),
    ("GET", _GALLERY + r"/(?P<version>[^/]+)", galleries.get_gallery_version, "gallery"),
    (
        "GET",
        _SUB + r"/providers/(?P<namespace>microsoft\.compute|microsoft\.network)"
        r"/locations/(?P<location>[^/]+)/operations/(?P<operation>[^/]+)",
        _get_operation,
        "subscription",
    ),
    ("GET", r"/api/retail/prices", _list_prices, "public"),
]
_COMPILED = [(m, re.compile(p + r"/?$", re.IGNORECASE), h, s) for m, p, h, s in _ROUTES]


def route(method: str, path: str) -> tuple[Handler, Scope, dict[str, str]] | None:
    """The handler, its scope and the path parameters for ``method`` on ``path``; None for an
    unknown path; ``ArmError`` 405 for a known path and another method."""
    known_path = False
    for route_method, pattern, handler, scope in _COMPILED:
        match = pattern.match(path)
        if match:
            known_path = True
            if route_method == method:
                return handler, scope, match.groupdict()
    if known_path:
        raise ArmError(405, "MethodNotAllowed", f"{method} is not allowed on {path}.")
    return None


class ArmState(ArmStore):
    """An ``ArmStore`` that answers ARM requests (thread-safe)."""

    # -- request handling ----------------------------------------------------------------

    def handle(self, method: str, path: str, query: str, body: Any) -> Answer:
        """Answer one request (the path without query; the query string as sent)."""
        params = {k: v[-1] for k, v in parse_qs(query, keep_blank_values=True).items()}
        try:
            found = route(method, path)
            if found is None:
                return 404, arm_error("NotFound", f"No route for {method} {path}."), {}
            handler, scope, args = found
            if scope != "public" and "api-version" not in params:
                raise bad(
                    "MissingApiVersionParameter",
                    "The api-version query parameter (?api-version=) is required for all requests.",
                )
            with self.lock:
                self._advance()
                self._check_scope(scope, args)
                return handler(self, args, params, body)
        except ArmError as error:
            return error.status, error.body, {}

    def _check_scope(self, scope: Scope, args: Mapping[str, str]) -> None:
        sub = args.get("sub")
        if sub is None:
            return
        gallery = scope == "gallery"
        allowed = {self.subscription_id.lower()} | (
            {seed.SIG_SUBSCRIPTION_ID} if gallery else set()
        )
        if sub.lower() not in allowed:
            raise ArmError(
                404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found."
            )
        group = args.get("rg")
        if group is not None and not gallery and group.lower() not in self.resource_groups:
            raise ArmError(
                404, "ResourceGroupNotFound", f"Resource group '{group}' could not be found."
            )
