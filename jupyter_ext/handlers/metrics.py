"""``/hived/api/metrics``: the service's Prometheus metrics, in the text format.

Metrics name every VC and its queue and GPU use, so only cluster admins and
the server account (its token, for a scraper) may read them.
"""
from __future__ import annotations

from .base import HivedHandler

# what generate_latest writes; every Prometheus since 2.0 reads it
TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8"


class MetricsHandler(HivedHandler):
    async def get(self):
        await self.require("read", "hived:admin", "read the metrics (cluster admins only)", "metrics")
        body = await self.run(self.svc.metrics.text)
        self.finish(body, set_content_type=TEXT_FORMAT)   # APIHandler would say JSON
