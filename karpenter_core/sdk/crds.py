"""NodeClass CRDs: generated from the provider's pydantic model, rendered as YAML."""

from karpenter_core.apis.crdgen import KubeSchema, PrinterColumn, cel, generate_crd
from karpenter_core.cli.crds import render_crd

__all__ = ["KubeSchema", "PrinterColumn", "cel", "generate_crd", "render_crd"]
