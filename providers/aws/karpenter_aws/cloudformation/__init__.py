"""The AWS set-up of a cluster as a CloudFormation template (``karpenter.yaml``).

The stack holds the nodes' IAM role, the controller's managed policy (the same document as
``karpenter_aws/iam/controller-policy.json``), the interruption queue with its queue policy and
the EventBridge rules feeding it. It has no instance profile: the controller creates one per
EC2NodeClass from the node role. ``python -m karpenter_aws.cloudformation`` prints the template.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["TEMPLATE_FILE", "template"]

TEMPLATE_FILE = "karpenter.yaml"


def template() -> str:
    """The template's text (YAML with CloudFormation's short-form functions)."""
    return resources.files(__package__).joinpath(TEMPLATE_FILE).read_text(encoding="utf-8")
