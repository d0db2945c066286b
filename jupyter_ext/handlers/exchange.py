"""Cell exchange: the bulletin board, offers, requests and the GPU-hour ledger.

The methods are those of the service's exchange part (``svc.exchange``,
service/exchange.py), looked up by name so that a service built without the
exchange answers a clear 404 rather than failing.
"""
from __future__ import annotations

from ..auth import EXCHANGE_ADMINS, exchange_resource
from .base import ApiError, HivedHandler, service_errors

VIEWS = ("board", "ledger", "offers", "requests")


class ExchangeHandler(HivedHandler):
    def _method(self, name: str):
        method = getattr(getattr(self.svc, "exchange", None), name, None)
        if method is None:
            raise ApiError(404, "cell exchange is not enabled in this service", f"exchange/{name}")
        return method

    async def get(self, what: str):
        if what == "ledger":   # GPU-hour accounts: VC admins and cluster admins
            await self.require("read", EXCHANGE_ADMINS, "read the exchange ledger (VC admins only)",
                               "exchange/ledger")
        await self.require("read", "hived:cluster", "see the exchange (not in any VC)", f"exchange/{what}")
        with service_errors(f"exchange/{what}"):
            doc = await self.run(self._method(what))
        self.reply(doc if isinstance(doc, dict) else {what: doc})

    async def post(self, what: str):
        if what not in ("offers", "requests"):
            raise ApiError(404, f"only offers and requests can be posted, not {what!r}", f"exchange/{what}")
        body = await self.json_body("ExchangePost")
        vc = body["vc"]
        if vc not in self.hived.access.vc_users:
            known = ", ".join(sorted(self.hived.access.vc_users))
            raise ApiError(404, f"no VC named {vc!r}; VCs: {known}", "body.vc")
        await self.require("write", exchange_resource(vc), f"trade the cells of VC {vc!r} (VC admins only)", "body.vc")
        kind = "offer" if what == "offers" else "request"
        with service_errors("body"):
            doc = await self.run(self._method(f"post_{kind}"), self.username, body, self.groups)
        self.reply(doc if isinstance(doc, dict) else {kind: doc}, status=201)


class ExchangePostHandler(HivedHandler):
    """DELETE exchange/offers/{id} or exchange/requests/{id}: withdraw an open post."""

    async def delete(self, what: str, post_id: str):
        where = f"exchange/{what}/{post_id}"
        await self.require("read", "hived:cluster", "withdraw exchange posts (not in any VC)", where)
        method = getattr(getattr(self.svc, "exchange", None), "withdraw", None)
        if method is None:
            raise ApiError(404, "cell exchange is not enabled in this service", where)
        with service_errors(where):
            doc = await self.run(method, self.username, post_id, self.groups, what[:-1])
        self.reply(doc)
