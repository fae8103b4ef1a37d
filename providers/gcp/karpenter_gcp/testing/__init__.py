"""A fake Compute Engine REST server for the GCP provider's tests (no GCE emulator exists).

``FakeGCE`` serves, over plain HTTP on 127.0.0.1, the Compute v1 calls the provider makes
(zones, machine types, images, instances with zone operations, subnetworks, instance
templates), GKE's node pool read and the Cloud Billing Catalog, so that google-cloud-compute and
google-cloud-billing run against it unmodified, with anonymous credentials. Faults (stockouts,
quota, 429, 503) and preemptions are injected from the test; every request is logged.
``python -m karpenter_gcp.testing`` runs it as a process.
"""

from karpenter_gcp.testing.faults import CapacityFault, Faults
from karpenter_gcp.testing.server import FakeGCE

__all__ = ["CapacityFault", "FakeGCE", "Faults"]
