"""Kubernetes backend of the actuators (official ``kubernetes`` client): Deployments, HPAs, Jobs."""

from actuators.kube.backend import KubernetesBackend
from actuators.kube.client import api_client, connect

__all__ = ["KubernetesBackend", "api_client", "connect"]
