"""A browser's way in: hived/login sends it through the Hub's login and OAuth
and back to hived with a session cookie (driven with an HTTP client that
keeps cookies and follows redirects, as a browser does)."""
from __future__ import annotations

import re
import time
from urllib.parse import urljoin

import pytest
import requests

pytestmark = pytest.mark.slow


def _form(page: requests.Response) -> tuple[str, dict]:
    action = re.search(r'<form[^>]*action="([^"]*)"', page.text)
    fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', page.text))
    return urljoin(page.url, action.group(1).replace("&amp;", "&") if action else page.url), fields


def login(hub, user: str) -> requests.Session:
    s = requests.Session()
    page = s.get(hub.hived + "hived/login?next=/services/hived/hived/api/status", timeout=30)
    assert "/hub/login" in page.url, page.url
    action, fields = _form(page)
    page = s.post(action, data={**fields, "username": user, "password": "hub-test-password"}, timeout=30)
    if "/oauth2/authorize" in page.url:  # the Hub asks the user to let hived identify them
        action, fields = _form(page)
        page = s.post(action, data=fields, timeout=30)
    assert page.url.endswith("/services/hived/hived/api/status"), (page.url, page.text[:300])
    return s


def test_browser_logs_in_through_the_hub_and_sees_its_vcs(hub):
    s = login(hub, "alice")
    doc = s.get(hub.hived + "hived/api/status", timeout=30).json()
    assert (doc["user"], doc["vcs"]) == ("alice", ["vca"])
    vcs = s.get(hub.hived + "hived/api/vcs", timeout=30)
    assert vcs.status_code == 200, vcs.text


def test_cookie_session_writes_need_the_xsrf_token(hub):
    s = login(hub, "bob")
    r = s.post(hub.hived + "hived/api/jobs", json={"vc": "vcb", "command": "true", "gpus": 1}, timeout=30)
    assert r.status_code == 403 and "xsrf" in r.text.lower(), r.text
    # the service's own XSRF cookie (the Hub has one too, for its pages)
    xsrf = [c.value for c in s.cookies if c.name == "_xsrf" and c.path.startswith("/services/hived")]
    assert xsrf, [(c.name, c.path) for c in s.cookies]
    for _ in range(3):   # the proxy's own 503 page (it could not reach hived for a moment) never reached hived
        r = s.post(hub.hived + "hived/api/jobs", json={"vc": "vcb", "command": "true", "gpus": 1},
                   headers={"X-XSRFToken": xsrf[0]}, timeout=30)
        if not (r.status_code == 503 and "<title>JupyterHub</title>" in r.text):
            break
        time.sleep(1)
    assert r.status_code in (200, 201) and r.json()["user"] == "bob", r.text


def test_login_never_redirects_off_the_service(hub):
    s = requests.Session()
    r = s.get(hub.hived + "hived/login", params={"next": "https://elsewhere.example/"}, timeout=30,
              allow_redirects=False)
    assert r.status_code == 302 and "elsewhere" not in r.headers["Location"].split("?")[0]
    assert "elsewhere" not in requests.utils.unquote(r.headers["Location"])
