"""Which account a local job runs as: the spec's mapping, else the operator's choice."""
import json
import os
import pwd
from pathlib import Path

import pytest

from hived.service import local_cgroups
from hived.service.local_accounts import AccountError, JobAccounts, resolve, uid_range

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the decision as root")


def test_resolve_names_uids_and_pairs():
    nobody = pwd.getpwnam("nobody")
    acc = resolve("nobody")
    assert (acc.uid, acc.gid, acc.name, acc.home) == (nobody.pw_uid, nobody.pw_gid, "nobody", nobody.pw_dir)
    assert (resolve(str(nobody.pw_uid)).gid, resolve(str(nobody.pw_uid)).name) == (nobody.pw_gid, "nobody")
    acc = resolve("4242:4343")
    assert (acc.uid, acc.gid, acc.groups, acc.home) == (4242, 4343, (), None)
    with pytest.raises(AccountError, match="unix account 'no-such-user-7f': no such user on this host"):
        resolve("no-such-user-7f")


@root_only
def test_mapping_first_then_a_uid_per_vc_kept_across_restarts(tmp_path):
    mapping = {("alice", "vca"): "nobody"}
    reg = tmp_path / "registry.json"
    acc = JobAccounts(tmp_path, lambda u, v: mapping.get((u, v)), mode="vc", uids=(4000, 4010), registry=reg)
    assert acc.for_job("alice", "vca").name == "nobody"
    first = acc.for_job("anna", "vca")
    other = acc.for_job("bob", "vcb")
    assert first.uid != other.uid and {first.uid, other.uid} <= set(range(4000, 4011))
    assert first.name == "hived-vca" and first.home is None and first.groups == ()
    again = JobAccounts(tmp_path, None, mode="vc", uids=(4000, 4010), registry=reg)   # a restarted service
    assert again.for_job("bob", "vcb").uid == other.uid and again.for_job("x", "vca").uid == first.uid
    assert json.loads((tmp_path / "accounts.json").read_text()) == {"vca": first.uid, "vcb": other.uid}
    assert (tmp_path / "accounts.json").stat().st_mode & 0o077 == 0
    # a check at submission (the VC not yet authorised) hands out nothing
    assert again.for_job("eve", "no-such-vc", allocate=False) is None
    assert "no-such-vc" not in json.loads((tmp_path / "accounts.json").read_text())


@root_only
def test_a_uid_of_a_real_user_is_never_handed_out(tmp_path):
    nobody = pwd.getpwnam("nobody").pw_uid
    acc = JobAccounts(tmp_path, None, mode="vc", uids=(nobody, nobody + 2), registry=tmp_path / "registry.json")
    assert acc.for_job("a", "v1").uid != nobody
    acc.for_job("b", "v2")
    with pytest.raises(AccountError, match=rf"VC 'v3': no free uid left in \$HIVED_JOB_UIDS {nobody}-{nobody + 2}"):
        acc.for_job("c", "v3")


@root_only
def test_root_is_never_a_default(tmp_path):
    with pytest.raises(AccountError, match="maps user 'alice' in VC 'vca' to root; hived runs no job as root"):
        JobAccounts(tmp_path, lambda u, v: "0", mode="vc", registry=tmp_path / "r.json").for_job("alice", "vca")
    with pytest.raises(AccountError, match="no unix account for user 'alice' in VC 'vca'"):
        JobAccounts(tmp_path, None, mode="refuse").for_job("alice", "vca")
    assert JobAccounts(tmp_path, None, mode="server").for_job("alice", "vca") is None   # the opt-in


def test_a_server_that_is_not_root_runs_jobs_as_itself(tmp_path):
    acc = JobAccounts(tmp_path, lambda u, v: {"alice": "nobody"}.get(u), mode="vc")
    acc.euid = 4242          # what a non-root hived sees
    assert acc.for_job("bob", "vcb") is None
    with pytest.raises(AccountError, match="maps user 'alice' in VC 'vca' to unix account 'nobody', but hived "
                                           "runs as uid 4242, not root, and cannot switch accounts"):
        acc.for_job("alice", "vca")


@pytest.mark.parametrize("text", ["5-4", "0-9", "abc", "7", "1-x"])
def test_bad_uid_ranges_and_modes_are_refused(text, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"\$HIVED_JOB_UIDS: must be FIRST-LAST with 0 < FIRST <= LAST"):
        uid_range(text)
    monkeypatch.setenv("HIVED_JOB_ACCOUNT", "root")
    with pytest.raises(ValueError, match=r"\$HIVED_JOB_ACCOUNT: must be one of vc, server, refuse, got 'root'"):
        JobAccounts(tmp_path)


