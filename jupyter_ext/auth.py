"""Who may do what in hived: VC-based authorization as a jupyter-server Authorizer.

Authentication stays jupyter-server's (token, password, JupyterHub): it tells
us *who* the user is. What that user may do is decided by
:class:`hived.service.access.Access` (the service asks it too):

- members of a VC (its ``users`` or ``admins``) submit to it and see its jobs;
- a job's owner, the VC's admins and cluster admins may cancel it;
- cluster admins (spec ``admins``, and the account running the server)
  reload the spec and the tokens, read the metrics and see everything.

The REST handlers name what they touch as resource strings:

====================================  =====================================
``hived``                             any authenticated user (status, openapi)
``hived:cluster``                     read: anyone named in the spec
``hived:vc:<vc>``                     read/write(submit): members of ``vc``
``hived:job:<vc>:<owner>``            read: members; write(cancel): owner,
                                      VC admin
``hived:exchange:<vc>``               write: admins of ``vc``
``hived:exchange``                    read (the ledger): admins of any VC
``hived:admin``                       cluster admins only
====================================  =====================================

``<vc>`` and ``<owner>`` are URL-quoted, so they never contain ``:``.
Cluster admins pass every check. Resources not starting with ``hived`` are
allowed, so the class can also serve as the server-wide ``authorizer_class``.

``HivedIdentityProvider`` is for deployments without JupyterHub: it maps
per-user tokens (a reloadable file) to user names, takes tokens from the
``Authorization`` header only, ties login cookies to the token they came
from (so removing a token revokes its cookies too), tells the server account
apart from everyone else (:func:`is_server_account`: Jupyter's own routes are
its alone, see handlers/gate.py), and (opt-in) lets holders of the server
token name the user in an ``X-Hived-User`` header (a trusted front end or tests).
"""
from __future__ import annotations

import getpass
import hashlib
import hmac
import json
from collections.abc import Hashable, Iterable
from urllib.parse import quote, unquote

from jupyter_server.auth import Authorizer, IdentityProvider, User
from traitlets import Bool, Dict, Unicode, default, observe

from hived.service.access import SERVER_ACCOUNT, Access
from hived.service.client import USER_HEADER

__all__ = ["EXCHANGE_ADMINS", "SERVER_ACCOUNT", "Access", "HivedAuthorizer", "HivedIdentityProvider",
           "caller_groups", "decide"]


def groups_of(user) -> tuple[str, ...]:
    """The groups an authenticated user object carries (none for plain users)."""
    return tuple(getattr(user, "groups", None) or ())


def caller_groups(identity_provider, user) -> tuple[Hashable, ...]:
    """What the access checks are given as the caller's groups: their Hub groups,
    and :data:`SERVER_ACCOUNT` for the account running the server (a cluster admin)."""
    extra = (SERVER_ACCOUNT,) if user is not None and is_server_account(identity_provider, user) else ()
    return groups_of(user) + extra


def vc_resource(vc: str) -> str:
    return f"hived:vc:{quote(vc, safe='')}"


def job_resource(vc: str, owner: str) -> str:
    return f"hived:job:{quote(vc, safe='')}:{quote(owner, safe='')}"


EXCHANGE_ADMINS = "hived:exchange"   # what VC admins share: the exchange's GPU-hour ledger


def exchange_resource(vc: str) -> str:
    return f"hived:exchange:{quote(vc, safe='')}"


def decide(access: Access, username: str, action: str, resource: str,
           groups: Iterable[Hashable] = ()) -> bool:
    """The REST API's policy over :class:`Access`, free of tornado so that it is easy to test and read.

    ``groups``: from :func:`caller_groups` (Hub groups, the server account)."""
    groups = frozenset(groups)
    if resource != "hived" and not resource.startswith("hived:"):
        return True  # not ours: behave like jupyter-server's AllowAllAuthorizer
    if resource == "hived":
        return True
    if access.is_admin(username, groups):
        return True
    kind, _, rest = resource[len("hived:"):].partition(":")
    parts = [unquote(p) for p in rest.split(":")] if rest else []
    if kind == "cluster":
        return action == "read" and access.known(username, groups)
    if kind == "vc" and len(parts) == 1:
        return access.is_member(username, parts[0], groups)
    if kind == "job" and len(parts) == 2:
        vc, owner = parts
        if action == "read":
            return access.may_see_job(username, vc, owner, groups)
        return access.may_change_job(username, vc, owner, groups)
    if kind == "exchange" and not parts:
        return action == "read" and any(access.is_vc_admin(username, vc, groups) for vc in access.vc_users)
    if kind == "exchange" and len(parts) == 1:
        if action == "read":
            return access.is_member(username, parts[0], groups)
        return access.is_vc_admin(username, parts[0], groups)
    return False  # "hived:admin" and anything unknown: cluster admins only


