"""Karpenter provider for AWS."""
