"""Who may do what in hived: VC-based authorization as a jupyter-server Authorizer.

Authentication stays jupyter-server's (token, password, JupyterHub): it tells
us *who* the user is. This module decides what that user may do, from the
spec's ``users``/``admins`` lists:

- members of a VC (its ``users`` or ``admins``) submit to it and see its jobs;
- a job's owner, the VC's admins and cluster admins may cancel it;
- cluster admins (spec ``admins``) reload the spec and see everything.

The REST handlers name what they touch as resource strings:

====================================  =====================================
``hived``                             any authenticated user (status, openapi)
``hived:cluster``                     read: anyone named in the spec
``hived:vc:<vc>``                     read/write(submit): members of ``vc``
``hived:job:<vc>:<owner>``            read: members; write(cancel): owner,
                                      VC admin
``hived:exchange:<vc>``               write: admins of ``vc``
``hived:admin``                       cluster admins only
====================================  =====================================

``<vc>`` and ``<owner>`` are URL-quoted, so they never contain ``:``.
Cluster admins pass every check. Resources not starting with ``hived`` are
allowed, so the class can also serve as the server-wide ``authorizer_class``.

``HivedIdentityProvider`` is for deployments without JupyterHub: it maps
per-user tokens to user names, and (opt-in) lets holders of the server token
name the user in an ``X-Hived-User`` header (a trusted front end or tests).
"""
from __future__ import annotations

import getpass
import hmac
from dataclasses import dataclass, field
from typing import Optional
from urllib.parse import quote, unquote

from jupyter_server.auth import Authorizer, IdentityProvider, User
from traitlets import Bool, Dict, Unicode, default

from .client import USER_HEADER


@dataclass(frozen=True)
class Access:
    """The membership lists of one spec, in the shape the checks need."""

    vc_users: dict[str, frozenset[str]] = field(default_factory=dict)
    vc_admins: dict[str, frozenset[str]] = field(default_factory=dict)
    admins: frozenset[str] = frozenset()

    @classmethod
    def from_spec(cls, spec) -> "Access":
        return cls(
            vc_users={n: frozenset(v.users or ()) for n, v in spec.vcs.items()},
            vc_admins={n: frozenset(v.admins or ()) for n, v in spec.vcs.items()},
            admins=frozenset(spec.admins or ()),
        )

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def is_vc_admin(self, user: str, vc: str) -> bool:
        return user in self.admins or user in self.vc_admins.get(vc, ())

    def is_member(self, user: str, vc: str) -> bool:
        return self.is_vc_admin(user, vc) or user in self.vc_users.get(vc, ())

    def known(self, user: str) -> bool:
        return user in self.admins or any(self.is_member(user, vc) for vc in self.vc_users)

    def vcs_of(self, user: str) -> list[str]:
        """The VCs this user sees (all of them for cluster admins)."""
        return [vc for vc in self.vc_users if self.is_member(user, vc)]


def vc_resource(vc: str) -> str:
    return f"hived:vc:{quote(vc, safe='')}"


def job_resource(vc: str, owner: str) -> str:
    return f"hived:job:{quote(vc, safe='')}:{quote(owner, safe='')}"


def exchange_resource(vc: str) -> str:
    return f"hived:exchange:{quote(vc, safe='')}"


def decide(access: Access, username: str, action: str, resource: str) -> bool:
    """The whole policy, free of tornado so that it is easy to test and read."""
    if resource != "hived" and not resource.startswith("hived:"):
        return True  # not ours: behave like jupyter-server's AllowAllAuthorizer
    if resource == "hived":
        return True
    if access.is_admin(username):
        return True
    kind, _, rest = resource[len("hived:"):].partition(":")
    parts = [unquote(p) for p in rest.split(":")] if rest else []
    if kind == "cluster":
        return action == "read" and access.known(username)
    if kind == "vc" and len(parts) == 1:
        return access.is_member(username, parts[0])
    if kind == "job" and len(parts) == 2:
        vc, owner = parts
        if action == "read":
            return username == owner or access.is_member(username, vc)
        return username == owner or access.is_vc_admin(username, vc)
    if kind == "exchange" and len(parts) == 1:
        if action == "read":
            return access.is_member(username, parts[0])
        return access.is_vc_admin(username, parts[0])
    return False  # "hived:admin" and anything unknown: cluster admins only


class HivedAuthorizer(Authorizer):
    """Jupyter-server Authorizer applying :func:`decide` with the live spec.

    The extension keeps the current :class:`Access` in
    ``settings["hived"].access`` (renewed on spec reload).
    """

    def is_authorized(self, handler, user: User, action: str, resource: str) -> bool:
        state = handler.settings.get("hived") if handler is not None else None
        access = getattr(state, "access", None) or Access()
        return decide(access, user.username, action, resource)


class HivedIdentityProvider(IdentityProvider):
    """Token authentication that knows user names (when JupyterHub is not there)."""

    user_tokens = Dict(
        value_trait=Unicode(), default_value={}, config=True,
        help="Per-user tokens: {token: username}. A request with one of these "
             "tokens is that user.",
    )
    token_user = Unicode(
        config=True, help="User name of requests made with the server's own token "
                          "(default: the account running the server).",
    )
    trust_user_header = Bool(
        False, config=True,
        help=f"Let requests made with the server's own token name their user in the "
             f"{USER_HEADER} header. Only for a trusted front end or tests: whoever "
             f"holds the server token may then act as anyone.",
    )

    @default("token_user")
    def _token_user_default(self) -> str:
        try:
            return getpass.getuser()
        except Exception:  # no passwd entry (containers)
            return "jupyter"

    async def get_user_token(self, handler) -> Optional[User]:
        given = self.get_token(handler)
        if given:
            for token, name in self.user_tokens.items():
                if hmac.compare_digest(token.encode(), given.encode()):
                    return User(username=name)
        server_user = await super().get_user_token(handler)
        if server_user is None:
            return None
        named = handler.request.headers.get(USER_HEADER, "").strip() if self.trust_user_header else ""
        return User(username=named or self.token_user)
