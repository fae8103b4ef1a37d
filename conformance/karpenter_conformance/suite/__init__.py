"""The provider conformance suite: checks any provider runs against a fake of its cloud.

The contract level (``test_contract``) checks the provider alone, without a cluster. Run it with
``pytest --pyargs karpenter_conformance.suite --karpenter-provider NAME`` or
``karpenter conformance --provider NAME``. The cluster level (``test_cluster``) runs the
controller on a local KWOK cluster; add ``--cluster``.
"""
