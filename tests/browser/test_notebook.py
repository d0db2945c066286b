"""JupyterLab in headless Chromium: a notebook loads the extension, submits a
job with %gpu_submit, waits for it in the page, and shows the dashboard.

Screenshots go to docs/img/jupyter-*.png (the notebook after the job
finished, and the dashboard alone).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "tests" / "jupyter" / "spec_jupyter.yaml"
IMG = ROOT / "docs" / "img"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TOKEN = "browser-test-token"

CELLS = [
    "%load_ext hived.jupyter_ext",
    # a TE job on one GPU of vca, its log streamed into the cell
    "%%gpu_submit --vc vca --name hello-gpu python\nimport os, time\n"
    "for i in range(4):\n    print('step', i, 'on GPU', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n"
    "    time.sleep(0.4)\n",
    # something to see in the picture: a BE job of vcb left running
    "%gpu_submit --vc vcb --be --gpus 4 --name batch --detach sleep 120",
    "from hived.jupyter_ext.widgets import ClusterDashboard\n"
    "dash = ClusterDashboard(refresh_seconds=1)\ndash",
]


def notebook(cells: list[str]) -> dict:
    return {
        "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
        "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
                   "outputs": [], "source": src} for i, src in enumerate(cells)],
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def lab(tmp_path):
    """JupyterLab with hived's extension enabled, as cluster admin 'root'."""
    work, data, runtime = tmp_path / "work", tmp_path / "hived", tmp_path / "runtime"
    for d in (work, data, runtime):
        d.mkdir()
    (work / "demo.ipynb").write_text(json.dumps(notebook(CELLS)))
    # no "notified about Jupyter news?" prompt over the screenshots
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(json.dumps({"fetchNews": "false"}))
    port = free_port()
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(runtime), HIVED_DATA_DIR=str(data),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    for k in ("HIVED_URL", "HIVED_TOKEN", "HIVED_USER", "HIVED_VC"):
        env.pop(k, None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    log = open(tmp_path / "lab.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ip=127.0.0.1", f"--ServerApp.root_dir={work}", f"--IdentityProvider.token={TOKEN}",
         "--ServerApp.jpserver_extensions={'hived.jupyter_ext': True}",
         "--ServerApp.identity_provider_class=hived.jupyter_ext.auth.HivedIdentityProvider",
         "--HivedIdentityProvider.token_user=root",
         f"--HivedExtension.spec_path={SPEC}", f"--HivedExtension.data_dir={data}",
         "--HivedExtension.tick_seconds=0.2", f"--LabApp.workspaces_dir={tmp_path / 'ws'}",
         f"--LabApp.user_settings_dir={tmp_path / 'settings'}"],
        cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while True:
        try:
            r = requests.get(url + "hived/api/status", headers={"Authorization": f"token {TOKEN}"}, timeout=2)
            if r.ok:
                assert r.json()["ok"] and r.json()["user"] == "root", r.text
                break
        except requests.ConnectionError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError((tmp_path / "lab.log").read_text()[-3000:])
        time.sleep(0.3)
    yield url
    try:  # nothing the notebook started outlives the test
        s = requests.Session()
        s.headers["Authorization"] = f"token {TOKEN}"
        for job in s.get(url + "hived/api/jobs").json()["jobs"]:
            if job["state"] not in ("succeeded", "failed", "cancelled"):
                s.post(url + f"hived/api/jobs/{job['id']}/cancel", json={})
        time.sleep(0.5)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def test_notebook_submits_and_shows_the_dashboard(lab, tmp_path):
    # a missing browser is a broken install, not a reason to pass quietly
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: run 'make system-deps' (make test does)"
    lab_dir = tmp_path
    from playwright.sync_api import expect, sync_playwright
    IMG.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1100})
            page.set_default_timeout(60_000)
            # tokens in URLs are refused: log in through the form, as a person would
            page.goto(f"{lab}login?next=" + quote("/lab/tree/demo.ipynb?reset"))
            page.fill("#password_input", TOKEN)
            page.click("#login_submit")
            page.locator(".jp-Notebook .jp-Cell").first.wait_for()
            wait_kernel(lab)
            page.locator(".jp-Notebook").click()
            page.get_by_role("menuitem", name="Run").click()
            page.get_by_text("Run All Cells", exact=True).click()
            # the status widget of %gpu_submit reaches "succeeded", with the job's log under it
            job = page.locator('.hived-job[data-state="succeeded"]')
            try:
                expect(job).to_be_visible(timeout=90_000)
            except AssertionError:
                page.screenshot(path=str(lab_dir / "failure.png"), full_page=True)
                raise AssertionError("no finished job in the page; outputs: "
                                     + " || ".join(page.locator(".jp-OutputArea").all_inner_texts())) from None
            expect(job).to_contain_text("hello-gpu")
            expect(job).to_contain_text("exit 0")
            out = page.locator(".jp-Cell").nth(1).locator(".jp-OutputArea")
            expect(out).to_contain_text("step 3 on GPU")
            # the dashboard: both VCs, the picture with vcb's BE job, admin actions for root
            dash = page.locator(".hived-picture")
            expect(dash).to_be_visible(timeout=60_000)
            expect(page.locator('.hived-gpu[data-vc="vcb"][data-priority="be"]')).to_have_count(4, timeout=30_000)
            expect(page.locator(".hived-gpu")).to_have_count(16)
            expect(page.locator('.hived-vc-row[data-vc="vca"]')).to_be_visible()
            expect(page.locator('.hived-vc-row[data-vc="vcb"]')).to_be_visible()
            expect(page.get_by_role("button", name="Reload spec")).to_be_visible()
            expect(page.locator(".hived-jobs")).to_contain_text("batch")
            # refreshes on its own: the batch job is seen running without touching the page
            expect(page.locator('.hived-job-row[data-id="j2"]')).to_have_attribute("data-state", "running")
            # the one cancellable job
            expect(page.locator(".hived-admin select").first).to_have_value(re.compile(r"^j2 vcb/root batch"))
            page.screenshot(path=str(IMG / "jupyter-notebook.png"), full_page=True)
            page.locator(".hived-picture").locator("xpath=ancestor::div[contains(@class,'widget-vbox')][1]") \
                .screenshot(path=str(IMG / "jupyter-dashboard.png"))
        finally:
            browser.close()


def wait_kernel(url: str, timeout: float = 60) -> None:
    """The notebook's kernel exists and is idle (JupyterLab starts it on open)."""
    s = requests.Session()
    s.headers["Authorization"] = f"token {TOKEN}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sessions = s.get(url + "api/sessions").json()
        if sessions and all(x["kernel"]["execution_state"] == "idle" for x in sessions):
            return
        time.sleep(0.3)
    raise AssertionError(f"kernel not ready: {s.get(url + 'api/sessions').text}")
