"""HTTP for the REST client, on the standard library's ``http.client``.

What the client needs from ``requests``, without the tenth of a second that
importing it costs every ``hived`` command:
- keep-alive connections, one per thread (the dashboards refresh from a
  thread while the notebook submits), reopened when the server dropped them;
- https checked like ``requests`` does: ``$REQUESTS_CA_BUNDLE`` or
  ``$CURL_CA_BUNDLE`` when set, else certifi's bundle, else the system's;
- the proxies of ``$HTTP_PROXY``/``$HTTPS_PROXY``/``$NO_PROXY``;
- redirects followed on the same origin only (the token never goes elsewhere).
"""
from __future__ import annotations

import http.client
import os
import select
import threading
from typing import TYPE_CHECKING
from urllib.parse import urljoin, urlsplit

if TYPE_CHECKING:
    import ssl

Connection = http.client.HTTPConnection   # HTTPSConnection is one too
_REDIRECTS = (301, 302, 303, 307, 308)
_MAX_REDIRECTS = 5


class TransportError(Exception):
    """No answer: the connection could not be made or broke off. ``cause`` names
    what went wrong in a word or two (``ConnectionRefusedError``, ``timed out``)."""

    def __init__(self, message: str, cause: str = "") -> None:
        super().__init__(message)
        self.cause = cause or message


class TransportTimeout(TransportError):
    """No answer within the timeout."""


class Answer:
    """One answer, read whole. ``location``: a redirect to another origin, not followed."""

    __slots__ = ("status", "reason", "body", "url", "location")

    def __init__(self, status: int, reason: str, body: bytes, url: str,
                 location: str | None = None) -> None:
        self.status, self.reason, self.body, self.url, self.location = status, reason, body, url, location

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def _origin(url: str) -> tuple[str, str, int]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise TransportError(f"not an http(s) URL: {url!r}")
    return scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80)


def _proxy_for(scheme: str, host: str) -> str | None:
    """The proxy URL the environment names for this host, if any."""
    if not any(k.lower().endswith("_proxy") for k in os.environ):
        return None          # the usual case: no need to import urllib.request
    from urllib.request import getproxies_environment, proxy_bypass
    proxy = getproxies_environment().get(scheme)
    if not proxy or proxy_bypass(host):
        return None
    return proxy if "://" in proxy else "http://" + proxy


def _tls_context() -> ssl.SSLContext:
    import ssl  # here: only https pays for it
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if not bundle:
        try:
            import certifi
            bundle = certifi.where()
        except ImportError:
            bundle = None
    return ssl.create_default_context(cafile=bundle)


class _Pooled:
    """A kept-alive connection; ``absolute``: through a plain http proxy, whose
    request line names the whole URL."""

    __slots__ = ("conn", "absolute")

    def __init__(self, conn: Connection, absolute: bool = False) -> None:
        self.conn, self.absolute = conn, absolute


def _open(scheme: str, host: str, port: int, timeout: float) -> _Pooled:
    proxy = _proxy_for(scheme, host)
    if proxy is None:
        if scheme == "https":
            return _Pooled(http.client.HTTPSConnection(host, port, timeout=timeout, context=_tls_context()))
        return _Pooled(http.client.HTTPConnection(host, port, timeout=timeout))
    p_scheme, p_host, p_port = _origin(proxy)
    if scheme == "https":
        # CONNECT through the proxy, then TLS with the service itself
        tunnel = http.client.HTTPSConnection(p_host, p_port, timeout=timeout, context=_tls_context())
        tunnel.set_tunnel(host, port)
        return _Pooled(tunnel)
    conn: Connection
    if p_scheme == "https":
        conn = http.client.HTTPSConnection(p_host, p_port, timeout=timeout, context=_tls_context())
    else:
        conn = http.client.HTTPConnection(p_host, p_port, timeout=timeout)
    return _Pooled(conn, absolute=True)


def _dropped(conn: Connection) -> bool:
    """Whether the server closed an idle keep-alive connection (it reads as ready)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):     # select.select cannot watch descriptors above 1023
            watch = select.poll()
            watch.register(sock, select.POLLIN)
            return bool(watch.poll(0))
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


class HttpJson:
    """Requests to one service; thread-safe (each thread has its own connections)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def _pool(self) -> dict[tuple[str, str, int], _Pooled]:
        pool: dict[tuple[str, str, int], _Pooled] = self._local.__dict__.setdefault("pool", {})
        return pool

    def _connection(self, key: tuple[str, str, int], timeout: float) -> tuple[_Pooled, bool]:
        """(connection, reused) for this origin in this thread."""
        pool = self._pool()
        held = pool.get(key)
        if held is not None and not _dropped(held.conn):
            held.conn.timeout = timeout
            if held.conn.sock is not None:
                held.conn.sock.settimeout(timeout)
            return held, True
        if held is not None:
            held.conn.close()
        held = pool[key] = _open(*key, timeout)
        return held, False

    def _forget(self, key: tuple[str, str, int]) -> None:
        held = self._pool().pop(key, None)
        if held is not None:
            held.conn.close()

    def _once(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
              timeout: float) -> Answer:
        key = _origin(url)
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            held, reused = self._connection(key, timeout)
            try:
                held.conn.request(method, url if held.absolute else path, body=body, headers=headers)
                r = held.conn.getresponse()
                data = r.read()
            except TimeoutError as exc:
                self._forget(key)
                raise TransportTimeout(str(exc) or "timed out", "timed out") from None
            except (OSError, http.client.HTTPException) as exc:
                self._forget(key)
                # a kept-alive connection the server closed as we spoke: once more on a new one,
                # unless the request may have been acted on (only reads are repeated)
                if reused and attempt == 0 and method == "GET":
                    continue
                raise TransportError(f"{type(exc).__name__}: {exc}", type(exc).__name__) from None
            if r.will_close:
                self._forget(key)
            return Answer(r.status, r.reason, data, url, r.getheader("Location"))
        raise AssertionError("unreachable")

    def request(self, method: str, url: str, *, body: bytes | None = None,
                headers: dict[str, str] | None = None, timeout: float = 30.0) -> Answer:
        """Send one request and read the whole answer; same-origin redirects are followed
        (a 301/302/303 turns into a GET, as browsers and ``requests`` do)."""
        headers = dict(headers or {})
        for _ in range(_MAX_REDIRECTS + 1):
            answer = self._once(method, url, body, headers, timeout)
            if answer.status not in _REDIRECTS or not answer.location:
                answer.location = None
                return answer
            target = urljoin(url, answer.location)
            if _origin(target) != _origin(url):
                answer.location = target
                return answer     # the caller says where it was sent; the token stays here
            if answer.status in (301, 302, 303) and method != "HEAD":
                method, body = "GET", None
                headers.pop("Content-Type", None)
            url = target
        raise TransportError(f"more than {_MAX_REDIRECTS} redirects from {url}")

    def close(self) -> None:
        """Close this thread's connections."""
        for held in self._local.__dict__.pop("pool", {}).values():
            held.conn.close()
