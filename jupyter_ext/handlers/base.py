"""What every hived REST handler shares: JSON in and out, refusals, permissions.

Refusals are ``ApiError`` (a tornado ``HTTPError``) carrying ``where``; the
``write_error`` below turns every error, jupyter-server's own 403s included,
into ``{"error": ..., "where": ...}``. Exceptions from the service are mapped
to 4xx by :func:`service_errors` so that bad input never reaches a 5xx.
"""
from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import re
from collections.abc import Iterator
from http.client import responses
from typing import Any

from jupyter_server.base.handlers import APIHandler
from tornado import httputil, web
from tornado.http1connection import HTTP1Connection

from hived.service.admission import LimitReached
from hived.service.degraded import ServiceDegraded
from hived.service.scheduler import unknown_job

from ..auth import caller_groups, job_resource
from . import schema

# a refused request's body is read and dropped up to this size, so that the
# refusal reaches the client cleanly; a larger one closes the connection
DRAIN_BYTES = 64 * 1024
# a body up to this size is parsed on the IOLoop (well under a millisecond); larger ones in the
# parse threads, so that an ordinary request never queues behind another caller's large bodies
INLINE_PARSE_BYTES = 16 * 1024


def limit_body(request: httputil.HTTPServerRequest, max_bytes: int) -> None:
    """Cap the body tornado reads for ``request``. Only tornado's HTTP/1 server streams
    bodies this way, and it is the one jupyter-server runs."""
    conn = request.connection
    if not isinstance(conn, HTTP1Connection):
        raise TypeError(f"body limit: needs tornado's HTTP/1 server, got a {type(conn).__name__} connection")
    conn.set_max_body_size(max_bytes)


class ApiError(web.HTTPError):
    def __init__(self, status: int, message: str, where: str | None = None):
        super().__init__(status, log_message=message.replace("%", "%%"))
        self.message, self.where = message, where
        self.headers: dict[str, str] = {}


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")  # json accepts NaN/Infinity by default


@contextlib.contextmanager
def service_errors(where_default: str | None = None) -> Iterator[None]:
    """Translate the service's refusals into 4xx answers.

    - ``RequestError(field, problem)`` (core) and ``SpecError(path, problem)``: 400
    - ``LookupError`` (unknown job / VC): 404
    - ``PermissionError``: 403
    - ``ValueError``: 400; ``ServiceDegraded``: 503 with its reason;
      anything else is a bug and stays a 500 (logged, not shown).
    """
    try:
        yield
    except ApiError:
        raise
    except LimitReached as exc:   # an admission limit (service/admission.py): try again later
        error = ApiError(429, str(exc.problem), str(exc.field) if exc.field else where_default)
        if exc.retry_after is not None:
            error.headers = {"Retry-After": str(max(1, math.ceil(exc.retry_after)))}
        raise error from None
    except ServiceDegraded as exc:
        raise ApiError(503, f"service degraded, nothing was changed; try again later: {exc.reason}",
                       "service") from None
    except LookupError as exc:
        msg = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
        raise ApiError(404, msg or "not found", where_default) from None
    except PermissionError as exc:
        raise ApiError(403, str(exc) or "not allowed", where_default) from None
    except Exception as exc:
        field = getattr(exc, "field", None) or getattr(exc, "path", None)
        problem = getattr(exc, "problem", None)
        if problem is not None:
            raise ApiError(400, str(problem), str(field) if field is not None else where_default) from None
        if isinstance(exc, ValueError):
            raise ApiError(400, str(exc), where_default) from None
        raise


