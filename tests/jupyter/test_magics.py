"""The magics in a real IPython shell against a real ``hived serve``."""
from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def ip(live_server, monkeypatch):
    """An IPython shell with the extension freshly loaded, connected as alice."""
    from IPython.testing.globalipapp import get_ipython
    shell = get_ipython()
    monkeypatch.setenv("HIVED_URL", live_server.url)
    monkeypatch.setenv("HIVED_TOKEN", "tok-alice")
    monkeypatch.delenv("HIVED_VC", raising=False)
    shell.run_line_magic("reload_ext", "hived.jupyter_ext")
    magics = shell.magics_manager.registry["HivedMagics"]
    magics.poll = 0.1
    yield shell
    shell.user_ns.pop("_gpu_job", None)


def magics_of(shell):
    return shell.magics_manager.registry["HivedMagics"]


def test_gpu_submit_runs_a_te_job_and_streams_its_log(ip, live_server, capsys):
    ip.run_line_magic("gpu_submit", "--name hello echo hello from $CUDA_VISIBLE_DEVICES")
    out = capsys.readouterr()
    job = ip.user_ns["_gpu_job"]
    assert job["state"] == "succeeded" and job["job_class"] == "te" and job["vc"] == "vca"  # alice's only VC
    assert job["name"] == "hello" and job["user"] == "alice"
    lines = out.out.splitlines()
    assert any(line.startswith(f"{job['id']} queued") or line.startswith(f"{job['id']} placed")
               or line.startswith(f"{job['id']} running") for line in lines), out.out
    assert f"{job['id']} succeeded" in out.out and "exit 0" in out.out
    chosen = re.search(r"on node\d GPUs (\d+):", out.out)          # the log's header: where hived put it
    assert chosen and f"hello from {chosen[1]}\n" in out.out, out.out  # and the job saw that GPU
    assert out.err == ""


def test_cell_form_runs_the_body_with_the_named_interpreter(ip, capsys):
    ip.run_cell_magic("gpu_submit", f"--gpus 2 {sys.executable}",
                      "import os\nprint('gpus', os.environ['CUDA_VISIBLE_DEVICES'])\n")
    out = capsys.readouterr().out
    job = ip.user_ns["_gpu_job"]
    assert job["state"] == "succeeded", out
    # the two GPUs hived chose, as the log's header names them
    chosen = re.search(r"GPUs (\d+),(\d+)", out)
    assert chosen and f"gpus {chosen[1]},{chosen[2]}" in out, out


def test_failed_job_shows_exit_code(ip, capsys):
    ip.run_cell_magic("gpu_submit", "--be --retries 0", "echo about to fail\nexit 3\n")
    out = capsys.readouterr().out
    job = ip.user_ns["_gpu_job"]
    assert job["state"] == "failed" and job["exit_code"] == 3 and job["job_class"] == "be"
    assert "about to fail" in out and "exit 3" in out


