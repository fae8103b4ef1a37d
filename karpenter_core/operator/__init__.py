"""The operator infrastructure: settings, the Kubernetes client, leader election, metrics,
events, probes and logs, and the ``Operator`` that runs the controllers (the informers and the
shared cluster state are ``karpenter_core.state``)."""