@web.stream_request_body
class HivedHandler(APIHandler):
    """Bodies are streamed so that nothing is read before the caller is known
    and the declared size is within ``max_body_bytes``."""

    auth_resource = "hived"
    public = False  # True: answers without a token (health checks)
    hived_refusal: str | None = None   # the reason of a 429 answered (for the refusal log)

    # APIHandler.prepare already drops JupyterHandler's keyword (and ignores the same error)
    async def prepare(self) -> None:  # type: ignore[override]
        self._body_parts: list[bytes] = []
        limit_body(self.request, DRAIN_BYTES)  # until we know who asks
        # every hived route needs a user: jupyter-server leaves current_user
        # None for requests without a valid token, password cookie or Hub login
        await super().prepare()
        if self.public:
            return
        if self.current_user is None:
            if "token" in self.request.query_arguments:
                raise ApiError(403, "tokens are not accepted in URLs (they end up in logs and browser "
                                    "history); send Authorization: token ...", "query.token")
            raise ApiError(403, self._unauthenticated(), "Authorization")
        self.cap_body(self.hived.config.max_body_bytes)

    def cap_body(self, limit: int) -> None:
        """Refuse a declared body over ``limit`` bytes before it is read, and cap what is read."""
        declared = self.request.headers.get("Content-Length", "0")
        if not declared.isdigit():
            raise ApiError(400, "Content-Length is not a number", "Content-Length")
        if int(declared) > limit:
            raise ApiError(413, f"body is {int(declared)} bytes, the limit is {limit}", "body")
        limit_body(self.request, limit)

    def check_xsrf_cookie(self) -> None:
        # (tornado also calls this before prepare, when nobody is known yet: jupyter-server's check waits then)
        if hasattr(self, "_jupyter_current_user") and self._jupyter_current_user is None and not self.public:
            return   # no user: refused in prepare with the reason (an unknown token is not an XSRF question)
        super().check_xsrf_cookie()

    def data_received(self, chunk: bytes) -> None:
        if not self._finished:
            self._body_parts.append(chunk)

    # -- context ----------------------------------------------------------
    @property
    def hived(self):
        return self.settings["hived"]

    @property
    def svc(self):
        state = self.hived
        if state.service is None:
            raise ApiError(503, f"hived service not running: {state.error}", "server config")
        return state.service

    async def run(self, fn, *args, **kwargs):
        """Call the service off the IOLoop thread: a submit waits for its
        durable commit (and for the scheduler's lock) without stalling every
        other request of the server."""
        call = functools.partial(fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self.hived.pool, call)

    @property
    def username(self) -> str:
        return self.current_user.username

    @property
    def groups(self) -> tuple:
        """The caller's JupyterHub groups (VC membership may come from them), and the
        server-account marker for the account running the server (auth.caller_groups)."""
        return caller_groups(self.identity_provider, self.current_user)

    # -- permissions ------------------------------------------------------
    async def allowed(self, action: str, resource: str) -> bool:
        ok = self.hived.authorizer.is_authorized(self, self.current_user, action, resource)
        if hasattr(ok, "__await__"):
            ok = await ok
        return bool(ok)

    async def require(self, action: str, resource: str, what: str, where: str) -> None:
        if not await self.allowed(action, resource):
            raise ApiError(403, f"user {self.username!r} may not {what}", where)

    async def job_or_404(self, job_id: str, action: str = "read") -> dict:
        """The job, after checking the user may ``action`` it.

        A job the user may not even read answers exactly as a job that does not
        exist (404, same body): otherwise anyone could count everyone's jobs. A
        job the user sees but may not change answers 403.
        """
        where = f"jobs/{job_id}"
        with service_errors(where):
            job = await self.run(self.svc.get_job, job_id)
            resource = job_resource(job["vc"], job["user"])
            if not await self.allowed("read", resource):
                raise unknown_job(job_id)
        if action != "read":
            await self.require(action, resource, f"cancel job {job_id}", where)
        return job

    # -- JSON -------------------------------------------------------------
    async def json_body(self, schema_name: str, required: bool = True) -> dict:
        """The body, parsed and checked against the OpenAPI schema; a large one off the
        IOLoop thread (a megabyte of JSON must not stall other requests), a small one at once
        (it must not wait behind someone else's megabytes in the parse threads)."""
        raw = b"".join(self._body_parts)
        limit = self.hived.config.max_body_bytes
        if len(raw) > limit:
            raise ApiError(413, f"body is {len(raw)} bytes, the limit is {limit}", "body")
        if len(raw) <= INLINE_PARSE_BYTES:
            body, problem = _parse_and_check(raw, schema_name, required)
        else:
            loop = asyncio.get_running_loop()
            body, problem = await loop.run_in_executor(self.hived.parse_pool, _parse_and_check, raw,
                                                       schema_name, required)
        if problem:
            raise ApiError(400, *problem)
        return body

    def query_int(self, name: str, default: int, lo: int, hi: int) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = int(raw)
        except ValueError:
            raise ApiError(400, f"must be an integer, got {raw[:40]!r}", f"query.{name}") from None
        if not lo <= value <= hi:
            raise ApiError(400, f"must be between {lo} and {hi}, got {value}", f"query.{name}")
        return value

    def reply(self, doc: Any, status: int = 200) -> None:
        self.reply_text(to_json(doc), status)

    def reply_text(self, text: str, status: int = 200) -> None:
        """Answer JSON already encoded (off the IOLoop, for large documents)."""
        self.set_status(status)
        self.finish(text)

    def _unauthenticated(self) -> str:
        """Why a request without a user is refused: no token, or one that is not accepted."""
        if self.request.headers.get("Authorization"):
            return ("token not accepted: it is unknown, revoked or expired "
                    "(ask for a new one; Authorization: token ...)")
        return "not authenticated: give a token (Authorization: token ...)"

    def log_exception(self, typ, value, tb) -> None:
        if isinstance(value, ApiError) and value.status_code == 429:
            return   # a flood of these is counted, not logged one by one (refusal_log.py)
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        where = None
        if isinstance(exc, ApiError):
            message, where = exc.message, exc.where
            for name, value in exc.headers.items():
                self.set_header(name, value)
            if status_code == 429:
                self.hived_refusal = message   # logged by the refusal log, not line by line
        elif isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        elif status_code == 403:
            message = self._unauthenticated()
        elif status_code >= 500:
            # a bug: the traceback goes to the server's log, never to the caller
            message = f"{responses.get(status_code, 'error')}: the server's log has the details"
        else:
            message = responses.get(status_code, "error")
        if where is None:
            where = self.request.path
        self.finish(json.dumps({"error": one_line(str(message)), "where": where}))


