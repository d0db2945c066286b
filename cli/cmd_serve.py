"""``hived serve``: the scheduler daemon, a Jupyter server that serves hived and nothing else.

Writes ``<data-dir>/server.json`` (``{"url","token","pid"}``, mode 0600) once
listening, so that ``hived`` commands and ``HivedClient()`` on this machine
find it without flags; removes it on exit. The data directory is made 0700
and everything the server writes is private to its account (umask 077).

Jupyter's own routes (Lab, contents, kernels, terminals, shutdown, other
extensions) are not served unless ``--jupyter`` is given, and then only to
the server's account. The server token comes from ``--token-file`` or
``$HIVED_TOKEN``, never from the command line (``ps`` shows it to everyone).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import os
import secrets
import sys
from pathlib import Path


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "serve", help=summary, description=(
            "Run the hived scheduler service headless: a Jupyter server (no UI) hosting the "
            "scheduler and its REST API under /hived/api/. Clients on this machine find it "
            "through DATA_DIR/server.json."),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--spec", required=True, help="cluster spec (YAML) to schedule")
    from hived.service.client import default_data_dir
    p.add_argument("--data-dir", default=str(default_data_dir()),
                   help="job store, logs and server.json ($HIVED_DATA_DIR; /var/lib/hived for root, "
                        "else ~/.hived)")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8890, help="port (0: pick a free one)")
    p.add_argument("--token", default=None, help=argparse.SUPPRESS)  # refused: see run()
    p.add_argument("--token-file", metavar="FILE", default=None,
                   help="file holding the server token (default: $HIVED_TOKEN, else a random one "
                        "written to server.json)")
    p.add_argument("--user-tokens", metavar="FILE", default=None,
                   help='JSON file {"token": "username", ...}: per-user tokens (without JupyterHub); '
                        "re-read on SIGHUP (with the spec) or POST hived/api/tokens/reload, so removing a "
                        "token revokes it")
    p.add_argument("--allow-root", action="store_true",
                   help="run even as root: the server then holds root's rights (local jobs still run under per-VC "
                        "accounts unless HIVED_JOB_ACCOUNT=server; docs/security.md)")
    p.add_argument("--jupyter", action="store_true",
                   help="also serve Jupyter's own routes (Lab, contents, kernels, terminals) to the "
                        "server's account (its token only); other users never reach them")
    p.add_argument("--certfile", default=None, help="TLS certificate (PEM): serve https")
    p.add_argument("--keyfile", default=None, help="TLS private key (PEM) of --certfile")
    p.add_argument("--trust-user-header", action="store_true",
                   help="let holders of the server token name the user in X-Hived-User (trusted front ends, tests)")
    p.add_argument("--hub", action="store_true",
                   help="run as a JupyterHub service: identity (user, groups) from the Hub's API, browser "
                        "login through the Hub (the default when the Hub starts hived: JUPYTERHUB_API_URL, "
                        "JUPYTERHUB_API_TOKEN and JUPYTERHUB_SERVICE_NAME are set); see docs/jupyterhub.md")
    p.add_argument("--hub-cache", type=int, default=30, metavar="SECONDS",
                   help="with --hub: how long the Hub's answer for a token is kept (a user removed from "
                        "a group is refused at most this long after)")
    p.add_argument("--tick", type=float, default=0.5,
                   help="seconds between housekeeping rounds (GPU health, retention, quotas); submits, "
                        "exits and deadlines wake a round at once")
    p.add_argument("--launcher", default="local",
                   help="'local' (processes on this machine), 'kubernetes' (pods through the cluster "
                        "in $KUBECONFIG or in-cluster config; restarts recover from pod annotations), "
                        "or an import path of a Launcher class")
    p.set_defaults(func=run)


def _reload_on_sighup(app, state) -> None:
    """SIGHUP re-reads the tokens file and the spec file. The spec goes through the
    service's one reconfiguration (as POST spec/reload does), off the IOLoop; a
    refused file is logged in one line and changes nothing."""
    import signal
    provider = app.identity_provider

    def reload_spec() -> None:
        try:
            out = state.reload(state.config.spec_path)
        except Exception as exc:  # noqa: BLE001 - any refusal is logged; the old spec stays in force
            where, problem = getattr(exc, "field", None) or getattr(exc, "path", None), getattr(exc, "problem", None)
            app.log.error("hived: spec not reloaded: %s", f"{where}: {problem}" if problem else exc)
            return
        app.log.info("hived: spec reloaded: VCs %s; downgraded to opportunistic: %s",
                     ", ".join(out["vcs"]), ", ".join(out["downgraded"]) or "none")

    def reload() -> None:
        if hasattr(provider, "reload_tokens"):
            try:
                provider.reload_tokens()
            except (LookupError, ValueError) as exc:  # a bad file keeps the tokens in force
                app.log.error("hived: tokens not reloaded: %s", exc)
        state.pool.submit(reload_spec)

    if hasattr(signal, "SIGHUP"):
        app.io_loop.asyncio_loop.add_signal_handler(signal.SIGHUP, reload)


def _free_port(ip: str) -> int:
    import socket
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def build_config(args: argparse.Namespace, token: str):
    from traitlets.config import Config
    c = Config()
    jupyter = bool(getattr(args, "jupyter", False))
    # other installed server extensions (Lab, LSP, terminals, ...) only when asked for
    c.ServerApp.jpserver_extensions = {**({} if jupyter else {name: False for name in _installed_extensions()}),
                                       "hived.jupyter_ext": True}
    c.ServerApp.ip = args.ip
    c.ServerApp.port = args.port or _free_port(args.ip)
    c.ServerApp.port_retries = 0  # a taken port is an error, not a surprise elsewhere
    c.ServerApp.open_browser = False
    # Lab's files are the server account's own working directory, never the data directory
    c.ServerApp.root_dir = os.getcwd()
    c.ServerApp.allow_root = bool(getattr(args, "allow_root", False))
    c.ServerApp.identity_provider_class = "hived.jupyter_ext.auth.HivedIdentityProvider"
    c.IdentityProvider.token = token
    if args.user_tokens:
        c.HivedIdentityProvider.user_tokens_file = str(Path(args.user_tokens).resolve())
    c.HivedIdentityProvider.trust_user_header = bool(args.trust_user_header)
    if getattr(args, "hub", False):
        from hived.jupyter_ext.hub_service import configure
        configure(c, args)
    c.HivedExtension.serve_jupyter = jupyter
    if not jupyter:
        c.ServerApp.terminals_enabled = False
        # bodies larger than hived accepts are refused before they are read
        c.ServerApp.max_body_size = c.HivedExtension.max_body_bytes = 1 << 20
        c.ServerApp.max_buffer_size = 2 << 20
    if getattr(args, "certfile", None):
        c.ServerApp.certfile = str(Path(args.certfile).resolve())
        c.ServerApp.keyfile = str(Path(args.keyfile).resolve()) if args.keyfile else ""
    c.HivedExtension.spec_path = str(Path(args.spec).resolve())
    c.HivedExtension.data_dir = str(Path(args.data_dir).resolve())
    c.HivedExtension.tick_seconds = args.tick
    c.HivedExtension.launcher = args.launcher
    if args.launcher == "kubernetes":
        # recovery from the cluster's pods lives in the Kubernetes service subclass
        c.HivedExtension.service_class = "hived.k8s.service.KubernetesSchedulerService"
    return c


def _installed_extensions() -> list[str]:
    """Server extensions enabled by the config files on Jupyter's path."""
    from jupyter_core.paths import jupyter_config_path
    from jupyter_server.extension.config import ExtensionConfigManager
    found = ExtensionConfigManager(read_config_path=jupyter_config_path()).get_jpserver_extensions()
    return sorted(name for name, enabled in found.items() if enabled and name != "hived.jupyter_ext")


