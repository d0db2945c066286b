"""Re-read the per-user tokens file: a removed token is refused from the next request on."""
from __future__ import annotations

from .base import ApiError, HivedHandler


class TokensReloadHandler(HivedHandler):
    async def post(self):
        provider = self.identity_provider
        await self.require("write", "hived:admin", "reload the tokens (cluster admins only)", "tokens/reload")
        reload = getattr(provider, "reload_tokens", None)
        if reload is None:
            raise ApiError(404, "this server's identity provider has no tokens file to reload", "tokens/reload")
        try:
            count = await self.run(reload)
        except LookupError as exc:
            raise ApiError(404, str(exc), "tokens/reload") from None
        except ValueError as exc:  # a bad file changes nothing
            raise ApiError(400, str(exc), "tokens file") from None
        self.reply({"tokens": count})
