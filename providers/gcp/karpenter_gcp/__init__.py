"""Karpenter provider for Google Cloud."""
