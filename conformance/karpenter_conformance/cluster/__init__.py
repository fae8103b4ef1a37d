"""A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK) built from Go modules and run as processes on 127.0.0.1."""
