"""Actions under a dashboard: cancel a job, post or withdraw an exchange offer, reload the spec.

Shown only for what the user may do: everyone cancels their own jobs; VC
admins cancel their VC's jobs and trade its cells; cluster admins also
reload the spec. The service checks again (the buttons are a convenience,
not the authorization).
"""
from __future__ import annotations

from collections.abc import Callable

import ipywidgets as W

from hived.service.client import HivedClient, HivedError


class AdminActions(W.VBox):
    def __init__(self, client: HivedClient, on_done: Callable[[str, bool], None]):
        self.client, self.on_done = client, on_done
        self.job = W.Dropdown(description="job", options=[], layout=W.Layout(width="260px"))
        self.cancel_button = W.Button(description="Cancel job", button_style="danger")
        self.offer_vc = W.Dropdown(description="VC", options=[], layout=W.Layout(width="200px"))
        self.offer_cell = W.Text(description="cell type", placeholder="e.g. NODE", layout=W.Layout(width="220px"))
        self.offer_count = W.BoundedIntText(value=1, min=1, max=4096, description="count",
                                            layout=W.Layout(width="150px"))
        self.offer_hours = W.BoundedFloatText(value=1.0, min=0.01, max=8760, description="hours",
                                              layout=W.Layout(width="150px"))
        self.offer_button = W.Button(description="Post offer")
        self.post = W.Dropdown(description="post", options=[], layout=W.Layout(width="260px"))
        self.withdraw_button = W.Button(description="Withdraw post")
        self.withdraw_button.on_click(lambda _: self.withdraw())
        self.withdraw_row = W.HBox([self.post, self.withdraw_button])
        self._withdraw_shown = False
        self.reload_button = W.Button(description="Reload spec", button_style="warning")
        self.cancel_button.on_click(lambda _: self.cancel())
        self.offer_button.on_click(lambda _: self.offer())
        self.reload_button.on_click(lambda _: self.reload())
        self.cancel_row = W.HBox([self.job, self.cancel_button])
        self.offer_row = W.HBox([self.offer_vc, self.offer_cell, self.offer_count, self.offer_hours,
                                 self.offer_button])
        super().__init__()
        self.add_class("hived-admin")

    def update(self, user: str, cluster_admin: bool, admin_of: list[str], jobs: list[dict]) -> None:
        """Offer only what this user may do, on the jobs there are now."""
        mine = [j for j in jobs if cluster_admin or j["user"] == user or j["vc"] in admin_of]
        # no state in the label: labels change only with the set of jobs, so a choice survives refreshes
        options = [(f"{j['id']} {j['vc']}/{j['user']} {j.get('name') or ''}".strip(), j["id"])
                   for j in mine]
        ids = [v for _, v in options]
        current = self.job.value
        if list(getattr(self, "_ids", [])) != ids:   # re-setting equal options would reset the choice
            self.job.options = options
            self._ids = ids
        self.job.value = current if current in ids else (ids[0] if ids else None)
        self.cancel_button.disabled = not options
        if tuple(self.offer_vc.options) != tuple(admin_of):
            self.offer_vc.options = admin_of
        if admin_of and self.offer_vc.value not in admin_of:
            self.offer_vc.value = admin_of[0]
        self._rows = [self.cancel_row] + ([self.offer_row] if admin_of else []) + \
                     ([self.reload_button] if cluster_admin else [])
        self.children = self._rows + ([self.withdraw_row] if self._withdraw_shown else [])

    def update_posts(self, posts: list[dict], admin_of: list[str]) -> None:
        """The open exchange posts of the VCs this user administers, to withdraw."""
        options = [(f"{p['id']} {p['kind']} {p['vc']} {p['count']} x {p['chain']} level {p['level']}", p["id"])
                   for p in posts if p["vc"] in admin_of]
        current = self.post.value
        if [v for _, v in self.post.options] != [v for _, v in options]:
            self.post.options = options
        ids = [v for _, v in options]
        self.post.value = current if current in ids else (ids[0] if ids else None)
        self._withdraw_shown = bool(options)
        self.children = list(getattr(self, "_rows", [])) + ([self.withdraw_row] if options else [])

    def _do(self, what: Callable[[], str]) -> None:
        try:
            text, ok = what(), True
        except HivedError as exc:
            text, ok = str(exc), False
        self.on_done(text, ok)

    def cancel(self) -> None:
        def run():
            if not self.job.value:
                raise HivedError(0, "choose a job to cancel", "job")
            job = self.client.cancel(self.job.value)
            return f"{job['id']}: {job['state']}"
        self._do(run)

    def offer(self) -> None:
        def run():
            body = {"vc": self.offer_vc.value, "cell_type": self.offer_cell.value.strip(),
                    "count": int(self.offer_count.value), "duration": float(self.offer_hours.value) * 3600}
            doc = self.client.post_offer(body)
            return f"offer posted: {doc}"
        self._do(run)

    def withdraw(self) -> None:
        def run():
            if not self.post.value:
                raise HivedError(0, "choose a post to withdraw", "post")
            doc = self.client.withdraw(self.post.value)
            return f"withdrew {doc['kind']} {doc['id']} of VC {doc['vc']}"
        self._do(run)

    def reload(self) -> None:
        def run():
            doc = self.client.reload_spec()   # the server re-reads its own spec file
            down = ", ".join(doc.get("downgraded") or []) or "none"
            return f"spec reloaded: VCs {', '.join(doc.get('vcs') or [])}; downgraded to opportunistic: {down}"
        self._do(run)
