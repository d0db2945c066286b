"""What local mode isolates, through the real service and real processes.

Run as root (as CI does): jobs of each VC then run under a uid of their own.
The data directory lives in a folder other accounts may pass through (0711),
not under pytest's root-only temporary folder.
"""
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from pathlib import Path

import pytest
from service_helpers import wait_until

PY = sys.executable
SECRETS = {"HIVED_TOKEN": "srv-token-5c1d", "JUPYTER_TOKEN": "jup-token-77aa", "JPY_API_TOKEN": "jpy-9e0f",
           "AWS_SECRET_ACCESS_KEY": "aws-3b2c"}

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching job accounts needs root")


@pytest.fixture
def open_data(monkeypatch):
    """A data directory reachable by other accounts, and the suite's default (a uid per VC).
    Named before make_service, so services are closed before the folder is removed."""
    monkeypatch.delenv("HIVED_JOB_ACCOUNT", raising=False)
    base = Path(tempfile.mkdtemp(prefix="hived-iso-"))
    os.chmod(base, 0o711)
    yield base / "data"
    shutil.rmtree(base, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _log(svc, jid):
    return svc.logs(jid)[0]


@root_only
def test_a_job_sees_no_server_secret_and_cannot_read_the_server(open_data, make_service, monkeypatch):
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    svc = make_service(open_data)
    job = svc.submit("alice", {"vc": "vca", "command":
                               f"env; if cat /proc/{os.getpid()}/environ >/dev/null 2>&1; "
                               "then echo SERVER-ENV-READ; else echo SERVER-ENV-DENIED; fi"})["id"]
    wait_until(lambda: svc.get_job(job)["state"] == "succeeded", what="env job done")
    text = _log(svc, job)
    for value in SECRETS.values():
        assert value not in text
    lines = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("["))
    assert not any(k.startswith(("JPY_", "JUPYTER_")) or k == "HIVED_TOKEN" for k in lines)
    work = open_data / "jobs" / job / "work"
    assert lines["HIVED_JOB_ID"] == job and lines["HIVED_VC"] == "vca" and lines["HIVED_JOB_DIR"] == str(work)
    assert lines["HOME"] == str(work) and lines["USER"] == "hived-vca" and "CUDA_VISIBLE_DEVICES" in lines
    assert lines["PATH"]
    assert "SERVER-ENV-DENIED" in text.splitlines()[2:]


@root_only
def test_a_job_of_one_vc_cannot_reach_another_vcs_job(open_data, make_service):
    svc = make_service(open_data)
    b = svc.submit("bob", {"vc": "vcb", "env": {"B_SECRET": "hunter2"}, "command":
                           'echo topsecret > "$HIVED_JOB_DIR/secret"; echo "$$" > "$HIVED_JOB_DIR/pid"; '
                           "echo b-ready; exec sleep 300"})["id"]
    wait_until(lambda: "\nb-ready\n" in _log(svc, b), what="B running")
    bjob = open_data / "jobs" / b
    bwork, blog = bjob / "work", bjob / "logs" / "rank-0" / "000000000000.log"
    bpid = int((bwork / "pid").read_text())
    # what only B's account (and root) may touch
    buid = bwork.stat().st_uid
    assert buid not in (0, os.geteuid()) and stat.S_IMODE(bwork.stat().st_mode) == 0o700
    # logs: the service's own (a job owning a folder a root runner writes in could redirect it)
    assert stat.S_IMODE(blog.parent.stat().st_mode) == 0o700 and blog.parent.stat().st_uid == os.geteuid()
    assert stat.S_IMODE(blog.stat().st_mode) == 0o600 and blog.stat().st_uid == os.geteuid()
    attempt = bjob / "attempt-1"
    assert stat.S_IMODE(attempt.stat().st_mode) == 0o700 and attempt.stat().st_uid == os.geteuid()

    probe = (f"for f in {bwork}/secret {blog} /proc/{bpid}/environ {attempt}/rank-0.spec.json; do "
             'if cat "$f" >/dev/null 2>&1; then echo "READ $f"; else echo "DENIED $f"; fi; done; '
             f"if ls {bwork} >/dev/null 2>&1; then echo LISTED; else echo NOLIST; fi; "
             f"if ls {open_data}/jobs >/dev/null 2>&1; then echo JOBS-LISTED; else echo JOBS-NOLIST; fi; "
             f"if touch {bwork}/planted 2>/dev/null; then echo WROTE; else echo NOWRITE; fi; "
             f"if kill {bpid} 2>/dev/null; then echo KILLED; else echo NOKILL; fi; "
             'touch "$HIVED_JOB_DIR/mine" && echo OWN-WRITE; echo "uid=$(id -u)"')
    a = svc.submit("alice", {"vc": "vca", "command": probe})["id"]
    wait_until(lambda: svc.get_job(a)["state"] == "succeeded", what="probe done")
    text = _log(svc, a)
    out = text.splitlines()[2:]     # below the header and the cgroup line
    assert not [x for x in out if x.startswith("READ ")] and len([x for x in out if x.startswith("DENIED ")]) == 4, text
    for word in ("NOLIST", "JOBS-NOLIST", "NOWRITE", "NOKILL", "OWN-WRITE"):
        assert word in out, (word, text)
    auid = int(next(x for x in out if x.startswith("uid="))[4:])
    assert auid not in (0, buid)
    assert svc.get_job(b)["state"] == "running" and _alive(bpid)
    assert not (bwork / "planted").exists() and (bwork / "secret").read_text() == "topsecret\n"


