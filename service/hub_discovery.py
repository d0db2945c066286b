"""Finding hived from inside a JupyterHub session (a user's single-user server,
its kernels and terminals).

The Hub gives every single-user server ``JUPYTERHUB_API_URL`` and the user's
own ``JUPYTERHUB_API_TOKEN``. hived is the Hub service named
``$HIVED_HUB_SERVICE`` (default ``hived``); its address comes from the Hub's
API (``GET services/<name>``: its URL and prefix, when the user's token may
read them), else from ``$JUPYTERHUB_PUBLIC_URL`` through the Hub's proxy.
Requests then carry the user's own token, so hived sees that person.
"""
from __future__ import annotations

import os
from urllib.parse import urljoin

DEFAULT_SERVICE = "hived"


def in_hub_session() -> bool:
    return bool(os.environ.get("JUPYTERHUB_API_URL") and os.environ.get("JUPYTERHUB_API_TOKEN"))


def find_hub_service(timeout: float = 5.0) -> dict | None:
    """``{"url", "token"}`` of the hived service for this Hub session, or None
    outside one. Inside one, a service the Hub does not know is an error."""
    if not in_hub_session():
        return None
    import requests  # here: a command outside a Hub session never pays for importing it
    api, token = os.environ["JUPYTERHUB_API_URL"].rstrip("/") + "/", os.environ["JUPYTERHUB_API_TOKEN"]
    name = os.environ.get("HIVED_HUB_SERVICE") or DEFAULT_SERVICE
    problem = f"the Hub shows no service {name!r} to this user"
    try:
        r = requests.get(urljoin(api, f"services/{name}"), timeout=timeout,
                         headers={"Authorization": f"token {token}"})
    except requests.RequestException as exc:
        r, problem = None, f"the Hub's API did not answer ({type(exc).__name__})"
    if r is not None and r.ok:
        model = r.json()
        if model.get("url"):
            # the service itself, at the prefix the proxy would forward
            return {"url": urljoin(model["url"].rstrip("/") + "/", (model.get("prefix") or "/").lstrip("/")),
                    "token": token}
    public = os.environ.get("JUPYTERHUB_PUBLIC_URL")
    if public:
        base = os.environ.get("JUPYTERHUB_BASE_URL") or "/"
        return {"url": urljoin(public, base.rstrip("/") + f"/services/{name}/"), "token": token}
    from hived.service.client import HivedUnreachable
    raise HivedUnreachable(0, f"inside JupyterHub, but {problem} (ask the Hub admin for "
                              f"read:services!service={name}, or set HIVED_URL)",
                           urljoin(api, f"services/{name}"))
