"""Who is asking, according to JupyterHub: hived running as a Hub service.

``hived serve --hub`` (or a ``hived serve`` the Hub starts, which finds
``JUPYTERHUB_API_URL``/``JUPYTERHUB_API_TOKEN``/``JUPYTERHUB_SERVICE_NAME``
in its environment) uses :class:`HubIdentityProvider`:

- a request's ``Authorization: token ...`` is a Hub token (the
  ``JUPYTERHUB_API_TOKEN`` of a user's single-user server, or a token the
  user made on the Hub's token page). The Hub names its owner and the
  owner's groups; the answer is kept ``cache_seconds`` (30 s by default)
  per token, so a busy client costs the Hub one request per token and
  period, and a change of groups on the Hub applies within that period;
- the token must carry one of the service's access scopes
  (``access:services!service=<name>`` unless the Hub says otherwise), so
  the Hub's roles decide who may reach hived at all;
- browsers log in through the Hub's OAuth: ``hived/login`` sends them to
  the Hub, ``oauth_callback`` brings them back with a cookie holding their
  Hub token (checked like any other; writes need jupyter-server's XSRF token);
- the server's own token and a ``--user-tokens`` file keep working beside
  the Hub (the operator's local clients), and are checked first, so they
  never cost a Hub request.
"""
from __future__ import annotations

from urllib.parse import unquote, urlsplit

from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler
from tornado import web
from tornado.httputil import url_concat
from traitlets import Instance, Integer, default

from .auth import HivedIdentityProvider, HivedUser, fingerprint
from .handlers.base import HivedHandler


class HubUser(HivedUser):
    """A person the Hub vouched for: their Hub name and Hub groups."""

    def __init__(self, username: str, groups=(), credential: str = ""):
        super().__init__(username, credential=credential)
        self.groups = tuple(groups)


def user_of(model: dict, credential: str = "") -> HubUser:
    """The user a Hub user model describes (a Hub service is ``service:<name>``,
    so that it never passes for a person of the same name)."""
    name = model["name"] if model.get("kind", "user") == "user" else f"service:{model['name']}"
    return HubUser(name, model.get("groups") or (), credential)


class HubIdentityProvider(HivedIdentityProvider):
    """Identity from JupyterHub (see the module doc)."""

    cache_seconds = Integer(
        30, config=True,
        help="Seconds the Hub's answer for a token (its user, groups, scopes) is kept. A "
             "user removed from a group, or a revoked token, is refused at most this long after.")
    hub_auth = Instance(HubOAuth)

    @default("hub_auth")
    def _default_hub_auth(self) -> HubOAuth:
        # the Hub's URL, hived's own API token, client id and callback come from
        # the environment a managed service gets (or config: c.HubOAuth.*)
        auth = HubOAuth(parent=self, cache_max_age=self.cache_seconds)
        auth.allow_token_in_url = False  # tokens travel in headers only (docs/security.md)
        return auth

    @property
    def access_scopes(self) -> set:
        return set(self.hub_auth.access_scopes)

    def is_server_account(self, user) -> bool:
        return bool(getattr(user, "server_account", False))

    async def get_user(self, handler) -> HivedUser | None:
        if getattr(handler, "_jupyter_current_user", None):
            return handler._jupyter_current_user
        if not hasattr(handler, "hived_hub_user"):
            handler.hived_hub_user = await self._identify(handler)
        return handler.hived_hub_user

    async def _identify(self, handler) -> HivedUser | None:
        given = self.get_token(handler)
        if given:
            local = self._user_for(given)  # server token / tokens file: no Hub request
            if local is not None:
                handler._token_authenticated = True
                return local
            token = given
        else:
            # a browser: the Hub token its OAuth login left in a cookie. Not
            # token-authenticated, so jupyter-server's own XSRF check applies to
            # its writes (HubOAuth's _patch_xsrf is not used: it replaces that
            # check for every handler class, before any request is identified)
            token = self.hub_auth._get_token_cookie(handler)
            if not token:
                return None
        # HubAuth's cache keeps an answer forever when its age limit is 0: ask every time then
        model = await self._ask_hub(self.hub_auth.user_for_token(
            token, use_cache=self.cache_seconds > 0, sync=False))
        if model is None:
            return None
        if given:
            handler._token_authenticated = True
        if not self.hub_auth.check_scopes(self.hub_auth.access_scopes, model):
            raise web.HTTPError(403, f"the Hub does not let {model.get('name')!r} use this service "
                                     f"(needs one of: {', '.join(sorted(self.access_scopes))})")
        return user_of(model, fingerprint(token))

    async def _ask_hub(self, pending):
        try:
            return await pending
        except web.HTTPError as exc:
            if exc.status_code >= 500:  # the Hub is down or failing: say so, not "bad token"
                self.log.error("hived: JupyterHub API request failed: %s", exc)
                raise web.HTTPError(503, "JupyterHub's API did not answer; try again shortly") from None
            raise

    def get_handlers(self) -> list:
        return [(r"/hived/login", HubLoginHandler, {"hub_auth": self.hub_auth}),
                (r"/oauth_callback", HubCallbackHandler, {"hub_auth": self.hub_auth})]

    def validate_security(self, app, ssl_options=None) -> None:
        return  # no password or token to warn about: the Hub authenticates


def local_target(target: str, base: str) -> str | None:
    """``target`` when it is a path under ``base`` (this service's own base URL), else None.

    Browsers treat a backslash like a slash (``/\\host`` is ``//host``: another site) and drop
    tabs and newlines, so a target holding any of those, a scheme, a host, a ``..`` segment or
    an escaped slash or backslash is refused rather than cleaned up."""
    if not target or not target.isprintable() or any(c in target for c in "\\ "):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(base) or target.startswith("//"):
        return None
    path = unquote(parts.path)
    if "\\" in path or "//" in path or ".." in path.split("/") or not path.isprintable():
        return None
    return target


class HubLoginHandler(HivedHandler):
    """``hived/login[?next=PATH]``: off to the Hub's login, back at ``next``."""

    public = True

    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth

    async def get(self) -> None:
        base = self.settings.get("base_url", "/")
        target = local_target(self.get_query_argument("next", ""), base) or base + "hived/api/status"
        if self.current_user is not None:
            self.redirect(target)
            return
        params: dict[str, str] = {}
        verifier = None
        if self.hub_auth.pkce_enabled:
            verifier, challenge, method = self.hub_auth.generate_pkce_code_challenge()
            params.update(code_challenge=challenge, code_challenge_method=method)
        params["state"] = self.hub_auth.set_state_cookie(self, next_url=target, code_verifier=verifier)
        self.redirect(url_concat(self.hub_auth.login_url, params))


class HubCallbackHandler(HivedHandler, HubOAuthCallbackHandler):
    """Where the Hub sends a browser after login: JupyterHub's own callback
    logic, as a hived route (so that the route gate lets it through)."""

    public = True

    def initialize(self, hub_auth: HubOAuth) -> None:
        self.hub_auth = hub_auth
