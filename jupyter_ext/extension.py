"""The jupyter-server extension: hosts one SchedulerService and its REST API.

Configure it like any jupyter-server component::

    c.HivedExtension.spec_path = "/etc/hived/cluster.yaml"
    c.HivedExtension.data_dir = "/var/lib/hived"

(or ``$HIVED_SPEC`` / ``$HIVED_DATA_DIR``). Without a spec the server still
starts: the API answers ``status`` with ``ok: false`` and everything else
with a 503 naming the missing setting, so that an installed-but-unconfigured
JupyterLab keeps working.

Jupyter's own routes (Lab, contents, kernels, terminals, ...) are the server
account's only; see handlers/gate.py and docs/security.md.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from jupyter_server.auth import Authorizer
from traitlets import Bool, Float, Int, Type, Unicode, default
from traitlets.config import LoggingConfigurable

from .auth import Access, HivedAuthorizer


class HivedExtension(LoggingConfigurable):
    """Settings of hived inside a Jupyter server."""

    spec_path = Unicode(config=True, help="Cluster spec (YAML). Default: $HIVED_SPEC.")
    data_dir = Unicode(config=True, help="Where the job store and logs live. Default: $HIVED_DATA_DIR, else "
                                         "/var/lib/hived for root, ~/.hived for anyone else.")
    launcher = Unicode("local", config=True, help="Launcher of the service: 'local' (processes) or an import path.")
    tick_seconds = Float(0.5, config=True, help="Seconds between housekeeping rounds (GPU health, retention, "
                                                "quotas); submits, exits and deadlines wake a round at once.")
    follow_timeout = Float(20.0, config=True, help="Longest wait of a logs?follow=1 request, in seconds.")
    follow_poll = Float(0.2, config=True, help="How often a follow request looks for new log text, in seconds.")
    api_threads = Int(8, config=True, help="Threads that run the API's calls into the service.")
    max_body_bytes = Int(1 << 20, config=True, help="Largest request body accepted, in bytes.")
    serve_jupyter = Bool(
        True, config=True,
        help="Serve Jupyter's own routes (Lab, contents, files, kernels, terminals, shutdown, other "
             "extensions) to the account running the server. Other users never reach them. "
             "hived serve sets this False unless started with --jupyter.",
    )
    service_class = Type(
        "hived.service.scheduler.SchedulerService", klass=object, config=True,
        help="The scheduler service to host (constructor: spec_path, data_dir, launcher=, tick_seconds=).",
    )
    authorizer_class = Type(
        HivedAuthorizer, klass=Authorizer, config=True,
        help="Authorizer for the hived API (swap to change who may do what).",
    )

    @default("spec_path")
    def _spec_default(self) -> str:
        return os.environ.get("HIVED_SPEC", "")

    @default("data_dir")
    def _data_default(self) -> str:
        from hived.service.client import default_data_dir
        return str(default_data_dir())


class HivedState:
    """What the handlers reach through ``settings["hived"]``."""

    def __init__(self, config: HivedExtension, authorizer: Authorizer, version: str):
        self.config, self.authorizer, self.version = config, authorizer, version
        self.service: Any = None
        self.error: str | None = None
        self.exception: BaseException | None = None   # why the service did not start
        self.refusals: Any = None   # the 429s' log (refusal_log.RefusalLog), once the extension is loaded
        self._reload_lock = threading.Lock()
        # the handlers' calls into the service run here, off the IOLoop thread
        self.pool = ThreadPoolExecutor(max_workers=config.api_threads, thread_name_prefix="hived-api")
        # request bodies are parsed and checked here: never behind a slow service call
        self.parse_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hived-parse")

    def start(self) -> None:
        from hived.core.spec import load_spec
        cfg = self.config
        if not cfg.spec_path:
            self.error = "no cluster spec: set c.HivedExtension.spec_path or $HIVED_SPEC"
            return
        load_spec(cfg.spec_path)   # a bad spec stops here, before the data directory is made
        os.makedirs(cfg.data_dir, exist_ok=True)
        # the trait holds a class (klass=object only widens what it accepts)
        make_service = cast("type[Any]", cfg.service_class)
        svc = make_service(cfg.spec_path, cfg.data_dir, launcher=_launcher(cfg.launcher),
                              tick_seconds=cfg.tick_seconds)
        svc.start()
        self.service = svc

    @property
    def access(self) -> Access:
        """Who may do what: the service's own (service/access.py), so that the REST
        checks and the service's follow the spec in force, reloads included."""
        svc = self.service
        return getattr(svc, "access", None) or (Access.from_spec(svc.spec) if svc is not None else Access())

    def reload(self, source: str) -> Any:
        """The service's one reconfiguration (``reload_spec``)."""
        with self._reload_lock:
            return self.service.reload_spec(source)

    def stop(self) -> None:
        if self.refusals is not None:
            self.refusals.flush()
        self.pool.shutdown(wait=False)
        self.parse_pool.shutdown(wait=False)
        if self.service is not None:
            svc, self.service = self.service, None
            # close, not only stop: the data directory's lock goes with the server
            (getattr(svc, "close", None) or svc.stop)()


def _launcher(name: str) -> Any:
    if name == "local" or "." not in name:
        return name
    import importlib
    module, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(module), attr)()


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("hived")
    except Exception:  # noqa: BLE001 - no metadata in a source checkout
        return "0+unknown"


def load(serverapp) -> HivedState:
    from .handlers import gate, handlers
    from .handlers.jobs import refuse_floods_early
    cfg = HivedExtension(parent=serverapp)
    state = HivedState(cfg, cfg.authorizer_class(parent=serverapp, identity_provider=serverapp.identity_provider),
                       _version())
    try:
        state.start()
    except Exception as exc:  # noqa: BLE001 - a bad spec must not take JupyterLab down with it
        state.error, state.exception = f"{type(exc).__name__}: {exc}", exc
        serverapp.log.error("hived: service not started: %s", state.error)
    serverapp.web_app.settings["hived"] = state
    serverapp.web_app.add_handlers(".*$", handlers(serverapp.base_url))
    refuse_floods_early(serverapp.web_app)   # inside the gate: it sees only what the gate lets through
    gate.install(serverapp.web_app, cfg.serve_jupyter)
    _count_refusals(serverapp.web_app, state, serverapp.log)
    serverapp.log.info("hived: REST API at %shived/api/ (spec %s, data %s)",
                       serverapp.base_url, cfg.spec_path or "-", cfg.data_dir)
    return state


def _count_refusals(web_app, state: HivedState, log) -> None:
    """hived's 429s go to the refusal log (one line per user and interval) instead of the
    server's line per request; every other request is logged as before."""
    import asyncio

    from jupyter_server.log import log_request
    from jupyter_server.prometheus.log_functions import prometheus_log_method

    from .refusal_log import RefusalLog
    state.refusals = RefusalLog(log,
                                lambda delay, fn, *args: asyncio.get_running_loop().call_later(delay, fn, *args))
    logged = web_app.settings.get("log_function") or log_request

    def log_function(handler) -> None:
        reason = getattr(handler, "hived_refusal", None)
        if reason is None or handler.get_status() != 429:
            logged(handler)
            return
        user = getattr(handler.current_user, "username", None) or "unknown"
        state.refusals.note(user, f"{handler.request.method} {handler.request.path}", reason)
        prometheus_log_method(handler)   # still in the server's request metrics

    web_app.settings["log_function"] = log_function


def unload(serverapp) -> None:
    state = serverapp.web_app.settings.get("hived")
    if state is not None:
        state.stop()
