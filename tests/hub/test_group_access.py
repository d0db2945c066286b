"""VC membership named by JupyterHub groups: the spec's ``groups``/``adminGroups``
and the authorization decision that uses the groups a caller carries."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hived.core.spec import SpecError, load_spec
from hived.jupyter_ext.auth import Access, decide, job_resource, vc_resource

SPEC = Path(__file__).with_name("spec_hub.yaml")


@pytest.fixture(scope="module")
def access():
    return Access.from_spec(load_spec(str(SPEC)))


def test_spec_reads_groups_and_admin_groups():
    spec = load_spec(str(SPEC))
    assert spec.vcs["vca"].groups == ["team-a"] and spec.vcs["vcb"].groups == ["team-b"]
    assert spec.vcs["vca"].admin_groups == ["leads-a"]
    assert spec.admin_groups == ["hived-admins"]


@pytest.mark.parametrize("where, value", [
    ("vc", {"groups": "team-a"}), ("vc", {"groups": [""]}), ("vc", {"adminGroups": [3]}),
    ("top", {"adminGroups": "x"}),
])
def test_bad_groups_are_refused_with_their_path(tmp_path, where, value):
    doc = yaml.safe_load(SPEC.read_text())
    (doc["virtualClusters"]["vca"] if where == "vc" else doc).update(value)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as err:
        load_spec(str(bad))
    assert "Groups" in str(err.value) or "groups" in str(err.value)


def test_group_members_submit_to_their_vc_only(access):
    assert decide(access, "carol", "write", vc_resource("vca"), groups=["team-a"])
    assert not decide(access, "carol", "write", vc_resource("vcb"), groups=["team-a"])
    assert not decide(access, "carol", "write", vc_resource("vca"))  # no group, not listed
    assert access.vcs_of("carol", ["team-a"]) == ["vca"]
    assert access.vcs_of("carol") == []


def test_group_membership_reads_jobs_of_the_vc_but_cancels_only_own(access):
    other = job_resource("vca", "someone")
    assert decide(access, "carol", "read", other, groups=["team-a"])
    assert not decide(access, "carol", "write", other, groups=["team-a"])
    assert decide(access, "lead", "write", other, groups=["leads-a"])  # VC admin by group
    assert not decide(access, "carol", "read", job_resource("vcb", "someone"), groups=["team-a"])


def test_admin_groups_make_cluster_admins(access):
    assert decide(access, "zed", "write", "hived:admin", groups=["hived-admins"])
    assert not decide(access, "zed", "write", "hived:admin", groups=["team-a", "leads-a"])
    assert access.is_admin("zed", ["hived-admins"]) and not access.is_admin("zed")


@pytest.fixture
def service(tmp_path):
    from hived.service.scheduler import SchedulerService
    from hived.testing.launcher_noop import InstantLauncher
    doc = yaml.safe_load(SPEC.read_text())
    doc["virtualClusters"]["vca"]["users"] = ["solo"]  # by name and by group at once
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    svc = SchedulerService(str(spec), tmp_path / "data", launcher=InstantLauncher())
    yield svc
    svc.close()


def test_service_takes_group_members_beside_named_users(service):
    from hived.service.scheduler import NotAuthorized
    assert service.submit("solo", {"vc": "vca", "command": "true", "gpus": 1})["user"] == "solo"
    assert service.submit("carol", {"vc": "vca", "command": "true", "gpus": 1}, ["team-a"])["vc"] == "vca"
    # the refusal names no group of the VC: which groups admit to another team is not an outsider's to know
    with pytest.raises(NotAuthorized, match="'carol' is not a member of VC 'vca'$"):
        service.submit("carol", {"vc": "vca", "command": "true", "gpus": 1}, ["team-b"])
    with pytest.raises(NotAuthorized):
        service.submit("carol", {"vc": "vcb", "command": "true", "gpus": 1})  # a groups-only VC is not open


def test_service_lets_admin_groups_cancel_others_jobs(service):
    from hived.service.scheduler import NotAuthorized
    job = service.submit("solo", {"vc": "vca", "command": "sleep 60", "gpus": 1})
    with pytest.raises(NotAuthorized):
        service.cancel(job["id"], "carol", ["team-a"])  # a member, not an admin
    assert service.cancel(job["id"], "lead", ["leads-a"])["id"] == job["id"]
    other = service.submit("solo", {"vc": "vca", "command": "sleep 60", "gpus": 1})
    assert service.cancel(other["id"], "zed", ["hived-admins"])["id"] == other["id"]


def test_admin_groups_trade_cells_and_set_retention_and_quota(service):
    """Admins by group may do what admins by name may; members by group may not."""
    from hived.service.scheduler import NotAuthorized
    assert service.set_retention("lead", "vca", keep=5, groups=["leads-a"])["policy"] == {"max_age": None,
                                                                                          "keep": 5}
    assert service.set_disk_quota("lead", "vca", 1 << 30, groups=["leads-a"])["max_bytes"] == 1 << 30
    assert service.gc("lead", groups=["leads-a"])["vcs"] == ["vca"]
    offer = service.exchange.post_offer("lead", {"vc": "vca", "cell_type": "H-NODE", "count": 1, "duration": 60},
                                        groups=["leads-a"])
    assert offer["vc"] == "vca"
    for call in (lambda g: service.set_retention("carol", "vca", keep=1, groups=g),
                 lambda g: service.set_disk_quota("carol", "vca", 1, groups=g),
                 lambda g: service.gc("carol", groups=g),
                 lambda g: service.exchange.post_request(
                     "carol", {"vc": "vca", "cell_type": "H-NODE", "count": 1, "duration": 30}, groups=g)):
        with pytest.raises(NotAuthorized):
            call(["team-a"])         # a member by group, not an admin
        with pytest.raises(NotAuthorized):
            call(["leads-b"])        # an admin group of no VC
    assert service.retention()["policies"]["vca"] == {"max_age": None, "keep": 5}   # unchanged by refusals
