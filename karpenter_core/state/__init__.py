"""The cluster as the controllers see it: list-then-watch informers (``informer``) and the one
shared in-memory view built on them (``cluster.ClusterState``)."""