def server_token(args: argparse.Namespace) -> str:
    """The server token: --token-file, else $HIVED_TOKEN (taken out of the
    environment so that nothing started from here inherits it), else random."""
    from_env = os.environ.pop("HIVED_TOKEN", "")
    if args.token_file:
        try:
            token = Path(args.token_file).read_text().strip()
        except OSError as exc:
            raise ValueError(f"--token-file {args.token_file}: cannot read: {exc.strerror}") from None
        if not token:
            raise ValueError(f"--token-file {args.token_file}: the file is empty")
        return token
    return from_env.strip() or secrets.token_hex(24)


def _refusal(args: argparse.Namespace) -> str:
    """Why these arguments cannot start a server ('' when they can)."""
    from hived.jupyter_ext.hub_service import hub_refusal, started_by_hub
    args.hub = bool(getattr(args, "hub", False)) or started_by_hub()
    if args.hub and hub_refusal(args):
        return hub_refusal(args)
    if args.token is not None:
        return ("--token is refused: a token on the command line is visible to every user of this "
                "machine (ps, /proc); use --token-file FILE or $HIVED_TOKEN")
    if os.geteuid() == 0 and not args.allow_root:
        return ("refusing to run as root: the server would hold root's rights; run it under a "
                "dedicated account, or pass --allow-root if you mean it (docs/security.md)")
    if bool(args.certfile) != bool(args.keyfile):
        return "--certfile and --keyfile go together"
    for flag in ("certfile", "keyfile"):
        path = getattr(args, flag)
        if path and not Path(path).is_file():
            return f"--{flag} {path}: no such file"
    return ""


