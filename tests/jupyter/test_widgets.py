"""The dashboards against a real server (the in-process jupyter-server of
pytest-jupyter; the widgets' blocking HTTP calls run in a worker thread so
the server keeps answering on the test's event loop)."""
from __future__ import annotations

import asyncio
import re
import time

import pytest

from .helpers import wait_state

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def client_for(jp_serverapp, http_server_client, jp_http_port, jp_base_url):
    # http_server_client: pytest-jupyter only listens on the port once it is requested
    from hived.service.client import HivedClient

    def make(user):
        return HivedClient(f"http://127.0.0.1:{jp_http_port}{jp_base_url}", token=f"tok-{user}")
    return make


@pytest.fixture
def dashboards():
    made = []

    async def make(cls, *args, **kw):
        kw.setdefault("autorefresh", False)
        dash = await asyncio.to_thread(cls, *args, **kw)
        made.append(dash)
        return dash
    yield make
    for d in made:
        d.close()


def gpus(html: str) -> dict:
    """(node, gpu) -> {vc, priority, healthy, title} from the picture."""
    out = {}
    for m in re.finditer(r'<span class="hived-gpu" data-node="([^"]+)" data-gpu="(\d+)" data-vc="([^"]*)" '
                         r'data-priority="([^"]+)" data-healthy="(true|false)" title="([^"]*)"', html):
        out[(m[1], int(m[2]))] = {"vc": m[3], "priority": m[4], "healthy": m[5] == "true", "title": m[6]}
    return out


def table_cell(html: str, vc: str, col: str) -> str:
    row = re.search(rf'<tr class="hived-vc-row" data-vc="{vc}".*?</tr>', html, re.S)
    assert row, (vc, html)
    return re.search(rf'data-col="{col}">([^<]*)<', row[0])[1]


async def running(api, user, **body):
    code, job = await api(user, "POST", "jobs", body={"command": "sleep 60", **body})
    assert code == 201, job
    return await wait_state(api, user, job["id"], ("running",))


