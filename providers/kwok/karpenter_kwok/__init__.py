"""Karpenter's KWOK provider: fake nodes for testing and benchmarking the core."""