def test_cgroup_limits_and_settings(tmp_path):
    assert local_cgroups.pod_limits(None, None) == {}
    assert local_cgroups.pod_limits(2.5, 1.5) == {"memory.max": 3 << 29, "cpu.max": "250000 100000"}
    assert local_cgroups.cgroup_base(tmp_path, "off") is None
    with pytest.raises(ValueError, match=r"\$HIVED_CGROUPS: must be auto or off, got 'yes'"):
        local_cgroups.cgroup_base(tmp_path, "yes")


@pytest.mark.parametrize("name, value, words", [
    ("HIVED_JOB_ACCOUNT", "root", "$HIVED_JOB_ACCOUNT: must be one of vc, server, refuse, got 'root'"),
    ("HIVED_JOB_UIDS", "9-1", "$HIVED_JOB_UIDS: must be FIRST-LAST with 0 < FIRST <= LAST, got '9-1'"),
    ("HIVED_CGROUPS", "maybe", "$HIVED_CGROUPS: must be auto or off, got 'maybe'"),
])
def test_bad_settings_refuse_the_service_and_leave_the_data_dir_free(make_service, monkeypatch, tmp_path,
                                                                      name, value, words):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError) as info:
        make_service(tmp_path / "d")
    assert str(info.value) == words
    monkeypatch.delenv(name)
    assert make_service(tmp_path / "d").launcher is not None    # nothing held on to the directory


def _uid_of_a_job(svc, user, vc):
    from service_helpers import wait_until
    jid = svc.submit(user, {"vc": vc, "command": "id -u > \"$HIVED_JOB_DIR/uid\"", "gpus": 1})["id"]
    wait_until(lambda: svc.tick() is not None and svc.get_job(jid)["state"] == "succeeded", what=f"{jid} to end")
    return int((svc.data_dir / "jobs" / jid / "work" / "uid").read_text())


@pytest.fixture
def open_dir(monkeypatch):
    """A folder other accounts may pass through, and the default job accounts (a uid per VC).
    Named before make_service, so services are closed before the folder is removed."""
    import shutil
    import tempfile
    monkeypatch.delenv("HIVED_JOB_ACCOUNT", raising=False)
    monkeypatch.delenv("HIVED_JOB_UIDS", raising=False)
    base = tempfile.mkdtemp(prefix="hived-uids-")
    os.chmod(base, 0o711)
    yield Path(base)
    shutil.rmtree(base, ignore_errors=True)


@root_only
def test_two_services_on_one_host_never_share_a_uid(open_dir, make_service, monkeypatch):
    tmp_path = open_dir
    registry = tmp_path / "uid-ranges.json"
    monkeypatch.setenv("HIVED_UID_REGISTRY", str(registry))
    one = make_service(tmp_path / "one", start=False)
    two = make_service(tmp_path / "two", start=False)
    uid_one, uid_two = _uid_of_a_job(one, "alice", "vca"), _uid_of_a_job(two, "alice", "vca")
    assert uid_one != uid_two
    r1, r2 = one.launcher.accounts.uids, two.launcher.accounts.uids
    assert r1[1] < r2[0] or r2[1] < r1[0], (r1, r2)     # whole ranges apart, not just these uids
    claims = json.loads(registry.read_text())
    assert claims == {str((tmp_path / "one" / "jobs").resolve()): list(r1),
                      str((tmp_path / "two" / "jobs").resolve()): list(r2)}
    assert registry.stat().st_mode & 0o077 == 0
    one.close()
    again = make_service(tmp_path / "one", start=False)       # a restart keeps its range and its uids
    assert again.launcher.accounts.uids == r1 and _uid_of_a_job(again, "anna", "vca") == uid_one
    # an operator's range that overlaps another service's is refused at start, naming both
    monkeypatch.setenv("HIVED_JOB_UIDS", f"{r2[0] + 5}-{r2[0] + 50}")
    with pytest.raises(AccountError) as info:
        make_service(tmp_path / "three", start=False)
    assert str(info.value) == (f"uids {r2[0] + 5}-{r2[0] + 50} overlap {r2[0]}-{r2[1]}, claimed in {registry} by the "
                               f"hived service with data in {(tmp_path / 'two' / 'jobs').resolve()}; give this one "
                               f"another $HIVED_JOB_UIDS")
    assert str((tmp_path / "three" / "jobs").resolve()) not in json.loads(registry.read_text())