class HivedAuthorizer(Authorizer):
    """Jupyter-server Authorizer applying :func:`decide` with the live spec.

    The extension keeps the current :class:`Access` in
    ``settings["hived"].access`` (renewed on spec reload).
    """

    def is_authorized(self, handler, user: User, action: str, resource: str) -> bool:
        state = handler.settings.get("hived") if handler is not None else None
        access = getattr(state, "access", None) or Access()
        provider = getattr(handler, "identity_provider", None)
        return decide(access, user.username, action, resource, caller_groups(provider, user))


class HivedUser(User):
    """A user as hived's identity provider knows them.

    ``server_account`` is True only for requests made with the server's own
    token (or a login cookie minted from it): the account running the server.
    ``credential`` fingerprints the token the identity came from, so that a
    login cookie dies with its token.
    """

    def __init__(self, username: str, server_account: bool = False, credential: str = ""):
        super().__init__(username)
        self.server_account, self.credential = server_account, credential


def fingerprint(token: str) -> str:
    """What a login cookie keeps of a token: enough to tell it is still valid."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _raw(token: str) -> bytes:
    return token.encode("utf-8", "surrogatepass")


def _digest(token: str) -> bytes:
    return hashlib.sha256(_raw(token)).digest()


def read_tokens_file(path: str) -> dict[str, str]:
    """``{token: username}`` from a JSON file; one-line ValueError naming what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            tokens = json.load(f)
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from None
    except ValueError:
        raise ValueError(f"{path}: not JSON; want an object {{token: username}}") from None
    if not isinstance(tokens, dict) or not all(isinstance(v, str) and v for v in tokens.values()):
        raise ValueError(f"{path}: want a JSON object {{token: username}} with non-empty names")
    if any(not token for token in tokens):
        raise ValueError(f"{path}: an empty token would let anyone in")
    return tokens


def is_server_account(identity_provider, user) -> bool:
    """Whether ``user`` is the account running the server.

    Providers that tell users apart define ``is_server_account``; with
    jupyter-server's stock provider the only credential is the server's own.
    """
    check = getattr(identity_provider, "is_server_account", None)
    return bool(check(user)) if check is not None else user is not None