@root_only
def test_a_vc_keeps_its_uid_and_other_vcs_get_others(open_data, make_service):
    svc = make_service(open_data)
    ids = [svc.submit(u, {"vc": vc, "command": "id -u"})["id"]
           for u, vc in (("alice", "vca"), ("anna", "vca"), ("bob", "vcb"))]
    for j in ids:
        wait_until(lambda: svc.get_job(j)["state"] == "succeeded", what=f"{j} done")  # noqa: B023 - waited on here
    uid = [int(_log(svc, j).splitlines()[2]) for j in ids]
    assert uid[0] == uid[1] != uid[2] and 0 not in uid


@root_only
def test_refuse_mode_fails_an_unmapped_job_with_the_reason(open_data, make_service, monkeypatch):
    monkeypatch.setenv("HIVED_JOB_ACCOUNT", "refuse")
    from hived.core.engine import RequestError
    svc = make_service(open_data)
    with pytest.raises(RequestError, match="user: no unix account for user 'alice' in VC 'vca': hived runs "
                                           "as root and runs no job as root; map one in the spec"):
        svc.submit("alice", {"vc": "vca", "command": "id -u"})
    assert svc.list_jobs() == []
    # accepted before the operator changed the mode: it fails at launch, and its log says why
    monkeypatch.setenv("HIVED_JOB_ACCOUNT", "vc")
    svc2 = make_service(open_data.parent / "data2", start=False)
    j = svc2.submit("alice", {"vc": "vca", "command": "id -u"})["id"]
    svc2.launcher.accounts.mode = "refuse"
    svc2.start()
    wait_until(lambda: svc2.get_job(j)["state"] == "failed", what="refused job failed")
    assert "hived: attempt 1 not started: no unix account for user 'alice'" in _log(svc2, j)
    assert not (open_data.parent / "data2" / "jobs" / j / "attempt-1").exists()   # nothing ran


@root_only
def test_the_spec_mapping_decides_the_account(open_data, make_service):
    svc = make_service(open_data)
    # until core/spec.py maps accounts itself, give this spec the mapping (user in VC -> account)
    object.__setattr__(svc.spec, "unix_account",
                       lambda user, vc: {"alice": "nobody", "bob": "4242:4343"}.get(user))
    ids = {u: svc.submit(u, {"vc": vc, "command": "id -u; id -g"})["id"]
           for u, vc in (("alice", "vca"), ("bob", "vcb"))}
    for j in ids.values():
        wait_until(lambda: svc.get_job(j)["state"] == "succeeded", what=f"{j} done")  # noqa: B023 - waited on here
    assert _log(svc, ids["alice"]).splitlines()[2:4] == ["65534", "65534"]
    assert _log(svc, ids["bob"]).splitlines()[2:4] == ["4242", "4343"]


