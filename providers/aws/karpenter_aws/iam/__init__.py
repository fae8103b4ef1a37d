"""The controller's least-privilege IAM policy (``controller-policy.json``), rendered.

The document holds placeholders (``PLACEHOLDERS``) that ``policy_document`` fills in; see the
README next to it.
"""

from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any

__all__ = ["PLACEHOLDERS", "partition", "policy_document", "template"]

PLACEHOLDERS = frozenset(
    {
        "AWS_PARTITION",
        "AWS_REGION",
        "AWS_ACCOUNT_ID",
        "CLUSTER_NAME",
        "INTERRUPTION_QUEUE",
        "NODE_ROLE",
    }
)
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z0-9_]+)\}")


def template() -> str:
    """The policy document's text, placeholders unfilled."""
    path = resources.files(__package__).joinpath("controller-policy.json")
    return path.read_text(encoding="utf-8")


def partition(region: str) -> str:
    """The AWS partition a region belongs to (``aws``, ``aws-cn`` or ``aws-us-gov``)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def policy_document(
    cluster_name: str,
    region: str,
    account_id: str,
    queue: str,
    *,
    node_role: str | None = None,
) -> dict[str, Any]:
    """The policy for one cluster. ``queue`` is the interruption queue's name or URL;
    ``node_role`` the role nodes run as (default ``KarpenterNodeRole-<cluster_name>``)."""
    values = {
        "AWS_PARTITION": partition(region),
        "AWS_REGION": region,
        "AWS_ACCOUNT_ID": account_id,
        "CLUSTER_NAME": cluster_name,
        "INTERRUPTION_QUEUE": queue.rstrip("/").rsplit("/", 1)[-1],
        "NODE_ROLE": node_role or f"KarpenterNodeRole-{cluster_name}",
    }
    for name, value in values.items():
        if not value:
            raise ValueError(f"IAM policy: {name} is empty")
    text = _PLACEHOLDER.sub(lambda match: json.dumps(values[match.group(1)])[1:-1], template())
    return json.loads(text)
