"""Every route of the Jupyter server that is not hived's is refused to VC
members, found by walking the server's whole route table (so a route that a
future extension adds is caught too), with Lab, terminals and LSP loaded.

Without ``serve_jupyter`` (``hived serve`` without ``--jupyter``) the server
token is refused as well; with it, the server token gets through.
"""
from __future__ import annotations

import re
from re import _parser

import pytest
from tornado.httpclient import HTTPClientError
from tornado.routing import Router

from hived.jupyter_ext.handlers.base import HivedHandler

from .conftest import SPEC, TOKENS

SERVER_TOKEN = "tok-server-account"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
# notebook_shim is left out: loading it patches jupyter-server's ExtensionManager
# for the rest of the process, and breaks every later test server
EXTENSIONS = {"hived.jupyter_ext": True, "jupyterlab": True, "jupyter_server_terminals": True,
              "jupyter_lsp": True, "notebook_shim": False}


def server_config(hived_data, serve_jupyter: bool) -> dict:
    return {
        "ServerApp": {"jpserver_extensions": EXTENSIONS, "terminals_enabled": True,
                      "identity_provider_class": "hived.jupyter_ext.auth.HivedIdentityProvider"},
        "IdentityProvider": {"token": SERVER_TOKEN},
        "HivedIdentityProvider": {"user_tokens": TOKENS},
        "HivedExtension": {"spec_path": str(SPEC), "data_dir": str(hived_data), "tick_seconds": 0.05,
                           "serve_jupyter": serve_jupyter},
    }


def routes(router) -> list[tuple[object, type]]:
    """(path matcher, handler class) of every rule, nested routers included."""
    out = []
    for rule in router.rules:
        if isinstance(rule.target, Router):
            out += routes(rule.target)
        elif isinstance(rule.target, type):
            out.append((rule.matcher, rule.target))
    return out


def concrete(matcher) -> str:
    """A short path that ``matcher`` matches, generated from its regex."""
    path = example(_parser.parse(matcher.regex.pattern))
    assert matcher.regex.match(path), f"cannot build a path for {matcher.regex.pattern!r}: got {path!r}"
    return path


_CATEGORIES = {"CATEGORY_DIGIT": r"\d", "CATEGORY_NOT_DIGIT": r"\D", "CATEGORY_SPACE": r"\s",
               "CATEGORY_NOT_SPACE": r"\S", "CATEGORY_WORD": r"\w", "CATEGORY_NOT_WORD": r"\W"}


def _in_class(items, c: str) -> bool:
    hit, negate = False, False
    for op, arg in items:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            hit |= c == chr(arg)
        elif name == "RANGE":
            hit |= arg[0] <= ord(c) <= arg[1]
        elif name == "CATEGORY":
            hit |= bool(re.fullmatch(_CATEGORIES[str(arg)], c))
    return hit != negate


def example(tokens) -> str:
    """The shortest string the parsed regex matches, preferring 'x1'-like segments."""
    out = []
    for op, arg in tokens:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("x" if chr(arg) != "x" else "y")
        elif name in ("ANY",):
            out.append("x")
        elif name == "IN":
            out.append(next(c for c in "x1a_-.A/" if _in_class(arg, c)))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, _high, sub = arg
            out.append(example(sub) * low)
        elif name == "SUBPATTERN":
            out.append(example(arg[-1]))
        elif name == "BRANCH":
            out.append(example(arg[1][0]))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            pass
        elif name == "GROUPREF":
            raise AssertionError("back-references are not expected in routes")
        else:
            raise AssertionError(f"regex construct {name} not handled")
    return "".join(out)


async def request(client, path: str, method: str, token: str):
    kw = {"method": method, "headers": {"Authorization": f"token {token}"}, "follow_redirects": False,
          "allow_nonstandard_methods": True, "request_timeout": 20}
    if method in ("POST", "PUT", "PATCH"):
        kw["body"] = "{}"
        kw["headers"]["Content-Type"] = "application/json"
    try:
        r = await client.fetch(path, **kw)
    except HTTPClientError as exc:
        if exc.response is None:
            return f"{exc}"   # no HTTP answer at all (timeout, connection closed)
        r = exc.response
    return r.code


def foreign_routes(app) -> list[tuple[str, type]]:
    found = [(concrete(m), cls) for m, cls in routes(app.web_app.default_router)
             if not issubclass(cls, HivedHandler)]
    prefix = app.base_url.rstrip("/")
    paths = {p[len(prefix):] if p.startswith(prefix) else p for p, _ in found}
    # the walk is real: the routes that gave members a root shell are in it
    for wanted in ("/api/contents", "/api/terminals", "/api/shutdown", "/api/kernels", "/files/", "/lab"):
        assert any(p.startswith(wanted) for p in paths), (wanted, sorted(paths))
    assert len(found) > 40, len(found)
    return found


async def walk(app, client, token: str) -> dict[tuple[str, str], int]:
    answers = {}
    provider = app.identity_provider
    # the login and logout pages stay open when Jupyter's routes are served:
    # a browser has no other way to log in (tokens in URLs are refused)
    login_pages = (provider.login_handler_class, provider.logout_handler_class) \
        if app.web_app.settings["hived"].config.serve_jupyter else ()
    for path, cls in foreign_routes(app):
        if cls in login_pages:
            continue
        for method in METHODS:
            answers[(method, path)] = await request(client, path, method, token)
    return answers


@pytest.fixture
def jp_server_config(hived_data, request):
    return server_config(hived_data, request.param)


@pytest.mark.parametrize("jp_server_config", [False], indirect=True)
async def test_no_jupyter_route_answers_anyone(jp_serverapp, jp_server_config, http_server_client):
    for token in ("tok-alice", "tok-root", SERVER_TOKEN):   # a member, a cluster admin, the server account
        answers = await walk(jp_serverapp, http_server_client, token)
        reached = {k: v for k, v in answers.items() if v not in (403, 404)}
        assert not reached, (token, reached)
    assert await request(http_server_client, jp_serverapp.base_url + "api/shutdown", "POST", SERVER_TOKEN) == 404
    # hived's own API still answers
    assert await request(http_server_client, jp_serverapp.base_url + "hived/api/status", "GET", "tok-alice") == 200


@pytest.mark.parametrize("jp_server_config", [True], indirect=True)
async def test_jupyter_routes_are_the_server_accounts_only(jp_serverapp, jp_server_config, http_server_client):
    for token in ("tok-alice", "tok-root"):   # root is a cluster admin, still not the server account
        answers = await walk(jp_serverapp, http_server_client, token)
        reached = {k: v for k, v in answers.items() if v not in (403, 404)}
        assert not reached, (token, reached)
    base, prefix = http_server_client, jp_serverapp.base_url
    assert await request(base, prefix + "api/contents", "GET", SERVER_TOKEN) == 200
    assert await request(base, prefix + "api/kernelspecs", "GET", SERVER_TOKEN) == 200
    assert await request(base, prefix + "api/contents", "GET", "tok-alice") == 403
