"""``hived serve`` as a JupyterHub service: when it applies and how it is set up.

The Hub hands a managed service its settings in the environment:
``JUPYTERHUB_API_URL`` (where to ask who a token belongs to),
``JUPYTERHUB_API_TOKEN`` (the service's own token), ``JUPYTERHUB_SERVICE_NAME``,
``JUPYTERHUB_SERVICE_URL`` (where to listen) and ``JUPYTERHUB_SERVICE_PREFIX``
(the path the Hub's proxy forwards, ``/services/<name>/``). An external
service is given the same variables by whoever starts it.
"""
from __future__ import annotations

import os
from urllib.parse import urlsplit

NEEDED = ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN")


def started_by_hub() -> bool:
    """Whether this process runs as a Hub-managed service (the Hub set all three)."""
    return all(os.environ.get(name) for name in (*NEEDED, "JUPYTERHUB_SERVICE_NAME"))


def hub_refusal(args) -> str:
    """Why ``--hub`` cannot start with these arguments ('' when it can)."""
    missing = [name for name in NEEDED if not os.environ.get(name)]
    if missing:
        return (f"--hub needs {' and '.join(missing)} in the environment (the Hub sets them for a "
                f"managed service; see docs/jupyterhub.md)")
    try:
        import jupyterhub.services.auth  # noqa: F401
    except ImportError:
        return "--hub needs the jupyterhub package: pip install 'hived[hub]'"
    if getattr(args, "jupyter", False):
        return ("--jupyter is refused with --hub: on a Hub, Jupyter's routes are each user's own "
                "single-user server")
    if getattr(args, "hub_cache", 30) < 0:
        return f"--hub-cache must be 0 or more seconds, got {args.hub_cache}"
    return ""


def configure(c, args) -> None:
    """Turn a standalone ``hived serve`` config into a Hub service's."""
    c.ServerApp.identity_provider_class = "hived.jupyter_ext.hub_identity.HubIdentityProvider"
    c.HubIdentityProvider.cache_seconds = int(args.hub_cache)
    # the service's own token stays in this process: jobs started from here
    # must not inherit it (it would let them act as the service)
    c.HubOAuth.api_token = os.environ.pop("JUPYTERHUB_API_TOKEN")
    c.HubOAuth.api_url = os.environ["JUPYTERHUB_API_URL"]
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix:
        c.ServerApp.base_url = prefix  # the proxy forwards the prefix unchanged
    url = os.environ.get("JUPYTERHUB_SERVICE_URL")
    if url:  # where the Hub's proxy expects us
        where = urlsplit(url)
        c.ServerApp.ip = where.hostname or c.ServerApp.ip
        if where.port:
            c.ServerApp.port = where.port
