"""LocalLauncher with real processes: env, logs, signals, gangs, adoption."""
import os
import signal
import sys
import time

import pytest
from service_helpers import dead_or_zombie, wait_until

from hived.core.jobs import JobRequest, Placement, PodPlacement
from hived.service.local_launcher import LocalLauncher

PY = sys.executable


def placement(*gpu_lists, node="n0"):
    return Placement("A", tuple(PodPlacement(r, node, tuple(g)) for r, g in enumerate(gpu_lists)))


def req(cmd, **kw):
    return JobRequest(user="alice", vc="vc1", command=cmd, **kw)


def wait_exit(launcher, job_id, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for ev in launcher.poll():
            if ev.job_id == job_id and ev.kind == "exited":
                return ev
        time.sleep(0.05)
    raise AssertionError(f"{job_id} did not exit within {timeout}s")




def test_env_workdir_exit_code_and_log(tmp_path):
    la = LocalLauncher(tmp_path / "jobs")
    wd = tmp_path / "wd"
    wd.mkdir()
    code = ("import os; print('|'.join(os.environ[k] for k in ['CUDA_VISIBLE_DEVICES','NVIDIA_VISIBLE_DEVICES',"
            "'HIVED_JOB_ID','HIVED_VC','HIVED_RANK','HIVED_WORLD_SIZE','MYVAR'])); print(os.getcwd())")
    la.launch("j1", req([PY, "-c", code], env={"MYVAR": "x"}, workdir=str(wd)), placement([2, 3], [4, 5]), 1)
    evs = la.poll()
    assert [(e.job_id, e.kind) for e in evs] == [("j1", "started")]
    ev = wait_exit(la, "j1")
    assert ev.exit_code == 0
    text0, off0 = la.logs("j1", 0)
    text1, _ = la.logs("j1", 1)
    assert "2,3|2,3|j1|vc1|0|2|x" in text0 and str(wd) in text0
    assert "4,5|4,5|j1|vc1|1|2|x" in text1
    assert off0 == len(text0.encode())
    assert la.logs("j1", 0, off0) == ("", off0)


def test_gang_member_failure_stops_the_gang(tmp_path):
    la = LocalLauncher(tmp_path)
    cmd = ("import os, sys, time\n"
           "if os.environ['HIVED_RANK'] == '1':\n"
           "    print('boom: ModuleNotFoundError: nope'); sys.exit(3)\n"
           "time.sleep(60)\n")
    la.launch("g", req([PY, "-c", cmd]), placement([0], [1]), 1)
    ev = wait_exit(la, "g", timeout=30)     # rank 0 sleeps 60 s: the gang ended without waiting for it
    assert ev.exit_code == 3
    assert "ModuleNotFoundError" in ev.log_tail


@pytest.mark.parametrize("cgroups", ["auto", "off"])
def test_sigterm_grace_then_sigkill_to_the_whole_group(tmp_path, cgroups):
    la = LocalLauncher(tmp_path, cgroups=cgroups)
    # ignores SIGTERM and starts a grandchild in the same group
    stubborn = ("import signal, subprocess, sys, time, os\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
                "open(os.environ['HIVED_JOB_DIR'] + '/gc.pid', 'w').write(str(p.pid))\n"
                "print('ready', flush=True); time.sleep(120)\n")
    la.launch("s", req([PY, "-c", stubborn]), placement([0]), 1)
    wait_until(lambda: "\nready\n" in la.logs("s")[0])
    gc_pid = int((tmp_path / "s" / "work" / "gc.pid").read_text())
    t0 = time.time()
    la.terminate("s", 1.0)
    ev = wait_exit(la, "s")
    assert ev.exit_code == -signal.SIGKILL
    assert time.time() - t0 >= 0.9      # not before the grace; it sleeps 120 s, wait_exit gives 15
    wait_until(lambda: dead_or_zombie(gc_pid))

    # a polite program checkpoints on SIGTERM and exits inside the grace period
    polite = ("import signal, sys, time\n"
              "def bye(*_): print('checkpointed'); sys.exit(0)\n"
              "signal.signal(signal.SIGTERM, bye)\n"
              "print('ready', flush=True); time.sleep(60)\n")
    la.launch("p", req([PY, "-c", polite]), placement([0]), 1)
    wait_until(lambda: "\nready\n" in la.logs("p")[0])
    la.terminate("p", 10.0)
    ev = wait_exit(la, "p")
    assert ev.exit_code == 0 and "checkpointed" in la.logs("p")[0]

    # default SIGTERM action: killed by signal 15
    la.launch("q", req("echo ready; sleep 60"), placement([0]), 1)
    wait_until(lambda: "\nready\n" in la.logs("q")[0])
    la.terminate("q", 10.0)
    assert wait_exit(la, "q").exit_code in (-signal.SIGTERM, 143)


def test_log_rotation_keeps_offsets_and_a_bounded_size(tmp_path):
    la = LocalLauncher(tmp_path, max_log_bytes=4096, keep_logs=3)
    la.launch("r", req([PY, "-c", "for i in range(3000): print(f'line {i:05d}')"]), placement([0]), 1)
    assert wait_exit(la, "r").exit_code == 0
    logdir = tmp_path / "r" / "logs" / "rank-0"
    segs = sorted(logdir.iterdir())
    assert len(segs) == 3 and all(s.stat().st_size <= 4096 for s in segs)
    total = la.log_size("r")
    assert total > 3000 * 11
    text, end = la.logs("r", 0, 0)           # rotated-away text is skipped
    assert end == total and text.rstrip().endswith("exited with code 0")
    assert "line 02999" in text and "line 00000" not in text
    # reading in small pieces reassembles the same stream across segments
    pieces, off = [], int(segs[0].stem)
    while off < total:
        t, off = la.logs("r", 0, off, limit=1000)
        pieces.append(t)
    assert "".join(pieces) == text
    # a second attempt appends to the same stream
    la.launch("r", req("echo second attempt"), placement([0]), 2)
    wait_exit(la, "r")
    assert "second attempt" in la.logs("r", 0, total)[0]


def test_missing_command_or_workdir_exits_127(tmp_path):
    la = LocalLauncher(tmp_path)
    la.launch("m", req(["/no/such/program"]), placement([0]), 1)
    ev = wait_exit(la, "m")
    assert ev.exit_code == 127 and "cannot start" in ev.log_tail
    la.launch("w", req(["true"], workdir=str(tmp_path / "gone")), placement([0]), 1)
    ev = wait_exit(la, "w")
    assert ev.exit_code == 127 and "gone" in ev.log_tail
    with pytest.raises(ValueError, match="command: empty"):
        la.launch("e", req("   "), placement([0]), 1)


def test_adopt_after_restart(tmp_path):
    first = LocalLauncher(tmp_path)
    first.launch("alive", req("echo up; sleep 60"), placement([0], [1]), 1)
    first.launch("done", req("echo finished; exit 4"), placement([2]), 1)
    first.launch("gone", req("echo up; sleep 60"), placement([3]), 1)
    wait_until(lambda: all("\nup\n" in first.logs(j)[0] for j in ("alive", "gone")))
    wait_until(lambda: (tmp_path / "done" / "attempt-1" / "rank-0.exit.json").exists())
    # the service dies: its launcher object is dropped without stopping anything;
    # "gone" loses its processes to an outside SIGKILL meanwhile
    import json
    pid = json.loads((tmp_path / "gone" / "attempt-1" / "rank-0.pod.json").read_text())["pid"]
    os.killpg(pid, signal.SIGKILL)
    first._jobs.clear()

    second = LocalLauncher(tmp_path)
    wait_until(lambda: dead_or_zombie(pid))
    assert second.adopt("alive", placement([0], [1])) is True
    assert second.adopt("done", placement([2])) is True
    assert second.adopt("gone", placement([3])) is False
    assert second.adopt("never", placement([4])) is False
    ev = wait_exit(second, "done")
    assert ev.exit_code == 4 and "finished" in ev.log_tail
    assert sorted(second.running()) == ["alive"]
    second.terminate("alive", 0.5)
    assert wait_exit(second, "alive").exit_code in (-signal.SIGTERM, -signal.SIGKILL, 143)


def test_adopt_refuses_a_torn_exit_file_without_raising(tmp_path):
    """A pod known only by its exit file, and that file torn (a power cut mid-write):
    nothing says how it ended, so there is nothing to adopt; a restart must not crash on it."""
    first = LocalLauncher(tmp_path)
    first.launch("torn", req("exit 3"), placement([0]), 1)
    adir = tmp_path / "torn" / "attempt-1"
    wait_until(lambda: (adir / "rank-0.exit.json").exists())
    first._jobs.clear()
    for name in ("rank-0.pod.json", "rank-0.spec.json"):
        (adir / name).unlink(missing_ok=True)
    (adir / "rank-0.exit.json").write_text('{"exit_co')
    assert LocalLauncher(tmp_path).adopt("torn", placement([0])) is False


def test_a_killed_runner_leaves_no_daemon_behind(tmp_path):
    """Without a cgroup, a daemon whose supervisor was killed (by the job itself, when
    hived is not root) is found by the HIVED_POD mark in its environment."""
    la = LocalLauncher(tmp_path, cgroups="off")
    daemon = ("import os, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        d = os.environ['HIVED_JOB_DIR']\n"
              "        open(d + '/d.tmp', 'w').write(str(os.getpid())); os.rename(d + '/d.tmp', d + '/d.pid')\n"
              "        time.sleep(300)\n"
              "    os._exit(0)\n"
              "os.wait()\n"
              "while not os.path.exists(os.environ['HIVED_JOB_DIR'] + '/d.pid'): time.sleep(0.01)\n"
              "print('ready', flush=True); time.sleep(300)\n")   # ready once the daemon wrote its pid
    la.launch("k", req([PY, "-c", daemon]), placement([0]), 1)
    wait_until(lambda: "\nready\n" in la.logs("k")[0])
    pid = int((tmp_path / "k" / "work" / "d.pid").read_text())
    runner = la._jobs["k"].pods[0].pid
    os.kill(runner, signal.SIGKILL)
    ev = wait_exit(la, "k")
    assert ev.exit_code == -signal.SIGKILL
    wait_until(lambda: dead_or_zombie(pid), timeout=5)
