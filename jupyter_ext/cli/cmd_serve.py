"""``hived serve``: the scheduler daemon, a headless Jupyter server with hived's extension.

Writes ``<data-dir>/server.json`` (``{"url","token","pid"}``, mode 0600) once
listening, so that ``hived`` commands and ``HivedClient()`` on this machine
find it without flags; removes it on exit.
"""
from __future__ import annotations

import argparse
import asyncio
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
    p.add_argument("--data-dir", default=os.environ.get("HIVED_DATA_DIR") or os.path.expanduser("~/.hived"),
                   help="job store, logs and server.json")
    p.add_argument("--ip", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8890, help="port (0: pick a free one)")
    p.add_argument("--token", default=None,
                   help="server token (default: $HIVED_TOKEN, else a random one written to server.json)")
    p.add_argument("--user-tokens", metavar="FILE", default=None,
                   help='JSON file {"token": "username", ...}: per-user tokens (without JupyterHub)')
    p.add_argument("--trust-user-header", action="store_true",
                   help="let holders of the server token name the user in X-Hived-User (trusted front ends, tests)")
    p.add_argument("--tick", type=float, default=0.5, help="seconds between scheduling rounds")
    p.add_argument("--launcher", default="local",
                   help="'local' (processes on this machine), 'kubernetes' (pods through the cluster "
                        "in $KUBECONFIG or in-cluster config; restarts recover from pod annotations), "
                        "or an import path of a Launcher class")
    p.set_defaults(func=run)


def _free_port(ip: str) -> int:
    import socket
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def build_config(args: argparse.Namespace, token: str):
    from traitlets.config import Config
    c = Config()
    c.ServerApp.jpserver_extensions = {"hived.jupyter_ext": True}
    c.ServerApp.ip = args.ip
    c.ServerApp.port = args.port or _free_port(args.ip)
    c.ServerApp.port_retries = 0  # a taken port is an error, not a surprise elsewhere
    c.ServerApp.open_browser = False
    c.ServerApp.root_dir = str(Path(args.data_dir).resolve())
    c.ServerApp.allow_root = True
    c.ServerApp.identity_provider_class = "hived.jupyter_ext.auth.HivedIdentityProvider"
    c.IdentityProvider.token = token
    if args.user_tokens:
        c.HivedIdentityProvider.user_tokens = json.loads(Path(args.user_tokens).read_text())
    c.HivedIdentityProvider.trust_user_header = bool(args.trust_user_header)
    c.HivedExtension.spec_path = str(Path(args.spec).resolve())
    c.HivedExtension.data_dir = str(Path(args.data_dir).resolve())
    c.HivedExtension.tick_seconds = args.tick
    c.HivedExtension.launcher = args.launcher
    if args.launcher == "kubernetes":
        # recovery from the cluster's pods lives in the Kubernetes service subclass
        c.HivedExtension.service_class = "hived.k8s.service.KubernetesSchedulerService"
    return c


def run(args: argparse.Namespace) -> int:
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
        try:
            tokens = json.loads(Path(args.user_tokens).read_text())
            assert isinstance(tokens, dict) and all(isinstance(v, str) for v in tokens.values())
        except (OSError, ValueError, AssertionError):
            print(f"hived serve: {args.user_tokens}: want a JSON object {{token: username}}", file=sys.stderr)
            return 2
    data_dir = Path(args.data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    args.data_dir = str(data_dir)
    token = args.token or os.environ.get("HIVED_TOKEN") or secrets.token_hex(24)

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
        return 1
    info_path = data_dir / "server.json"
    info = {"url": app.connection_url, "token": token, "pid": os.getpid()}
    fd = os.open(info_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is a secret
    with os.fdopen(fd, "w") as f:
        json.dump(info, f)
    print(f"hived serve: {app.connection_url}hived/api/ (data {data_dir}, server.json written)", flush=True)
    try:
        app.start()
    finally:
        try:
            if json.loads(info_path.read_text()).get("pid") == os.getpid():
                info_path.unlink()
        except (OSError, ValueError):
            pass
    return 0
