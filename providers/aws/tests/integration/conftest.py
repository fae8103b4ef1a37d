"""The controller fixtures of the core's end-to-end tests (the controller's least-privilege
identity and running controllers), shared with the AWS provider's."""

from tests.integration.conftest import controller_kubeconfig, start_controller

__all__ = ["controller_kubeconfig", "start_controller"]
