"""A stateful fake of the Azure Resource Manager API for the Azure provider's tests.

``FakeARM`` serves, over HTTPS on 127.0.0.1 with a throw-away CA, the ARM calls the provider
makes (resource SKUs, virtual machines and network interfaces with long-running operations,
subnets, AKS node image versions), the Retail Prices API and a Microsoft Entra ID token
endpoint, so that azure-identity and the azure-mgmt-compute / azure-mgmt-network clients run
against it unmodified. See README.md in this directory.
"""

from karpenter_azure.fake_arm.faults import CapacityFault, FaultError, RequestFault
from karpenter_azure.fake_arm.log import RequestLog, RequestRecord, Violation
from karpenter_azure.fake_arm.server import FakeARM
from karpenter_azure.fake_arm.state import Latency

__all__ = [
    "CapacityFault",
    "FakeARM",
    "FaultError",
    "Latency",
    "RequestFault",
    "RequestLog",
    "RequestRecord",
    "Violation",
]