DAEMON = """import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        with open(os.environ["HIVED_JOB_DIR"] + "/daemon.pid", "w") as f:
            f.write(str(os.getpid()))
        os.execve("/bin/sleep", ["sleep", "300"], {})   # no HIVED_* marker left in its environment
    os._exit(0)
os.wait()
"""


@pytest.mark.parametrize("cgroups", ["auto", "off"])
@pytest.mark.parametrize("ending", ["cancel", "exit"])
def test_a_daemonised_child_dies_with_its_job(make_service, tmp_path, monkeypatch, cgroups, ending):
    from hived.service import local_cgroups
    monkeypatch.setenv("HIVED_CGROUPS", cgroups)
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON)
    svc = make_service()
    rest = "sleep 300" if ending == "cancel" else "sleep 0.3"
    j = svc.submit("alice", {"vc": "vca", "command": f'"{PY}" {script}; echo started; {rest}'})["id"]
    pid_file = tmp_path / "data" / "jobs" / j / "work" / "daemon.pid"
    wait_until(lambda: pid_file.exists() and pid_file.read_text() and "\nstarted\n" in _log(svc, j),
               what="daemon started")
    daemon = int(pid_file.read_text())
    pod = json.loads((tmp_path / "data" / "jobs" / j / "attempt-1" / "rank-0.pod.json").read_text())
    runner = pod["pid"]
    assert _alive(daemon) and os.getsid(daemon) != os.getsid(runner)   # out of the job's session and group
    if ending == "cancel":
        svc.cancel(j, "alice")
        wait_until(lambda: svc.get_job(j)["state"] == "cancelled", what="cancelled")
    else:
        wait_until(lambda: svc.get_job(j)["state"] == "succeeded", what="job ended")
    wait_until(lambda: not _alive(daemon), timeout=5, what="daemon gone")
    # which way it went: the pod's cgroup where this host offers a writable cgroup v2
    expect_cgroup = cgroups == "auto" and svc.launcher.cgroup_base is not None
    assert ("[hived] cgroup " in _log(svc, j)) == expect_cgroup
    assert ("process-tree sweep" in _log(svc, j)) == (not expect_cgroup)
    if cgroups == "auto" and local_cgroups.cgroup2_mount() is not None and os.geteuid() == 0:
        assert expect_cgroup
    if pod["cgroup"]:   # and nothing of it is left on the host
        wait_until(lambda: not os.path.exists(pod["cgroup"]), timeout=5, what="the pod's cgroup removed")


