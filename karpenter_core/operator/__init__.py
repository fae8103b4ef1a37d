"""The operator infrastructure: settings, the Kubernetes client, informers, the shared cluster
state, leader election, metrics, events, probes and logs, and the ``Operator`` that runs the
controllers."""
