"""Offerings EC2 recently could not fulfil (insufficient capacity), remembered for upstream's
three minutes: the SDK's cache (``karpenter_core.sdk.offerings``)."""

from karpenter_core.sdk.offerings import UNAVAILABLE_OFFERINGS_TTL, UnavailableOfferings

__all__ = ["UNAVAILABLE_OFFERINGS_TTL", "UnavailableOfferings"]
