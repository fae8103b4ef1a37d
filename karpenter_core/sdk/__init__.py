"""The provider SDK: everything a cloud provider needs from the core, in one versioned place.

A provider distribution imports from the core only this package's modules and
``karpenter_core.apis`` (an import-linter contract keeps it so). The modules re-export the
core's provider-facing names from wherever the core's layers keep them, and hold the machinery
two providers would otherwise each write: so the core can move its insides without breaking a
provider, and a provider written today keeps working until ``API_VERSION`` changes.

- ``record``: the registration record, the factory's context, option declarations (and their
  flags and variables), ``hookimpl``, the package files a record points at, and whether the
  context is offline (``is_offline``, ``offline_default``, ``offline_fallback``).
- ``types``: the ``CloudProvider`` protocol, instance types and offerings, the errors a provider
  raises, and the requirement algebra.
- ``nodeclass``: NodeClass readiness (``ReadyByConditions``), conditions, Ready's verdict and a
  resolved status for a status controller, the wording of a manifest's problems, and
  ``NodeClassBinding`` (a kind read through the context's view: lookup, readiness, launchable).
- ``fields``: validators of NodeClass model fields (``checked``).
- ``machines``: cloud machines as the NodeClaims ``create``, ``get`` and ``list`` return.
- ``launch``: the offering a launch takes (the cheapest a NodeClaim allows), and the labels and
  the registration taint a kubelet registers its node with.
- ``nodeclaims``: the NodeClaim calls of a provider's own controllers (list, delete, a Node's
  uid).
- ``clients``: a provider's cloud clients by name, handed in or built once on first use.
- ``kubelet``: kubelet flags of a NodeClass's set values, and taints as the kubelet takes them.
- ``reserved``: node overhead: reservations charged by tiers of a node's size, and the
  kubelet's reservations and eviction thresholds as a NodeClass writes them.
- ``kubeletconfig``: upstream Karpenter's kubelet settings model of a NodeClass, with its rules.
- ``rules``: a validation rule written once for the model (Python) and the CRD (CEL).
- ``nodeimages``: the node label requirements of a node image in a NodeClass status.
- ``status``: the NodeClass status controller a provider subclasses, and the steps every
  ``resolve`` shares (a condition kept across a failed cloud call, the apiserver's gitVersion).
- ``crds``: NodeClass CRD generation and rendering, and the writer of a provider's shipped CRD
  files (``python -m karpenter_core.sdk.crds <provider>``).
- ``offerings``: the cache of offerings a cloud recently refused, with their TTLs.
- ``catalog``: cloud data refreshed on a TTL (in the caller or in the background), packaged
  data, and instance types cached per NodeClass inputs.
- ``convert``: what a NodeClass converter for ``karpenter convert`` builds on.
- ``observe``: structured logs and the metrics registry.
- ``settings``: typed parsers of option values and ``OptionReader``, which names the option's
  flag in every error.
- ``versions``: the record's versions, what each changed and what a provider does to move up.
- ``profiles``: what a conformance profile builds on (an environment overlay, NodeClass
  conditions as manifests).
- ``testing``: for tests and fakes only (no runtime module imports it): a test certificate
  authority, loopback HTTP(S) servers, and NodeClasses on a real apiserver.
- ``fakehttp``: for fakes only, like ``testing``: a fake cloud API's JSON request handler, its
  request log (with the Retry-After check), counted faults, and its life on a server thread or
  as a process.

Compatibility: a change to these modules either stays compatible (new optional names, new
optional record fields) or raises ``API_VERSION``; discovery refuses a provider built for
another version with a message naming what changed.
"""

from karpenter_core.cloudprovider.plugin import API_VERSION

__all__ = ["API_VERSION"]
