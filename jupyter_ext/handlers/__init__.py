"""The REST routes of hived, mounted under ``<base_url>/hived/api/``."""
from __future__ import annotations

from jupyter_server.utils import url_path_join

from .base import HivedHandler, NoRouteHandler
from .cluster import ClusterHandler, OpenAPIHandler, SpecReloadHandler, StatusHandler, VCHandler, VCsHandler
from .exchange import ExchangeHandler, ExchangePostHandler
from .gc import GcHandler
from .health import HealthHandler, ReadyHandler
from .jobs import ActivityHandler, CancelHandler, ControlHandler, JobHandler, JobsHandler, LogsHandler
from .kernel_connection import KernelConnectionHandler
from .metrics import MetricsHandler
from .summary import SummaryHandler
from .tokens import TokensReloadHandler

_SEG = r"([^/]+)"
# (path under hived/api/, handler, OpenAPI path) - the test suite checks this
# table against openapi.json in both directions
ROUTES = [
    ("status", StatusHandler, "/status"),
    ("summary", SummaryHandler, "/summary"),
    ("openapi.json", OpenAPIHandler, "/openapi.json"),
    ("cluster", ClusterHandler, "/cluster"),
    ("vcs", VCsHandler, "/vcs"),
    (f"vcs/{_SEG}", VCHandler, "/vcs/{vc}"),
    ("jobs", JobsHandler, "/jobs"),
    (f"jobs/{_SEG}", JobHandler, "/jobs/{job_id}"),
    (f"jobs/{_SEG}/cancel", CancelHandler, "/jobs/{job_id}/cancel"),
    (f"jobs/{_SEG}/logs", LogsHandler, "/jobs/{job_id}/logs"),
    (f"jobs/{_SEG}/activity", ActivityHandler, "/jobs/{job_id}/activity"),
    (f"jobs/{_SEG}/kernel-connection", KernelConnectionHandler, "/jobs/{job_id}/kernel-connection"),
    (f"jobs/{_SEG}/(hold|release|requeue)", ControlHandler,
     ("/jobs/{job_id}/hold", "/jobs/{job_id}/release", "/jobs/{job_id}/requeue")),
    ("exchange/(board|ledger|offers|requests)", ExchangeHandler,
     ("/exchange/board", "/exchange/ledger", "/exchange/offers", "/exchange/requests")),
    (f"exchange/(offers|requests)/{_SEG}", ExchangePostHandler,
     ("/exchange/offers/{post_id}", "/exchange/requests/{post_id}")),
    ("spec/reload", SpecReloadHandler, "/spec/reload"),
    ("gc", GcHandler, "/gc"),
    ("tokens/reload", TokensReloadHandler, "/tokens/reload"),
    ("healthz", HealthHandler, "/healthz"),
    ("readyz", ReadyHandler, "/readyz"),
    ("metrics", MetricsHandler, "/metrics"),
]


def handlers(base_url: str) -> list[tuple[str, type[HivedHandler]]]:
    routes = [(url_path_join(base_url, "hived", "api", path) + "/?$", cls) for path, cls, _ in ROUTES]
    # last: anything else under hived/api/ is a JSON 404, not Jupyter's HTML page
    return routes + [(url_path_join(base_url, "hived", "api") + "(/.*)?$", NoRouteHandler)]
