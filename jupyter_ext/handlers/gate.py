"""Jupyter's own routes belong to the account running the server, and to no one else.

A Jupyter server hosting hived also serves Lab, contents, files, kernels,
terminals, shutdown and whatever other extensions add. Any of them in the
hands of a VC member is a shell on the scheduler host as the server's
account. So every request is checked where tornado turns a matched route
into a handler (``Application.get_handler_delegate``): routes added later by
another extension pass through the same check.

- hived's own handlers (``HivedHandler`` and subclasses) pass untouched;
- with ``serve_jupyter`` off (``hived serve`` without ``--jupyter``), every
  other route answers 404 to everyone, before its body is read;
- with it on, they answer 403 unless the request is authenticated as the
  server account (the server token, or a login cookie made from it); the
  login and logout pages stay open, since a browser has no other way in
  (tokens in URLs are refused).
"""
from __future__ import annotations

import inspect
import json
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from tornado import httputil, web

from ..auth import is_server_account
from .base import DRAIN_BYTES, HivedHandler, limit_body


@web.stream_request_body
class RefusedHandler(web.RequestHandler):
    """What a non-hived route is when Jupyter's routes are not served at all."""

    def prepare(self) -> None:
        limit_body(self.request, DRAIN_BYTES)
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": "not found: this server serves hived only, under hived/api/",
                                "where": self.request.path}))

    def data_received(self, chunk: bytes) -> None:
        pass  # dropped unread

    def check_xsrf_cookie(self) -> None:
        pass  # refused anyway; never let an XSRF error replace the 404


def _server_account_only(cls: type[web.RequestHandler]) -> type[web.RequestHandler]:
    """A subclass of ``cls`` that checks the caller is the server account
    before any of the route's own code runs (its ``initialize`` included)."""

    def initialize(self, **kwargs: Any) -> None:
        self._hived_init = kwargs

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        provider = self.settings.get("identity_provider")
        user = None
        if provider is not None:
            # the full check (token or login cookie) needs a Jupyter handler;
            # a plain tornado one (a redirect, say) is judged by its token alone
            user = provider.get_user(self) if isinstance(self, JupyterHandler) else provider.get_user_token(self)
            if inspect.isawaitable(user):
                user = await user
        if user is None or not is_server_account(provider, user):
            # answered here, not through the handler's own error path (some
            # override finish() and would never complete the answer)
            self.clear()
            self.set_status(403)
            self.set_header("Content-Type", "application/json")
            web.RequestHandler.finish(self, json.dumps({
                "error": "Jupyter's own routes are for the server's account only", "where": self.request.path}))
            return
        cls.initialize(self, **self._hived_init)
        result = cls.prepare(self, *args, **kwargs)
        if inspect.isawaitable(result):
            await result

    # every method reaches prepare (a 405 would come first and tell what the route takes)
    return type(cls.__name__, (cls,), {"initialize": initialize, "prepare": prepare,
                                       "SUPPORTED_METHODS": web.RequestHandler.SUPPORTED_METHODS,
                                       "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__, "hived_gated": True})


_gated_classes: dict[type[web.RequestHandler], type[web.RequestHandler]] = {}


def _gated(cls: type[web.RequestHandler]) -> type[web.RequestHandler]:
    """One gated subclass per route class, made at its first request."""
    gated = _gated_classes.get(cls)
    if gated is None:
        gated = _gated_classes[cls] = _server_account_only(cls)
    return gated


def passes(target_class: type[web.RequestHandler]) -> bool:
    """hived's own handlers, and tornado's bare 404 (it serves nothing)."""
    return issubclass(target_class, HivedHandler) or target_class is web.ErrorHandler


def install(web_app: web.Application, serve_jupyter: bool) -> None:
    """Route every request of ``web_app`` through the gate."""
    original = web_app.get_handler_delegate
    provider = web_app.settings.get("identity_provider")
    login_pages = {getattr(provider, name, None) for name in ("login_handler_class", "logout_handler_class")}

    def get_handler_delegate(request: httputil.HTTPServerRequest, target_class: type[web.RequestHandler],
                             target_kwargs: dict[str, Any] | None = None, path_args: list[bytes] | None = None,
                             path_kwargs: dict[str, bytes] | None = None) -> Any:   # tornado's _HandlerDelegate
        if not passes(target_class) and not (serve_jupyter and target_class in login_pages):
            if not serve_jupyter:
                target_class, target_kwargs, path_args, path_kwargs = RefusedHandler, {}, [], {}
            elif not getattr(target_class, "hived_gated", False):
                target_class = _gated(target_class)
        return original(request, target_class, target_kwargs, path_args, path_kwargs)

    # this one application's routing is wrapped, not tornado's class
    web_app.get_handler_delegate = get_handler_delegate  # type: ignore[method-assign]