# a surrogate escape, or a surrogate encoded as UTF-8 (json decodes those too)
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _parse_and_check(raw: bytes, schema_name: str, required: bool) -> tuple[Any, tuple[str, str] | None]:
    if not raw.strip():
        return {}, (("a JSON object body is required", "body") if required else None)
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        return None, (f"body is not valid JSON: {one_line(str(exc))[:160]}", "body")
    try:  # "\ud800" escapes decode to strings no terminal, file or database can take
        if (b"\\u" in raw or b"\xed" in raw) and _MAYBE_SURROGATE.search(raw):   # memchr-fast first
            json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None, ("body holds a lone UTF-16 surrogate (an escape like \\ud800): not valid Unicode", "body")
    return body, schema.first_error(schema_name, body)


def one_line(text: str) -> str:
    return " ".join(text.split())


def to_json(doc: Any) -> str:
    try:
        return json.dumps(doc, default=_jsonable, allow_nan=False)
    except ValueError:  # a non-finite float somewhere: JSON has no spelling for it
        return json.dumps(_finite(doc), default=_jsonable, allow_nan=False)


def _jsonable(value: Any) -> Any:
    """Service answers may hold enums, tuples, sets, non-finite floats."""
    if hasattr(value, "value"):
        return value.value
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if hasattr(value, "to_dict"):
        return value.to_dict()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class NoRouteHandler(HivedHandler):
    """Whatever is not a route of the API: a JSON 404 naming the path."""

    def _none(self, *args) -> None:
        raise ApiError(404, f"no route {self.request.method} {self.request.path}; "
                            f"see hived/api/openapi.json", self.request.path)

    get = post = put = delete = patch = _none
