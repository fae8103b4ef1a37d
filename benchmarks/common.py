"""What the benchmark scripts share (they import it as ``common``: Python puts the script's
folder first on the path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

KWOK_NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
ROOT = Path(__file__).resolve().parent.parent


def in_fresh_process(script: str, function: str, *args: str) -> dict[str, Any]:
    """Run ``function`` of the benchmark script ``script`` (``azure_provider``) in a new
    interpreter, from the repository's root; its JSON result (the last line it prints)."""
    code = (
        f"import json, sys; sys.path.insert(0, 'benchmarks'); import {script} as b; "
        f"print(json.dumps(b.{function}(*sys.argv[1:])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def nodeclaim(name: str, node_class_ref: Mapping[str, str]) -> Any:
    """A NodeClaim of the NodePool ``default`` asking for 1 CPU and 2Gi, spot or on-demand."""
    from karpenter_core.apis.v1.nodeclaim import NodeClaim

    return NodeClaim.model_validate(
        {
            "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {
                "nodeClassRef": dict(node_class_ref),
                "requirements": [
                    {
                        "key": "karpenter.sh/capacity-type",
                        "operator": "In",
                        "values": ["spot", "on-demand"],
                    }
                ],
                "resources": {"requests": {"cpu": "1", "memory": "2Gi"}},
            },
        }
    )


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
