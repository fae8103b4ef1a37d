"""Karpenter provider for Azure."""
