"""Print the CloudFormation template: ``python -m karpenter_aws.cloudformation > karpenter.yaml``."""

import sys

from karpenter_aws.cloudformation import template

sys.stdout.write(template())