class HivedIdentityProvider(IdentityProvider):
    """Token authentication that knows user names (when JupyterHub is not there).

    Tokens are read from the ``Authorization`` header only, never from a URL:
    URLs end up in proxy logs, browser history and ``Referer`` headers. A
    login cookie names the token it came from and is refused as soon as that
    token is gone (see :meth:`reload_tokens`).
    """

    user_tokens = Dict(
        value_trait=Unicode(), default_value={}, config=True,
        help="Per-user tokens: {token: username}. A request with one of these "
             "tokens is that user.",
    )
    user_tokens_file = Unicode(
        "", config=True,
        help="JSON file {token: username} of per-user tokens, read at start and again on "
             "reload_tokens() (SIGHUP to hived serve, or POST hived/api/tokens/reload).",
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

    # digest of each token in force -> (token, user name; None for the server token): _token_index
    _index: dict[bytes, tuple[str, str | None]] | None = None

    @default("token_user")
    def _token_user_default(self) -> str:
        try:
            return getpass.getuser()
        except Exception:  # noqa: BLE001 - no passwd entry (containers)
            return "jupyter"

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.user_tokens_file:
            self.user_tokens = read_tokens_file(self.user_tokens_file)

    def reload_tokens(self) -> int:
        """Read the tokens file again; a removed token is refused from the next
        request on, login cookies made from it included. A bad file changes nothing."""
        if not self.user_tokens_file:
            raise LookupError("this server has no tokens file (hived serve --user-tokens FILE)")
        self.user_tokens = read_tokens_file(self.user_tokens_file)
        self.log.info("hived: %d user token(s) loaded from %s", len(self.user_tokens), self.user_tokens_file)
        return len(self.user_tokens)

    def is_server_account(self, user) -> bool:
        return bool(getattr(user, "server_account", False))

    def get_token(self, handler) -> str | None:
        m = self.auth_header_pat.match(handler.request.headers.get("Authorization", ""))
        return m.group(2).strip() if m else None

    @observe("user_tokens", "token")
    def _tokens_changed(self, change) -> None:
        self._index = None   # rebuilt from the tokens in force at the next request

    def _token_index(self) -> dict[bytes, tuple[str, str | None]]:
        """``{digest(token): (token, user name or None for the server token)}`` of the tokens in
        force. Rebuilt whenever ``user_tokens`` or ``token`` is assigned (a reload does that)."""
        index = self._index
        if index is None:
            index = {_digest(token): (token, name) for token, name in self.user_tokens.items()}
            if self.token:
                index.setdefault(_digest(self.token), (self.token, None))   # a user's token wins, as before
            self._index = index
        return index

    def _user_for(self, given: str, named: str = "") -> HivedUser | None:
        """The user ``given`` names, or None. One hash and one dictionary lookup whatever the
        number of tokens: the lookup compares digests, never the token itself, and the token
        found is compared with ``given`` in constant time."""
        hit = self._token_index().get(_digest(given))
        if hit is None or not hmac.compare_digest(_raw(hit[0]), _raw(given)):
            return None
        token, name = hit
        if name is not None:
            if self.user_tokens.get(token) != name:   # the dict was changed in place, not assigned
                self._index = None
                return self._user_for(given, named)
            return HivedUser(name, credential=fingerprint(token))
        if named:
            return HivedUser(named, credential=fingerprint(token))
        return HivedUser(self.token_user, server_account=True, credential=fingerprint(token))

    async def get_user(self, handler) -> User | None:
        """A valid token in the ``Authorization`` header is its user, and that is all: no login
        cookie is read or set for it (an API client sends its token every time; a browser gets
        its cookie from the login page). Anything else is jupyter-server's usual check (a login
        cookie; an unknown token with a valid cookie is the cookie's user, as before)."""
        if getattr(handler, "_jupyter_current_user", None):
            return handler._jupyter_current_user
        user = await self.get_user_token(handler)
        if user is not None:
            handler._token_authenticated = True   # as jupyter-server marks it: no XSRF check on its writes
            return user
        return await self._get_user(handler)

    async def get_user_token(self, handler) -> User | None:
        return self.token_user_of(handler.request.headers)

    def token_user_of(self, headers) -> HivedUser | None:
        """The user the ``Authorization`` header's token names (this provider's own tokens), or None."""
        m = self.auth_header_pat.match(headers.get("Authorization", ""))
        given = m.group(2).strip() if m else None
        if not given:
            return None
        named = headers.get(USER_HEADER, "").strip() if self.trust_user_header else ""
        return self._user_for(given, named)

    def process_login_form(self, handler) -> User | None:
        # the login page takes any valid token (form body, not URL)
        given = handler.get_body_argument("password", default="") or ""
        return self._user_for(given) if given else None

    def user_to_cookie(self, user: User) -> str:
        return json.dumps({"username": user.username, "credential": getattr(user, "credential", ""),
                           "server_account": bool(getattr(user, "server_account", False))})

    def user_from_cookie(self, cookie_value: str) -> User | None:
        doc = json.loads(cookie_value)
        credential, name = doc.get("credential") or "", doc.get("username") or ""
        if doc.get("server_account"):
            ok = bool(self.token) and hmac.compare_digest(credential, fingerprint(self.token)) \
                and name == self.token_user
            return HivedUser(name, server_account=True, credential=credential) if ok else None
        for token, owner in self.user_tokens.items():
            if owner == name and hmac.compare_digest(credential, fingerprint(token)):
                return HivedUser(name, credential=credential)
        return None  # the token it came from is gone: revoked