def _freeze_startup_heap() -> None:
    """Move what start-up allocated (jupyter-server, tornado, the spec, the recovered jobs) out of
    the collector's reach. A full collection otherwise walks that whole heap and stalls every
    request for 20-110 ms (measured under `bench_rest.py`); after the freeze it walks only what
    the service allocates while it runs."""
    gc.collect()
    gc.freeze()


def run(args: argparse.Namespace) -> int:
    refusal = _refusal(args)
    if refusal:
        print(f"hived serve: {refusal}", file=sys.stderr)
        return 2
    spec = Path(args.spec)
    if not spec.is_file():
        print(f"hived serve: no spec file at {spec}", file=sys.stderr)
        return 2
    try:
        from hived.core.spec import SpecError, load_spec
        load_spec(str(spec))
    except SpecError as exc:  # refuse before starting anything
        print(f"hived serve: {exc}", file=sys.stderr)
        return 2
    if args.user_tokens:
        from hived.jupyter_ext.auth import read_tokens_file
        try:
            read_tokens_file(args.user_tokens)
        except ValueError as exc:
            print(f"hived serve: {exc}", file=sys.stderr)
            return 2
    try:
        token = server_token(args)
    except ValueError as exc:
        print(f"hived serve: {exc}", file=sys.stderr)
        return 2
    if os.geteuid() == 0:   # after the checks: a refusal stays the first line
        print("warning: hived serve runs as root (--allow-root): the server holds root's rights; local jobs "
              "run under per-VC accounts unless HIVED_JOB_ACCOUNT=server makes them root too",
              file=sys.stderr)
    os.umask(0o077)  # the journal, logs and server.json are this account's alone
    data_dir = Path(args.data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    data_dir.chmod(0o700)
    args.data_dir = str(data_dir)

    from jupyter_server.serverapp import ServerApp
    app = ServerApp.instance(config=build_config(args, token))
    app.initialize(argv=[], new_httpserver=True)
    state = app.web_app.settings.get("hived")
    if state is None or state.service is None:
        print(f"hived serve: service did not start: {getattr(state, 'error', 'extension not loaded')}",
              file=sys.stderr)
        cleanup = app.cleanup_extensions() if hasattr(app, "cleanup_extensions") else None
        if inspect.isawaitable(cleanup):   # a coroutine in jupyter-server 2: run it, don't drop it
            asyncio.run(cleanup)
        # a damaged database has its own exit code (StoreDamaged.EXIT_CODE, docs/cli.md)
        return getattr(getattr(state, "exception", None), "EXIT_CODE", 1)
    shared = state.service.status().get("shared_account")
    if shared:   # local jobs of several VCs under one account: the operator must know
        print(f"warning: {shared}", file=sys.stderr)
    info_path = data_dir / "server.json"

    def announce() -> None:
        """server.json tells clients where to connect, so it is written once the server listens:
        the socket is bound by a callback that initialize() queued, and callbacks run in order."""
        info = {"url": app.connection_url, "token": token, "pid": os.getpid()}
        part = info_path.with_name(f".server.json.{os.getpid()}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is a secret
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(part, info_path)   # readers see the whole file or none
        print(f"hived serve: {app.connection_url}hived/api/ (data {data_dir}, server.json written)", flush=True)

    app.io_loop.add_callback(announce)
    app.io_loop.add_callback(_freeze_startup_heap)
    _reload_on_sighup(app, state)
    try:
        app.start()
    finally:
        try:
            if json.loads(info_path.read_text()).get("pid") == os.getpid():
                info_path.unlink()
        except (OSError, ValueError):
            pass
    return 0
