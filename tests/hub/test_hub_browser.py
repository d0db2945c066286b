"""A person in a browser: log in on the Hub, open a notebook in their own
JupyterLab, and see hived's dashboard with their VC (headless Chromium)."""
from __future__ import annotations

import json
import os
import shutil
import time
from urllib.parse import quote

import pytest
import requests

from .conftest import DRIVER_TOKEN

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(300)]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CELLS = ["%load_ext hived.jupyter_ext",
         "from hived.jupyter_ext.widgets import ClusterDashboard\ndash = ClusterDashboard(refresh_seconds=1)\ndash"]


def notebook() -> dict:
    return {"nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
                       "outputs": [], "source": src} for i, src in enumerate(CELLS)]}


def wait_kernel(server: str, timeout: float = 90) -> None:
    headers = {"Authorization": f"token {DRIVER_TOKEN}"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sessions = requests.get(server + "api/sessions", headers=headers, timeout=10).json()
        if sessions and all(x["kernel"]["execution_state"] == "idle" for x in sessions):
            return
        time.sleep(0.3)
    raise AssertionError("the notebook's kernel did not start")


def test_hub_user_sees_their_vc_on_the_dashboard(hub, tmp_path):
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: run 'make system-deps' (make test does)"
    home = hub.tmp / "home" / "alice"
    home.mkdir(parents=True, exist_ok=True)
    (home / "dash.ipynb").write_text(json.dumps(notebook()))
    server = hub.start_server("alice")
    from playwright.sync_api import expect, sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(90_000)
            page.goto(hub.url + "hub/login?next=" + quote("/user/alice/lab/tree/dash.ipynb?reset"))
            page.fill("#username_input", "alice")
            page.fill("#password_input", "hub-test-password")
            page.click("#login_submit")
            page.locator(".jp-Notebook .jp-Cell").first.wait_for()
            wait_kernel(server)
            page.locator(".jp-Notebook").click()
            page.get_by_role("menuitem", name="Run").click()
            page.get_by_text("Run All Cells", exact=True).click()
            try:
                expect(page.locator(".hived-picture")).to_be_visible(timeout=90_000)
            except AssertionError:
                page.screenshot(path=str(tmp_path / "failure.png"), full_page=True)
                raise AssertionError("no dashboard; outputs: "
                                     + " || ".join(page.locator(".jp-OutputArea").all_inner_texts())) from None
            expect(page.locator('.hived-vc-row[data-vc="vca"]')).to_be_visible()
            expect(page.locator('.hived-vc-row[data-vc="vcb"]')).to_have_count(0)
            expect(page.get_by_role("button", name="Reload spec")).to_have_count(0)  # not an admin
        finally:
            browser.close()
