"""The dashboards: ``ClusterDashboard()`` and ``VCDashboard(vc)`` (ipywidgets).

Both read the REST API through ``HivedClient`` (so they show exactly what the
user may see) and refresh themselves from a background thread every
``refresh_seconds``; ``refresh()`` does it at once. Failures of the service
show as one line above the dashboard, never as a traceback.
"""
from __future__ import annotations

import threading
import time

import ipywidgets as W

from hived.service.client import TERMINAL_STATES, HivedClient, HivedError

from .widgets_admin import AdminActions
from .widgets_render import esc, exchange_html, jobs_html, legend_html, picture_html, vc_colours, vc_table_html


class _Dashboard(W.VBox):
    def __init__(self, client: HivedClient | None = None, refresh_seconds: float = 5.0,
                 autorefresh: bool = True):
        self.header, self.message = W.HTML(), W.HTML()
        self.legend, self.picture, self.table, self.jobs_view = W.HTML(), W.HTML(), W.HTML(), W.HTML()
        self.exchange = W.HTML()   # the cell exchange panel (admins of a VC and cluster admins)
        super().__init__(layout=W.Layout(border="1px solid #93a1a1", padding="6px"))
        self.client = client if client is not None else HivedClient()
        self.refresh_seconds = float(refresh_seconds)
        self.refreshes = 0
        self.last_error: str | None = None
        self.admin: AdminActions | None = None
        self._posts: list[dict] = []   # open exchange posts, for the admin's withdraw action
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.refresh()
        if autorefresh:
            self.start()

    # -- refreshing -------------------------------------------------------
    def refresh(self) -> bool:
        """Read the service and redraw; False (and the error shown) when it failed."""
        with self._lock:
            try:
                self._draw()
            except HivedError as exc:
                self.last_error = str(exc)
                self.message.value = f'<div class="hived-error" style="color:#dc322f">{esc(exc)}</div>'
                return False
            self.refreshes += 1
            if self.last_error:
                self.last_error, self.message.value = None, ""
            return True

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="hived-dashboard", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        self.stop()
        super().close()

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_seconds):
            self.refresh()

    def _stamp(self, title: str, status: dict) -> str:
        who = status.get("user", "?") + (" (cluster admin)" if status.get("admin") else "")
        return (f'<div class="hived-header" style="font:14px sans-serif"><b>{esc(title)}</b> '
                f'<span style="color:#657b83">as {esc(who)} &middot; updated {time.strftime("%H:%M:%S")}'
                f' &middot; every {self.refresh_seconds:g}s</span></div>')

    def _admin_panel(self, status: dict, vcs: dict, jobs: list[dict]) -> None:
        user = status.get("user", "")
        admin_of = sorted(n for n, d in vcs.items() if status.get("admin") or user in (d.get("admins") or []))
        if not admin_of and not any(j["user"] == user for j in jobs):
            self.admin = None
            return
        if self.admin is None:
            self.admin = AdminActions(self.client, on_done=self._after_action)
        self.admin.update(user, bool(status.get("admin")), admin_of, jobs)
        self.admin.update_posts(self._posts if admin_of else [], admin_of)

    def _exchange_panel(self, status: dict, vcs: dict) -> None:
        """Board, loans and ledger for those who trade cells; nothing where exchange is off."""
        user = status.get("user", "")
        self._posts = []
        if not (status.get("admin") or any(user in (d.get("admins") or []) for d in vcs.values())):
            self.exchange.value = ""
            return
        try:
            board, ledger = self.client.exchange("board"), self.client.exchange("ledger").get("ledger")
        except HivedError as exc:
            if exc.status == 404:      # this service trades no cells (quota scheme)
                self.exchange.value = ""
                return
            raise
        self._posts = [p for key in ("offers", "requests") for p in board.get(key) or []]
        self.exchange.value = exchange_html(board, ledger)

    def _after_action(self, text: str, ok: bool) -> None:
        colour = "#859900" if ok else "#dc322f"
        self.refresh()
        self.message.value = f'<div class="hived-action" style="color:{colour}">{esc(text)}</div>'

    def _draw(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class ClusterDashboard(_Dashboard):
    """Every VC the user may see, the physical cluster, the queues; admin actions for admins."""

    def _draw(self) -> None:
        c = self.client
        status, vcs, cluster = c.status(), c.vcs()["vcs"], c.cluster()
        jobs = [j for j in c.jobs() if j["state"] not in TERMINAL_STATES]
        colours = vc_colours(cluster.get("vcs") or vcs)
        self.header.value = self._stamp("hived cluster", status)
        self.legend.value = legend_html(colours)
        self.picture.value = picture_html(cluster, colours)
        self.table.value = vc_table_html(vcs, colours)
        self.jobs_view.value = jobs_html(sorted(jobs, key=_job_order), "queued and running jobs")
        self._exchange_panel(status, vcs)
        self._admin_panel(status, vcs, jobs)
        self.children = [w for w in (self.header, self.message, self.table, self.legend, self.picture,
                                     self.jobs_view, self.exchange if self.exchange.value else None,
                                     self.admin) if w is not None]


class VCDashboard(_Dashboard):
    """One VC for its members: its cells and their use, its queue, where its jobs run."""

    def __init__(self, vc: str, client: HivedClient | None = None, refresh_seconds: float = 5.0,
                 autorefresh: bool = True, recent: int = 10):
        self.vc, self.recent = vc, recent
        super().__init__(client, refresh_seconds, autorefresh)

    def _draw(self) -> None:
        c = self.client
        status, doc, cluster = c.status(), c.vc(self.vc), c.cluster()
        jobs = c.jobs(vc=self.vc)
        live = [j for j in jobs if j["state"] not in TERMINAL_STATES]
        done = sorted((j for j in jobs if j["state"] in TERMINAL_STATES),
                      key=lambda j: j.get("ended") or 0, reverse=True)[: self.recent]
        colours = vc_colours(cluster.get("vcs") or [self.vc])
        self.header.value = self._stamp(f"VC {self.vc}", status)
        self.legend.value = legend_html({self.vc: colours.get(self.vc, "#268bd2")})
        self.picture.value = picture_html(cluster, colours, highlight=self.vc)
        self.table.value = vc_table_html({self.vc: doc}, colours)
        self.jobs_view.value = (jobs_html(sorted(live, key=_job_order), f"queue and running jobs of {self.vc}")
                                + jobs_html(done, "recently finished"))
        self._posts = []
        self._admin_panel(status, {self.vc: doc}, live)
        self.children = [w for w in (self.header, self.message, self.table, self.legend, self.picture,
                                     self.jobs_view, self.admin) if w is not None]


def _job_order(job: dict):
    pos = job.get("queue_position")
    return (job["state"] == "queued", pos if pos is not None else -1, job["id"])
