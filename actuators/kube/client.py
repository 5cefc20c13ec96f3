"""Connecting the official ``kubernetes`` client, and classifying its errors.

Place in the loop: used by ``KubernetesBackend``. ``connect`` loads in-cluster credentials when
running in a Pod (service account token), else a kubeconfig (``$KUBECONFIG`` or the given file and
context). The client's own urllib3 retries are turned off: the actuator engine retries with
backoff and re-observes, so a retry never repeats a stale change.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from actuators.base import PermanentError, TemporaryError

T = TypeVar("T")
_TEMPORARY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


def connect(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """An ApiClient: in-cluster when ``KUBERNETES_SERVICE_HOST`` is set and no kubeconfig is given."""
    configuration = client.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    return api_client(configuration)


def token_client(url: str, token: str, ca_file: str) -> client.ApiClient:
    """An ApiClient for a bearer token and the API server's CA (a benchmark's private server)."""
    configuration = client.Configuration()
    configuration.host, configuration.ssl_ca_cert = url, ca_file
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return api_client(configuration)


def api_client(configuration: client.Configuration) -> client.ApiClient:
    configuration.retries = False
    return client.ApiClient(configuration)


def _detail(exc: ApiException) -> str:
    try:
        return f": {json.loads(exc.body or '')['message']}"
    except (TypeError, ValueError, KeyError):
        return ""


def call(what: str, fn: Callable[[], T]) -> T:
    """Run one API call, mapping failures to TemporaryError / PermanentError."""
    try:
        return fn()
    except ApiException as exc:
        status = int(exc.status or 0)
        message = f"{what}: HTTP {status} {exc.reason}{_detail(exc)}"
        if status == 0 or status in _TEMPORARY_STATUS:
            raise TemporaryError(message) from exc
        raise PermanentError(message) from exc
    except (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError, OSError) as exc:
        raise TemporaryError(f"{what}: {type(exc).__name__}: {exc}") from exc