def test_status_logs_jobs_cancel(ip, live_server, capsys):
    ip.run_line_magic("gpu_submit", "--detach --name sleeper sleep 60")
    out = capsys.readouterr().out
    job_id = ip.user_ns["_gpu_job"]["id"]
    assert out.startswith(f"submitted {job_id} to vca")
    client = live_server.client("alice")
    deadline = time.monotonic() + 20
    while client.job(job_id)["state"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ip.run_line_magic("gpu_status", "")              # the last job by default
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{job_id} running") and "on node" in out
    assert "queued: submitted" in out
    ip.run_line_magic("gpu_jobs", "--state running")
    out = capsys.readouterr().out
    # a header and the columns of `hived jobs` (service/job_table.py)
    assert out.splitlines()[0].split() == ["ID", "NAME", "USER", "VC", "CLASS", "STATE", "GPUS", "PLACEMENT",
                                           "PREEMPTED", "AGE"]
    row = next(line for line in out.splitlines() if line.startswith(job_id))
    assert row.split()[1:6] == ["sleeper", "alice", "vca", "TE", "running"]
    while not client.logs(job_id)["text"]:   # the pod writes its first line a moment after it starts
        assert time.monotonic() < deadline
        time.sleep(0.05)
    ip.run_line_magic("gpu_logs", job_id)
    assert "attempt 1" in capsys.readouterr().out
    ip.run_line_magic("gpu_cancel", job_id)
    out = capsys.readouterr().out
    assert out.startswith(f"{job_id}: ")
    assert client.wait(job_id, poll=0.05, timeout=20)["state"] == "cancelled"
    ip.run_line_magic("gpu_logs", f"{job_id} -f")     # follows to the end, then stops
    assert capsys.readouterr().err == ""


def test_interrupt_detaches_and_the_job_keeps_running(ip, live_server, capsys):
    """Ctrl-C (SIGINT to this process) while following: the magic returns, the job runs on."""
    client = live_server.client("alice")
    before = {j["id"] for j in client.jobs()}

    def ctrl_c_once_following():
        # Once the new job runs, the magic is in its follow loop: press Ctrl-C then (a fixed
        # delay raced the submission on a slow machine).
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(j["id"] not in before and j["state"] == "running" for j in client.jobs()):
                time.sleep(0.3)
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    # Ctrl-C raises KeyboardInterrupt in the main thread, whatever handler a library loaded by an
    # earlier test left installed in this process.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    presser = threading.Thread(target=ctrl_c_once_following, daemon=True)
    presser.start()
    try:
        ip.run_line_magic("gpu_submit", "sleep 60")
    finally:
        presser.join(5)
        signal.signal(signal.SIGINT, previous)
    out = capsys.readouterr().out
    job_id = ip.user_ns["_gpu_job"]["id"]
    assert f"detached from {job_id} (it keeps running)" in out
    assert client.job(job_id)["state"] in ("queued", "placed", "running")
    client.cancel(job_id)


@pytest.mark.parametrize("line,says", [
    ("--vc vcb echo x", "vc: user 'alice' may not submit to VC 'vcb' (not in its users)"),
    ("--vc nope echo x", "no VC named 'nope'"),
    ("--gpus 9 echo x", "hived: "),                                    # never fits vca's 8 GPUs
    ("--workdir /no/such/dir echo x", "workdir: /no/such/dir is not a folder"),
])
def test_service_refusals_are_one_line(ip, capsys, line, says):
    before = len(magics_of(ip).client.jobs())
    result = ip.run_line_magic("gpu_submit", line)
    out = capsys.readouterr()
    assert result is None
    assert out.err.count("\n") == 1 and says in out.err and out.err.startswith("hived: "), out.err
    assert "Traceback" not in out.err + out.out
    assert len(magics_of(ip).client.jobs()) == before
    if line.startswith("--vc vcb"):     # the line docs/jupyter.md shows, word for word
        assert out.err == "hived: vc: user 'alice' may not submit to VC 'vcb' (not in its users)\n"


def test_other_magics_refusals_are_one_line(ip, capsys, monkeypatch):
    for magic, arg, says in (("gpu_status", "j999", "unknown job 'j999'"),
                             ("gpu_logs", "j999", "unknown job 'j999'"),
                             ("gpu_cancel", "j999", "unknown job 'j999'"),
                             ("gpu_jobs", "--vc vcb", "no VC named 'vcb'")):   # as if it did not exist
        ip.run_line_magic(magic, arg)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, (magic, err)
    monkeypatch.setenv("HIVED_URL", "http://127.0.0.1:9/")   # nothing listens on the discard port
    ip.run_line_magic("reload_ext", "hived.jupyter_ext")
    ip.run_line_magic("gpu_jobs", "")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no hived service at http://127.0.0.1:9/" in err


def test_user_in_no_vc_is_told_so(ip, capsys, monkeypatch):
    monkeypatch.setenv("HIVED_TOKEN", "tok-eve")
    ip.run_line_magic("reload_ext", "hived.jupyter_ext")
    ip.run_line_magic("gpu_submit", "echo x")
    err = capsys.readouterr().err
    assert err == "hived: --vc: user 'eve' is in no VC of this cluster\n"
    monkeypatch.setenv("HIVED_TOKEN", "tok-root")           # in every VC: must choose
    ip.run_line_magic("reload_ext", "hived.jupyter_ext")
    ip.run_cell("%gpu_submit echo x")
    out = capsys.readouterr()
    assert "give --vc (your VCs: vca, vcb)" in out.err + out.out


def test_usage_errors_do_not_submit(ip, capsys):
    """Bad options are IPython usage errors (one line), nothing is sent."""
    before = len(magics_of(ip).client.jobs())
    for line in ("", "--gpus two echo x", "--gpus 1 --cell T-SOCKET echo x", "--env NOEQUALS echo x"):
        ip.run_cell(f"%gpu_submit {line}")
        out = capsys.readouterr()
        assert "UsageError" in out.err + out.out and "Traceback" not in out.err + out.out, (line, out)
    assert len(magics_of(ip).client.jobs()) == before


def test_names_are_printed_escaped_and_flags_match_the_cli(ip, capsys):
    """A name with an escape sequence or a lone surrogate is refused without echoing it;
    `--owner` (the CLI's spelling) and `--cell-type` work, as do the old spellings."""
    from hived.service.client import HivedError
    client = magics_of(ip).client
    for evil in ("\x1b[31mred", "fake\ud800"):
        with pytest.raises(HivedError) as refused:
            client.submit({"vc": "vca", "command": "true", "name": evil})
        assert "\x1b" not in str(refused.value)
    job = client.submit({"vc": "vca", "command": "true", "name": "script"})
    client.wait(job["id"], poll=0.1, timeout=30)
    for line in ("--owner alice --vc vca", "--user alice --vc vca"):
        ip.run_line_magic("gpu_jobs", line)
        out = capsys.readouterr().out
        assert job["id"] in out and "script" in out, out
    ip.run_line_magic("gpu_submit", "--detach --be --cell-type T-NODE.T-SOCKET --retries 0 --label k=v true")
    assert client.job(magics_of(ip).last_job)["job_class"] == "be"


def test_hold_release_and_requeue_magics_say_what_they_did(ip, live_server, capsys):
    client = live_server.client("alice")
    # two 4-GPU jobs fill vca's two sockets; a third job queues behind them
    big, other = (client.submit({"vc": "vca", "command": "sleep 60", "gpus": 4, "job_class": "be"})["id"]
                  for _ in range(2))
    later = client.submit({"vc": "vca", "command": "sleep 60", "gpus": 1, "job_class": "be"})["id"]
    try:
        deadline = time.monotonic() + 30
        while {client.job(j)["state"] for j in (big, other)} != {"running"} and time.monotonic() < deadline:
            time.sleep(0.05)
        ip.run_line_magic("gpu_hold", later)
        assert capsys.readouterr().out == f"{later}: held (by alice); hived release {later} lets it start\n"
        assert client.job(later)["held_by"] == "alice"
        ip.run_line_magic("gpu_release", later)
        assert capsys.readouterr().out.startswith(f"{later}: released; ")
        assert client.job(later)["held_by"] is None
        ip.run_line_magic("gpu_requeue", big)
        out = capsys.readouterr()
        assert out.out.startswith(f"{big}: ") and "queued again" in out.out and out.err == ""
        ip.run_line_magic("gpu_hold", "j999")                 # one line, as every magic refuses
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "unknown job 'j999'" in err
    finally:
        for j in (big, other, later):
            client.cancel(j)
