"""Conformance tooling for karpenter-py: a real local cluster and pytest fixtures for it."""
