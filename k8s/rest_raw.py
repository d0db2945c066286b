"""The few write calls the launcher makes per pod, sent the cheapest way the official client allows.

The generated client serializes a body by walking it in Python (every dict and
list element), validates its arguments through pydantic and decodes answers
into typed models; for a pod that is several times the work of the API call
itself. ``RawApi`` keeps what matters from the client - its configuration,
authentication (``param_serialize`` with the client's auth settings, so
refreshed tokens and client certificates work as usual) and its urllib3 pool
(TLS, proxies, connection reuse) - and sends bytes that ``json.dumps`` (C)
made, reading the answer without decoding it.

Refusals raise the client's own ``ApiException`` with ``status``, ``reason``
and ``body`` set, so callers handle both paths alike.
"""
from __future__ import annotations

import json
from typing import Optional
from urllib.parse import quote, urlencode

from kubernetes import client
from kubernetes.client.rest import ApiException

_AUTH = ["BearerToken"]
_JSON = {"Content-Type": "application/json", "Accept": "application/json"}


class RawApi:
    """POST/DELETE of namespaced pods (and their bindings) with pre-serialized JSON bodies."""

    def __init__(self, api_client: client.ApiClient, timeout: Optional[float] = 30.0):
        self.api = api_client
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Optional[bytes], query: Optional[dict] = None) -> bytes:
        _, url, headers, _, _ = self.api.param_serialize(method, path, header_params=dict(_JSON),
                                                         auth_settings=_AUTH)
        if query:
            url = f"{url}?{urlencode(query)}"
        r = self.api.rest_client.pool_manager.request(method, url, body=body, headers=headers,
                                                      timeout=self.timeout, preload_content=False)
        try:
            data = r.read()
        finally:
            r.release_conn()
        if not 200 <= r.status < 300:
            e = ApiException(status=r.status, reason=r.reason)
            e.body = data
            e.headers = r.headers
            raise e
        return data

    @staticmethod
    def _pods(ns: str) -> str:
        return f"/api/v1/namespaces/{quote(ns, safe='')}/pods"

    def create_pod(self, ns: str, pod: dict) -> bytes:
        return self._request("POST", self._pods(ns), json.dumps(pod, separators=(",", ":")).encode())

    def bind_pod(self, ns: str, name: str, binding: dict) -> bytes:
        return self._request("POST", f"{self._pods(ns)}/{quote(name, safe='')}/binding",
                             json.dumps(binding, separators=(",", ":")).encode())

    def delete_pod(self, ns: str, name: str, grace_period_seconds: int) -> bytes:
        body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                           "gracePeriodSeconds": int(grace_period_seconds)}).encode()
        return self._request("DELETE", f"{self._pods(ns)}/{quote(name, safe='')}", body)
