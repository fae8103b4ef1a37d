"""What the benchmark scripts share (they import it as ``common``: Python puts the script's
folder first on the path)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

KWOK_NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}


def nodepool(
    requirements: Sequence[Mapping[str, Any]],
    node_class_ref: Mapping[str, str] = KWOK_NODE_CLASS,
    **spec: Any,
) -> Any:
    """The NodePool ``default`` with these template requirements; ``spec`` adds fields such as
    ``limits`` or ``disruption``."""
    from karpenter_core.apis.v1.nodepool import NodePool

    return NodePool.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "nodeClassRef": dict(node_class_ref),
                        "requirements": [dict(r) for r in requirements],
                    }
                },
                **spec,
            },
        }
    )


def process_usage(pid: int) -> tuple[float, float]:
    """(peak resident set in MB (VmHWM), CPU seconds) of a live process."""
    peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    return peak, ticks / os.sysconf("SC_CLK_TCK")
