"""A root-run hived with the default job account (a uid per VC) checks at submission, as
the job's account, that the account reaches the job's program, workdir and the folders
it writes; what it cannot reach is refused in one line with the ways out, and nothing
is stored. A member learns nothing about folders their jobs cannot enter."""
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from service_helpers import wait_until

from hived.core.engine import RequestError

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching job accounts needs root")
pytestmark = [root_only, pytest.mark.default_job_account]


@pytest.fixture
def box(monkeypatch):
    """A root-run box: the default job account, a data directory others may pass, and a
    private folder (0700, like /root) holding a copy of a python. Tests name it before
    make_service, so the services are closed before their data directory is removed."""
    monkeypatch.delenv("HIVED_JOB_ACCOUNT", raising=False)
    base = Path(tempfile.mkdtemp(prefix="hived-reach-"))
    os.chmod(base, 0o711)
    private = base / "home"
    (private / "venv" / "bin").mkdir(parents=True)
    (private / "proj").mkdir()
    shutil.copy(sys.executable, private / "venv" / "bin" / "python")
    os.chmod(private, 0o700)
    shared = base / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    yield {"data": base / "data", "private": private, "shared": shared}
    shutil.rmtree(base, ignore_errors=True)


def _refusal(svc, body, user="alice") -> str:
    with pytest.raises(RequestError) as exc:
        svc.submit(user, body)
    return str(exc.value)


def test_a_private_venv_python_is_refused_at_submit_with_the_ways_out(box, make_service):
    svc = make_service(box["data"])
    python = str(box["private"] / "venv" / "bin" / "python")
    line = _refusal(svc, {"vc": "vca", "command": [python, "-c", "print(1)"], "workdir": str(box["shared"])})
    assert line.startswith(f"command: program {python} is not a file unix account hived-vca (uid ")
    assert f"blocked at {box['private']} (mode 0700)" in line
    for way in ("accounts:", "shared place", "HIVED_JOB_ACCOUNT=server"):
        assert way in line
    assert "\n" not in line
    # the same python named in a shell command, after an assignment
    line2 = _refusal(svc, {"vc": "vca", "command": f"X=1 {python} -c 'print(1)'", "workdir": str(box["shared"])})
    assert line2.startswith(f"command: program {python} is not")
    assert svc.list_jobs() == []


def test_a_program_found_only_on_a_private_path_is_refused(box, make_service):
    svc = make_service(box["data"])
    line = _refusal(svc, {"vc": "vca", "command": "python -c 1",
                          "env": {"PATH": str(box["private"] / "venv" / "bin")}})
    assert line.startswith("command: program 'python' is not found by unix account hived-vca")
    assert "HIVED_JOB_ACCOUNT=server" in line


def test_a_shared_program_runs_under_the_vcs_account(box, make_service):
    svc = make_service(box["data"])
    job = svc.submit("alice", {"vc": "vca", "command": "id -u", "workdir": str(box["shared"])})["id"]
    wait_until(lambda: svc.get_job(job)["state"] in ("succeeded", "failed"), what="job done")
    assert svc.get_job(job)["state"] == "succeeded", svc.get_job(job)
    assert f"\n{svc.launcher.accounts.for_job('alice', 'vca').uid}\n" in svc.logs(job)[0]


def test_a_venv_linked_to_a_private_interpreter_names_the_folder_that_blocks(box, make_service):
    """A venv in a shared place whose python links into a private pyenv (as this suite's own)."""
    svc = make_service(box["data"])
    venv = box["shared"] / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(box["private"] / "venv" / "bin" / "python")
    line = _refusal(svc, {"vc": "vca", "command": [str(venv / "python"), "-c", "1"], "workdir": str(box["shared"])})
    assert f"blocked at {box['private']} (mode 0700)" in line


def test_a_workdir_probe_learns_nothing_about_private_folders(box, make_service):
    """Issue 23: a real folder and a wrong guess inside a folder the job's account cannot
    enter answer the same, so a member cannot map another team's or root's folders."""
    svc = make_service(box["data"])
    real = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(box["private"] / "proj")})
    guess = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(box["private"] / "nope")})
    assert real.replace("proj", "X") == guess.replace("nope", "X")
    assert real.startswith(f"workdir: {box['private'] / 'proj'} is not a folder unix account hived-vca")
    # another team's job folder (0700, its VC's account) is just as closed
    b = svc.submit("bob", {"vc": "vcb", "command": "mkdir -p \"$HIVED_JOB_DIR/x\"; sleep 30"})["id"]
    wait_until(lambda: svc.get_job(b)["state"] == "running", what="B running")
    bwork = box["data"] / "jobs" / b / "work"
    wait_until(lambda: (bwork / "x").is_dir(), what="B's folder")
    real = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(bwork / "x")})
    guess = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(bwork / "y")})
    assert real.replace(str(bwork / "x"), "X") == guess.replace(str(bwork / "y"), "X")


def test_a_non_member_gets_the_membership_refusal_not_a_reach_answer(box, make_service):
    svc = make_service(box["data"])
    from hived.service.scheduler import NotAuthorized
    with pytest.raises(NotAuthorized, match="not a member of VC 'vca'"):
        svc.submit("bob", {"vc": "vca", "command": "true", "workdir": str(box["private"])})


def test_needs_writable_is_checked_as_the_jobs_account(box, make_service):
    svc = make_service(box["data"])
    line = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(box["shared"]),
                          "needs": {"writable": [str(box["private"] / "ckpt" / "run1")]}})
    assert line.startswith("needs.writable: unix account hived-vca (uid ")
    assert str(box["private"] / "ckpt" / "run1") in line
    os.chmod(box["shared"], 0o777)
    job = svc.submit("alice", {"vc": "vca", "command": "true", "workdir": str(box["shared"]),
                               "needs": {"writable": [str(box["shared"] / "ckpt" / "run1")],
                                         "programs": ["sh"]}})
    assert job["state"] in ("queued", "placed", "running", "succeeded")


def test_server_account_checks_as_the_server(box, make_service, monkeypatch):
    """HIVED_JOB_ACCOUNT=server: jobs run as root, so root's reach is what counts."""
    monkeypatch.setenv("HIVED_JOB_ACCOUNT", "server")
    svc = make_service(box["data"])
    python = str(box["private"] / "venv" / "bin" / "python")
    job = svc.submit("alice", {"vc": "vca", "command": [python, "-c", "print(1)"],
                               "workdir": str(box["private"] / "proj")})["id"]
    wait_until(lambda: svc.get_job(job)["state"] == "succeeded", what="job done")
    line = _refusal(svc, {"vc": "vca", "command": "true", "workdir": str(box["private"] / "nope")})
    assert line == f"workdir: {box['private'] / 'nope'} is not a folder hived's own account can enter"
