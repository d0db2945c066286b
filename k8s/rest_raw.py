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

Transient failures - the connection refused or broken (an API server
restarting), 429 and 5xx answers - are retried with exponential back-off for
up to ``retry_for`` seconds, so a few seconds of outage cost a delay, not a
failed attempt. A retried write whose first try did reach the server is
recognised: a create answered 409 AlreadyExists, a binding answered 409
(already bound) and a delete answered 404 count as done.
"""
from __future__ import annotations

import json
import logging
import time
from urllib.parse import quote, urlencode

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

log = logging.getLogger("hived.k8s.rest")
TRANSIENT = (429, 500, 502, 503, 504)

_AUTH = ["BearerToken"]
_JSON = {"Content-Type": "application/json", "Accept": "application/json"}


def _body(e: ApiException) -> bytes:
    """The failed call's body as bytes (``{}`` when it had none)."""
    body = e.body
    if isinstance(body, bytes):   # typed str, but a raw call's failure carries the bytes it read
        return body or b"{}"
    return (body or "{}").encode()


def send(call, *args, **kw) -> bytes:
    """One call of the generated client without its model decoding; the body is read and the connection
    handed back to the pool (an unread response would cost a new TLS handshake per call)."""
    resp = call(*args, _preload_content=False, **kw)
    try:
        return resp.read()
    finally:
        resp.release_conn()


def api_message(e: ApiException) -> str:
    """What the API server said when it refused a call (its Status message, else the HTTP reason)."""
    try:
        return json.loads(e.body or "").get("message") or str(e.reason)
    except Exception:
        return str(e.reason)


class RawApi:
    """POST/DELETE of namespaced pods (and their bindings) with pre-serialized JSON bodies."""

    def __init__(self, api_client: client.ApiClient, timeout: float | None = 30.0, retry_for: float = 30.0):
        self.api = api_client
        self.timeout = timeout
        self.retry_for = retry_for

    def _request(self, method: str, path: str, body: bytes | None, query: dict | None = None,
                 done_if: tuple = ()) -> bytes:
        """One call, retried while the failure is transient; ``done_if``: statuses that mean a
        retried write had already been applied."""
        deadline, delay, retried = time.monotonic() + self.retry_for, 0.1, False
        while True:
            try:
                return self._once(method, path, body, query)
            except ApiException as e:
                if retried and e.status in done_if:
                    return _body(e)
                if e.status not in TRANSIENT or time.monotonic() + delay > deadline:
                    raise
                why = f"{e.status} {e.reason}"
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if time.monotonic() + delay > deadline:
                    raise
                why = f"{e.__class__.__name__}"
            log.info("%s %s: %s; retrying in %.1fs", method, path, why, delay)
            time.sleep(delay)
            delay, retried = min(delay * 2, 5.0), True

    def _once(self, method: str, path: str, body: bytes | None, query: dict | None) -> bytes:
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
            e.body = data   # type: ignore[assignment]  # typed str; the raw API keeps the bytes it read
            e.headers = r.headers
            raise e
        return data

    @staticmethod
    def _pods(ns: str) -> str:
        return f"/api/v1/namespaces/{quote(ns, safe='')}/pods"

    def create_pod(self, ns: str, pod: dict) -> bytes:
        return self._request("POST", self._pods(ns), json.dumps(pod, separators=(",", ":")).encode(),
                             done_if=(409,))

    def bind_pod(self, ns: str, name: str, binding: dict) -> bytes:
        return self._request("POST", f"{self._pods(ns)}/{quote(name, safe='')}/binding",
                             json.dumps(binding, separators=(",", ":")).encode(), done_if=(409,))

    def create_service(self, ns: str, service: dict) -> bytes:
        """Create a Service; one of that name already there (an earlier attempt's) is fine."""
        return self._create_named(ns, "services", service)

    def delete_service(self, ns: str, name: str) -> bytes:
        return self._delete_named(ns, "services", name)

    def create_secret(self, ns: str, secret: dict) -> bytes:
        """Create a Secret; one of that name already there (an earlier attempt's, same content) is fine."""
        return self._create_named(ns, "secrets", secret)

    def delete_secret(self, ns: str, name: str) -> bytes:
        return self._delete_named(ns, "secrets", name)

    def _create_named(self, ns: str, kind: str, body: dict) -> bytes:
        try:
            return self._request("POST", f"/api/v1/namespaces/{quote(ns, safe='')}/{kind}",
                                 json.dumps(body, separators=(",", ":")).encode(), done_if=(409,))
        except ApiException as e:
            if e.status == 409:
                return _body(e)
            raise

    def _delete_named(self, ns: str, kind: str, name: str) -> bytes:
        return self._request("DELETE", f"/api/v1/namespaces/{quote(ns, safe='')}/{kind}/{quote(name, safe='')}",
                             None, done_if=(404,))

    def create_event(self, ns: str, body: bytes) -> bytes:
        return self._request("POST", f"/api/v1/namespaces/{quote(ns, safe='')}/events", body)

    def delete_pod(self, ns: str, name: str, grace_period_seconds: int) -> bytes:
        body = json.dumps({"kind": "DeleteOptions", "apiVersion": "v1",
                           "gracePeriodSeconds": int(grace_period_seconds)}).encode()
        return self._request("DELETE", f"{self._pods(ns)}/{quote(name, safe='')}", body, done_if=(404,))
