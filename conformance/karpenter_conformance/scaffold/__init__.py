"""``karpenter new-provider``: a provider package that passes the conformance suite as
generated (``generate``), and the command (``command.new_provider``)."""
