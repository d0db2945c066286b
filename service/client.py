"""The Python client of hived's REST API.

Every door that is not the server itself (the CLI, the magics, the widgets,
the MLflow backend) talks to the scheduler through this one class, so that
finding the service, authenticating and turning refusals into readable errors
happen in one place.

Finding the service, first match wins:
1. ``url=`` / ``token=`` given to the constructor;
2. ``$HIVED_URL`` / ``$HIVED_TOKEN``;
3. inside a JupyterHub session: the Hub's hived service, with the user's own
   token (hub_discovery.py);
4. inside a Jupyter kernel: the Jupyter server that runs this kernel (hived's
   extension is enabled in it);
5. the ``server.json`` that ``hived serve`` wrote in the data directory
   (``data_dir=``, ``$HIVED_DATA_DIR``, then ``/var/lib/hived`` for root,
   ``~/.hived`` for anyone else).

HTTP goes through the standard library's ``http.client`` (``http_json.py``)
rather than ``requests``: a ``hived`` command is over in a fraction of a
second, and importing ``requests`` alone would take a good part of that.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from hived.core.jobs import TERMINAL, state_values

from .http_json import Answer, HttpJson, TransportError, TransportTimeout

TERMINAL_STATES = state_values(TERMINAL)   # the jobs' states on the wire (hived.core.jobs defines them)
USER_HEADER = "X-Hived-User"  # honoured only by servers configured to trust it (see docs/jupyter.md)


# ``where`` values that name a whole request or a route, not a field of it
_NOT_FIELDS = ("body", "query", "cluster", "vcs", "status", "summary", "jobs", "exchange")


class HivedError(Exception):
    """A refusal or failure from the service; ``str(e)`` is one readable line."""

    def __init__(self, status: int, message: str, where: str | None = None):
        super().__init__(status, message, where)
        self.status = status
        self.message = message
        self.where = where

    @property
    def field(self) -> str:
        """The request field the refusal is about ("" when it is about a route or the whole body)."""
        field = self.where or ""
        if field.startswith(("body.", "query.")):
            field = field.split(".", 1)[1]
        if "/" in field or field in _NOT_FIELDS:
            return ""   # a route or the whole request: the message says what was wrong
        return field

    def line(self) -> str:
        """``field: problem``, the one-line form every door prints (docs/cli.md)."""
        if not self.status:   # no answer at all: where we looked is the useful part
            return self.message if not self.where or self.where in self.message \
                else f"{self.message} (looked in {self.where})"
        field = self.field
        if field and not self.message.startswith(field + ":"):
            return f"{field}: {self.message}"
        return self.message

    def __str__(self) -> str:
        return f"hived: {self.line()}"


class HivedUnreachable(HivedError):
    """No hived service answers at the url (the message names the url)."""


class HivedTimeout(HivedError, TimeoutError):
    """``wait`` ran out of time before the job reached a terminal state."""


def default_data_dir(data_dir: str | None = None) -> Path:
    """The data directory: ``data_dir``, else ``$HIVED_DATA_DIR``, else ``/var/lib/hived`` for
    root (a system service: its local jobs run under per-VC accounts, which must be able to
    pass through the folders above it, and root's home is private), else ``~/.hived``."""
    fallback = "/var/lib/hived" if os.geteuid() == 0 else "~/.hived"
    return Path(data_dir or os.environ.get("HIVED_DATA_DIR") or fallback).expanduser()


def read_server_file(data_dir: str | None = None) -> dict | None:
    """The ``{"url","token","pid"}`` of a live ``hived serve``, or None (absent or stale)."""
    path = default_data_dir(data_dir) / "server.json"
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    if isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return None  # left behind by a server that died
        except PermissionError:
            pass  # alive, owned by someone else
    if not isinstance(info.get("url"), str):
        return None
    return info


def _own_jupyter_server() -> dict | None:
    """The Jupyter server running this kernel, when we are inside one.

    The kernel knows only its connection file (``kernel-<id>.json``); the
    server that owns that kernel id is the one listing it at ``/api/kernels``.
    """
    if "ipykernel" not in sys.modules:
        return None   # a kernel has imported it long before us: this is a plain process (the CLI)
    try:
        from ipykernel.connect import get_connection_file
        conn = get_connection_file()
    except Exception:  # not in a kernel (plain python, IPython terminal)
        return None
    kernel_id = Path(conn).stem.replace("kernel-", "", 1)
    try:
        from jupyter_server.serverapp import list_running_servers
        servers = list(list_running_servers())
    except Exception:
        return None
    http = HttpJson()
    try:
        for info in servers:
            url, token = info.get("url"), info.get("token", "")
            try:
                r = http.request("GET", url.rstrip("/") + "/api/kernels", timeout=2,
                                 headers={"Authorization": f"token {token}"} if token else {})
                if r.status < 400 and any(k.get("id") == kernel_id for k in json.loads(r.body)):
                    return {"url": url, "token": token}
            except (TransportError, ValueError, AttributeError):
                continue
    finally:
        http.close()
    return None


def find_service(url: str | None = None, token: str | None = None,
                 data_dir: str | None = None) -> tuple[str, str | None]:
    """(base url of the Jupyter server, token) following the order in the module doc."""
    if url:
        return url, token if token is not None else os.environ.get("HIVED_TOKEN")
    if os.environ.get("HIVED_URL"):
        return os.environ["HIVED_URL"], token if token is not None else os.environ.get("HIVED_TOKEN")
    from .hub_discovery import find_hub_service
    hub = find_hub_service()
    if hub:
        return hub["url"], token if token is not None else hub["token"]
    for info in (_own_jupyter_server(), read_server_file(data_dir)):
        if info:
            return info["url"], token if token is not None else info.get("token")
    where = default_data_dir(data_dir) / "server.json"
    raise HivedUnreachable(0, "no hived service found: set HIVED_URL (and HIVED_TOKEN) "
                              "or start one with 'hived serve'", str(where))


class HivedClient:
    """Calls ``<url>/hived/api/...``; answers are the JSON documents of docs/rest-api.md."""

    def __init__(self, url: str | None = None, token: str | None = None,
                 user: str | None = None, *, data_dir: str | None = None,
                 timeout: float = 30.0):
        base, self.token = find_service(url, token, data_dir)
        self.url = base.rstrip("/") + "/"
        self.api = self.url + "hived/api/"
        self.user = user if user is not None else os.environ.get("HIVED_USER")
        self.timeout = timeout
        self._http = HttpJson()
        self._headers = {"Accept": "application/json"}
        if self.token:
            self._headers["Authorization"] = f"token {self.token}"
        if self.user:
            self._headers[USER_HEADER] = self.user

    def __repr__(self) -> str:
        return f"HivedClient({self.url!r}, user={self.user!r})"

    # -- plumbing ---------------------------------------------------------
    def _call(self, method: str, route: str, *, params: dict | None = None,
              body: Any = None, timeout: float | None = None) -> Any:
        target = self.api + route + (f"?{urlencode(params)}" if params else "")
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = _json_body(body)
            headers["Content-Type"] = "application/json"
        wait = timeout or self.timeout
        try:
            r = self._http.request(method, target, body=data, headers=headers, timeout=wait)
        except TransportTimeout:
            raise HivedUnreachable(0, f"hived service at {self.url} did not answer in {wait:g} s",
                                   target) from None
        except TransportError as exc:
            raise HivedUnreachable(0, f"no hived service at {self.url} ({exc.cause})",
                                   self.url) from None
        if r.location:
            raise HivedError(r.status, f"{r.reason}: sent on to {r.location}, which is not this "
                                       f"service's API (a login page or a proxy?)", route)
        if r.status >= 400:
            raise self._error(r, route)
        if not r.body:
            return {}
        try:
            return json.loads(r.body)
        except ValueError:
            raise HivedError(r.status, f"answer is not JSON: {r.text[:120]!r}", route) from None

    @staticmethod
    def _error(r: Answer, route: str) -> HivedError:
        try:
            doc = json.loads(r.body)
            message, where = str(doc.get("error") or doc.get("message") or r.reason), doc.get("where")
        except (ValueError, AttributeError):
            # not our handler (proxy, missing extension, login redirect): say so briefly
            text = " ".join(r.text.split())[:160]
            message, where = f"{r.reason}: {text}" if text else str(r.reason), route
        if r.status == 404 and where is None:
            where = route
        return HivedError(r.status, message, where)

    def close(self) -> None:
        """Close the connections this thread holds (they are reopened when needed)."""
        self._http.close()

    # -- routes -----------------------------------------------------------
    def status(self) -> dict:
        """Who the service takes us for: user, admin, VCs, version."""
        return self._call("GET", "status")

    def summary(self) -> dict:
        """The service in numbers: jobs per state, recovery at start, unhealthy GPUs."""
        return self._call("GET", "summary")

    def cluster(self) -> dict:
        return self._call("GET", "cluster")

    def vcs(self) -> dict:
        return self._call("GET", "vcs")

    def vc(self, name: str) -> dict:
        return self._call("GET", f"vcs/{_seg(name)}")

    def submit(self, payload: dict) -> dict:
        return self._call("POST", "jobs", body=payload)

    def job(self, job_id: str) -> dict:
        return self._call("GET", f"jobs/{_seg(job_id)}")

    def jobs(self, vc: str | None = None, state: str | None = None,
             user: str | None = None) -> list[dict]:
        params = {k: v for k, v in (("vc", vc), ("state", state), ("user", user)) if v}
        return self._call("GET", "jobs", params=params)["jobs"]

    def cancel(self, job_id: str) -> dict:
        return self._call("POST", f"jobs/{_seg(job_id)}/cancel", body={})

    def kernel_activity(self, job_id: str) -> dict:
        """A kernel job ran a cell now (its provisioner says so): the VC's idle release counts from here."""
        return self._call("POST", f"jobs/{_seg(job_id)}/activity", body={})

    def kernel_connection(self, job_id: str) -> dict:
        """What a kernel job's pod reported of its kernel's connection (the job's owner only)."""
        return self._call("GET", f"jobs/{_seg(job_id)}/kernel-connection")

    def control(self, job_id: str, action: str) -> dict:
        """``hold``, ``release`` or ``requeue`` a job."""
        return self._call("POST", f"jobs/{_seg(job_id)}/{_seg(action)}", body={})

    def logs(self, job_id: str, rank: int = 0, offset: int = 0, follow: bool = False) -> dict:
        params = {"rank": rank, "offset": offset, "follow": 1 if follow else 0}
        # a follow request is held by the server until text arrives (<= ~20 s)
        return self._call("GET", f"jobs/{_seg(job_id)}/logs", params=params,
                          timeout=self.timeout + 30 if follow else None)

    def wait(self, job_id: str, poll: float = 1.0, timeout: float | None = None) -> dict:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("state") in TERMINAL_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise HivedTimeout(0, f"job {job_id} still {job.get('state')} after {timeout:g} s", job_id)
            time.sleep(poll)

    def gc(self, vc: str | None = None, dry_run: bool = False, policy: dict | None = None,
           disk_quota: Any = ...) -> dict:
        """``disk_quota``: bytes, or None to remove the VC's quota; left out: unchanged."""
        body: dict = {"dry_run": dry_run}
        if vc is not None:
            body["vc"] = vc
        if policy is not None:
            body["policy"] = policy
        if disk_quota is None:
            body["clear_disk_quota"] = True
        elif disk_quota is not ...:
            body["disk_quota"] = disk_quota
        return self._call("POST", "gc", body=body)

    def reload_spec(self, spec_text: str | None = None, path: str | None = None) -> dict:
        body: dict = {}
        if spec_text is not None:
            body["spec"] = spec_text
        if path is not None:
            body["path"] = path
        return self._call("POST", "spec/reload", body=body)

    # -- cell exchange ----------------------------------------------------
    def exchange(self, what: str = "board") -> Any:
        """GET exchange/{offers|requests|board|ledger}."""
        return self._call("GET", f"exchange/{_seg(what)}")

    def post_offer(self, payload: dict) -> dict:
        return self._call("POST", "exchange/offers", body=payload)

    def post_request(self, payload: dict) -> dict:
        return self._call("POST", "exchange/requests", body=payload)

    def withdraw(self, post_id: str) -> dict:
        """DELETE exchange/{offers|requests}/{id}: take an open post off the board."""
        kind = "requests" if str(post_id).startswith("r") else "offers"
        return self._call("DELETE", f"exchange/{kind}/{_seg(post_id)}")


def _json_body(body: Any) -> bytes:
    """The body as JSON; a NaN or infinity (not JSON) is refused here, naming its field."""
    try:
        return json.dumps(body, allow_nan=False).encode()
    except ValueError:
        where = _nonfinite(body)
        raise HivedError(400, "must be a finite number", f"body.{where}" if where else "body") from None


def _nonfinite(value: Any, path: str = "") -> str:
    """The dotted path of the first NaN or infinity in ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        return path
    items = value.items() if isinstance(value, dict) else enumerate(value) \
        if isinstance(value, (list, tuple)) else ()
    for key, item in items:
        found = _nonfinite(item, f"{path}.{key}" if path else str(key))
        if found:
            return found
    return ""


def _seg(value: str) -> str:
    """One URL path segment: ids and VC names never smuggle a '/'."""
    return quote(str(value), safe="")