async def test_cluster_dashboard_for_the_cluster_admin(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    a = await running(api, "alice", vc="vca", gpus=2)
    b = await running(api, "bob", vc="vcb", job_class="be")
    service.set_health("node1", 7, False, "XID 79")
    dash = await dashboards(ClusterDashboard, client=client_for("root"))
    assert dash.last_error is None and "as root (cluster admin)" in dash.header.value
    pic = gpus(dash.picture.value)
    assert len(pic) == 16
    held = {k: v for k, v in pic.items() if v["vc"]}
    assert sorted((v["vc"], v["priority"]) for v in held.values()) == [("vca", "te"), ("vca", "te"), ("vcb", "be")]
    for pod in a["placement"]["pods"]:
        for g in pod["gpus"]:
            assert pic[(pod["node"], g)]["vc"] == "vca" and a["id"] in pic[(pod["node"], g)]["title"]
    bad = pic[("node1", 7)]
    assert bad["healthy"] is False and "UNHEALTHY: XID 79" in bad["title"]
    assert "&#10007;" in dash.picture.value
    assert sum(not v["healthy"] for v in pic.values()) == 1
    # per VC and level: cells, used, queue
    assert table_cell(dash.table.value, "vca", "total") == "2" and table_cell(dash.table.value, "vca", "used") == "1"
    assert table_cell(dash.table.value, "vca", "gpus_used") == "2/8"
    assert table_cell(dash.table.value, "vcb", "gpus_used") == "1/8"
    assert table_cell(dash.table.value, "vca", "queue") == "0"
    assert a["id"] in dash.jobs_view.value and b["id"] in dash.jobs_view.value
    # admin actions: cancel, offer, reload
    assert dash.admin is not None and dash.admin in dash.children
    rows = dash.admin.children
    assert dash.admin.cancel_row in rows and dash.admin.offer_row in rows and dash.admin.reload_button in rows
    assert {v for _, v in dash.admin.job.options} == {a["id"], b["id"]}


async def test_cluster_dashboard_for_a_user_hides_other_vcs(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    a = await running(api, "alice", vc="vca")
    b = await running(api, "bob", vc="vcb")
    dash = await dashboards(ClusterDashboard, client=client_for("alice"))
    assert re.findall(r'class="hived-vc-row" data-vc="(\w+)"', dash.table.value) == ["vca"]
    held = {v["vc"]: v for v in gpus(dash.picture.value).values() if v["vc"]}
    assert a["id"] in held["vca"]["title"]
    assert held["vcb"]["vc"] == "vcb" and b["id"] not in held["vcb"]["title"]   # coloured, not named
    assert b["id"] not in dash.jobs_view.value
    # alice may cancel her own job, nothing else
    assert dash.admin.children == (dash.admin.cancel_row,)
    assert [v for _, v in dash.admin.job.options] == [a["id"]]


async def test_stranger_sees_one_error_line(service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    dash = await dashboards(ClusterDashboard, client=client_for("eve"))
    assert dash.refreshes == 0
    assert dash.last_error.startswith("hived: user 'eve' may not see")
    assert 'class="hived-error"' in dash.message.value and "\n" not in dash.last_error


async def test_dashboard_refreshes_on_its_own(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    dash = await dashboards(ClusterDashboard, client=client_for("bob"), refresh_seconds=0.2, autorefresh=True)
    assert not any(v["vc"] for v in gpus(dash.picture.value).values())
    b = await running(api, "bob", vc="vcb", gpus=3)
    deadline = time.monotonic() + 15
    while not (sum(v["vc"] == "vcb" for v in gpus(dash.picture.value).values()) == 3
               and b["id"] in dash.jobs_view.value and dash.refreshes >= 2):
        assert time.monotonic() < deadline, dash.picture.value
        await asyncio.sleep(0.1)
    dash.stop()
    await asyncio.sleep(0.5)
    count = dash.refreshes
    await asyncio.sleep(0.6)
    assert dash.refreshes == count   # stopped means stopped


async def test_admin_cancels_through_the_dashboard(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import VCDashboard
    a = await running(api, "alice", vc="vca")
    dash = await dashboards(VCDashboard, "vca", client=client_for("ada"))   # the VC's admin
    assert dash.admin.offer_row in dash.admin.children and dash.admin.reload_button not in dash.admin.children
    dash.admin.job.value = a["id"]
    await asyncio.to_thread(dash.admin.cancel_button.click)
    assert f"{a['id']}: " in dash.message.value and "hived-action" in dash.message.value
    assert (await wait_state(api, "alice", a["id"]))["state"] == "cancelled"


async def test_offer_and_reload_actions(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    dash = await dashboards(ClusterDashboard, client=client_for("root"))
    dash.admin.offer_vc.value = "vca"
    dash.admin.offer_cell.value = "T-SOCKET"
    await asyncio.to_thread(dash.admin.offer_button.click)
    assert "offer posted" in dash.message.value
    dash.admin.offer_cell.value = ""
    await asyncio.to_thread(dash.admin.offer_button.click)
    assert "hived: " in dash.message.value and "cell_type" in dash.message.value
    await asyncio.to_thread(dash.admin.reload_button.click)
    assert "spec reloaded: VCs vca, vcb" in dash.message.value


async def test_vc_dashboard_for_members(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import VCDashboard
    a = await running(api, "alice", vc="vca")
    code, done = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "true", "name": "quick"})
    await wait_state(api, "alice", done["id"])
    b = await running(api, "bob", vc="vcb")
    dash = await dashboards(VCDashboard, "vca", client=client_for("anna"))
    assert "VC vca" in dash.header.value
    assert re.findall(r'class="hived-vc-row" data-vc="(\w+)"', dash.table.value) == ["vca"]
    assert a["id"] in dash.jobs_view.value and done["id"] in dash.jobs_view.value
    assert b["id"] not in dash.jobs_view.value
    assert "recently finished" in dash.jobs_view.value
    # other VCs' GPUs are greyed out
    assert re.search(r'data-vc="vcb"[^>]*filter:grayscale', dash.picture.value)
    assert dash.admin is None                     # anna has no job and is no admin: no actions
    other = await dashboards(VCDashboard, "vcb", client=client_for("anna"))
    assert other.last_error and "not a member" in other.last_error and other.last_error.startswith("hived: ")


async def test_exchange_panel_loans_in_the_vc_table_and_withdraw(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    post = {"cell_type": "T-SOCKET", "count": 1, "duration": 3600}
    code, lent = await api("ada", "POST", "exchange", "offers", body={"vc": "vca", **post})
    code, _ = await api("root", "POST", "exchange", "requests", body={"vc": "vcb", **post})
    assert code == 201
    code, open_offer = await api("ada", "POST", "exchange", "offers", body={"vc": "vca", **post})
    assert code == 201
    dash = await dashboards(ClusterDashboard, client=client_for("ada"))
    panel = dash.exchange.value
    assert dash.exchange in dash.children
    assert re.findall(r'class="hived-loan-row" data-id="(\w+)" data-state="(\w+)"', panel) == [("x1", "active")]
    assert re.findall(r'class="hived-post-row" data-id="(\w+)"', panel) == [open_offer["id"]]
    assert 'class="hived-ledger-row" data-vc="vca"' in panel and "4.00" in panel
    # the VC table counts the loan
    assert table_cell(dash.table.value, "vca", "gpus_used") == "0/4 (spec 8: 4 lent)"
    root = await dashboards(ClusterDashboard, client=client_for("root"))
    assert table_cell(root.table.value, "vcb", "gpus_used") == "0/12 (spec 8: 4 borrowed)"
    # the admin withdraws the open offer from the dashboard
    assert dash.admin.withdraw_row in dash.admin.children and dash.admin.post.value == open_offer["id"]
    await asyncio.to_thread(dash.admin.withdraw_button.click)
    assert f"withdrew offer {open_offer['id']} of VC vca" in dash.message.value
    assert "hived-post-row" not in dash.exchange.value and dash.admin.withdraw_row not in dash.admin.children
    # a member sees neither the exchange nor the ledger
    member = await dashboards(ClusterDashboard, client=client_for("alice"))
    assert member.exchange.value == "" and member.exchange not in member.children


async def test_queued_rows_say_why_they_wait(api, service, client_for, dashboards):
    from hived.jupyter_ext.widgets import ClusterDashboard
    await running(api, "alice", vc="vca", gpus=4)
    await running(api, "alice", vc="vca", gpus=4)
    code, waiting = await api("alice", "POST", "jobs", body={"vc": "vca", "command": "sleep 60", "gpus": 4})
    assert code == 201
    await asyncio.sleep(0.3)
    dash = await dashboards(ClusterDashboard, client=client_for("alice"))
    row = re.search(rf'data-id="{waiting["id"]}" data-state="queued">.*?<td class="hived-wait">([^<]*)</td>',
                    dash.jobs_view.value)
    assert row and "waits for" in row.group(1), dash.jobs_view.value


def test_a_frontend_without_widgets_gets_the_status_line_as_plain_text():
    """The text/plain part of a job widget's display is what a console shows: the status
    line, never the widget's class name and HTML source."""
    from hived.jupyter_ext.widgets_job import JobStatusWidget
    w = JobStatusWidget()
    w.update({"id": "j3", "name": "train", "state": "queued", "queue_position": 1,
              "wait_reason": "waits for 2 GPUs"})
    plain = w._repr_mimebundle_()["text/plain"]
    assert plain.startswith("j3 queued") and "<div" not in plain and "JobStatusWidget" not in plain