GRACEFUL = """import os, signal, sys, time
def stop(*_):
    time.sleep(3)            # writing the checkpoint takes a while
    with open(os.path.join(os.environ["HIVED_JOB_DIR"], "ckpt"), "w") as f:
        f.write("saved")
    print("checkpointed", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("stop", ["cancel", "preempt"])
def test_a_shell_string_command_gets_its_whole_grace_period(make_service, tmp_path, stop):
    script = tmp_path / "graceful.py"
    script.write_text(GRACEFUL)
    svc = make_service()
    # a string: the command is `sh -c`, whose shell dies at SIGTERM while python handles it
    job = {"vc": "vca", "command": f'"{PY}" {script}; echo shell-went-on', "job_class": "be", "gpus": 4,
           "grace_period": 10}
    ids = [svc.submit("alice", job)["id"] for _ in range(1 if stop == "cancel" else 2)]   # 2 fill the VC
    wait_until(lambda: all("\nready\n" in _log(svc, j) for j in ids), what="jobs ready")
    t0 = time.monotonic()
    if stop == "cancel":
        j = ids[0]
        svc.cancel(j, "alice")
        wait_until(lambda: svc.get_job(j)["state"] == "cancelled", timeout=15, what="cancelled")
    else:
        svc.submit("anna", {"vc": "vca", "command": "sleep 0.2", "gpus": 4, "job_class": "te"})
        j = wait_until(lambda: next((j for j in ids if svc.get_job(j)["preemptions"] == 1), None),
                       what="a victim")
        wait_until(lambda: svc.get_job(j)["state"] in ("queued", "placed", "running"), timeout=15,
                   what="the victim back in its queue")
    took = time.monotonic() - t0
    ckpt = tmp_path / "data" / "jobs" / j / "work" / "ckpt"
    assert ckpt.exists() and ckpt.read_text() == "saved"
    assert "\ncheckpointed\n" in _log(svc, j)
    assert 3.0 <= took < 9.0, took    # the handler's 3 s, never the 10 s deadline's SIGKILL


def test_a_pod_gets_its_memory_and_cpu_limits_where_the_cgroup_offers_them(tmp_path, monkeypatch):
    from hived.core.jobs import JobRequest, Placement, PodGroup, PodPlacement
    from hived.service.local_launcher import LocalLauncher
    monkeypatch.setenv("HIVED_CGROUPS", "auto")
    la = LocalLauncher(tmp_path / "jobs")
    base = la.cgroup_base
    # what hived's cgroup folder hands down to the per-service folders below it
    offered = set((base.parent / "cgroup.subtree_control").read_text().split()) if base else set()
    if not {"memory", "cpu"} <= offered:
        pytest.skip(f"this host's cgroup v2 offers no memory/cpu controller to hived (offered: {offered or 'none'})")
    hog = "x = bytearray(1 << 30); print('allocated', flush=True)"
    req = JobRequest(user="alice", vc="vca", command=[PY, "-c", hog],
                     groups=[PodGroup(pods=1, gpus=0, cpus=0.5, memory_gb=0.25)])
    la.launch("m", req, Placement("T", (PodPlacement(0, "node0", ()),)), 1)
    ev = wait_until(lambda: next((e for e in la.poll() if e.kind == "exited"), None), timeout=30, what="exit")
    text = la.logs("m")[0]
    assert "memory.max=268435456" in text and "cpu.max=50000 100000" in text, text
    assert ev.exit_code == -signal.SIGKILL and "\nallocated\n" not in text   # the kernel's OOM kill


@root_only
def test_hived_serve_started_with_a_token_keeps_it_from_jobs(open_data):
    """As an operator starts it: `hived serve` with its token in the environment."""
    import subprocess

    from hived.service.client import HivedClient
    spec = str(Path(__file__).with_name("spec_small.yaml"))
    env = {k: v for k, v in os.environ.items() if k not in ("HIVED_JOB_ACCOUNT", "HIVED_URL", "HIVED_DATA_DIR")}
    env.update(SECRETS)
    srv = subprocess.Popen([PY, "-m", "hived.cli.main", "serve", "--spec", spec, "--data-dir",
                            str(open_data), "--port", "0", "--trust-user-header", "--tick", "0.1", "--allow-root"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: srv.poll() is not None or (open_data / "server.json").exists(), timeout=60,
                   what="hived serve up")
        assert srv.poll() is None, srv.stdout.read().decode()[-2000:]
        alice, bob = (HivedClient(data_dir=str(open_data), user=u) for u in ("alice", "bob"))
        b = bob.submit({"vc": "vcb", "command": 'echo b-secret > "$HIVED_JOB_DIR/x"; sleep 30'})["id"]
        wait_until(lambda: (open_data / "jobs" / b / "work" / "x").exists(), what="B wrote its file")
        a = alice.submit({"vc": "vca", "command": f"env; cat {open_data}/jobs/{b}/work/x || echo A-DENIED"})["id"]
        assert alice.wait(a, poll=0.1, timeout=30)["state"] == "succeeded"
        text = alice.logs(a)["text"]
        assert "A-DENIED" in text.splitlines() and "b-secret" not in text
        for value in SECRETS.values():
            assert value not in text
        bob.cancel(b)
    finally:
        srv.terminate()
        srv.wait(timeout=30)
