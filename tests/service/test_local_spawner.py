"""The local launcher's pod runners come from one fork server, and survive losing it."""
import os
import signal
import sys
import time

import pytest
from service_helpers import wait_until

from hived.core.jobs import JobRequest, Placement, PodPlacement
from hived.service import local_cgroups
from hived.service.local_launcher import LocalLauncher

PY = sys.executable


def placement(*gpu_lists):
    return Placement("A", tuple(PodPlacement(r, "n0", tuple(g)) for r, g in enumerate(gpu_lists)))


def req(cmd):
    return JobRequest(user="alice", vc="vc1", command=cmd)


def wait_exit(launcher, job_id, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        for ev in launcher.poll():
            if ev.job_id == job_id and ev.kind == "exited":
                return ev
        time.sleep(0.02)
    raise AssertionError(f"{job_id} did not exit within {timeout}s")


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_runners_are_forks_of_one_ready_server_and_report_their_exit(tmp_path):
    la = LocalLauncher(tmp_path, cgroups="off")
    try:
        la.warm()
        server = la._spawner.proc.pid
        la.launch("a", req([PY, "-c", "import time; time.sleep(30)"]), placement([0]), 1)
        la.launch("b", req(["sh", "-c", "exit 3"]), placement([1]), 1)
        runner = la._jobs["a"].pods[0].pid
        assert parent_of(runner) == server and la._spawner.proc.pid == server
        assert os.getpgid(runner) == runner   # its own group: the launcher signals it
        assert wait_exit(la, "b").exit_code == 3
        os.kill(runner, signal.SIGKILL)   # no exit file: the status comes from the server
        assert wait_exit(la, "a").exit_code == -signal.SIGKILL
    finally:
        la.close()


def test_a_dead_fork_server_is_replaced_at_the_next_launch(tmp_path):
    la = LocalLauncher(tmp_path, cgroups="off")
    try:
        la.warm()
        first = la._spawner.proc
        first.kill()
        first.wait()
        la.launch("c", req(["sh", "-c", "echo hello; exit 4"]), placement([0]), 1)
        assert la._spawner is not None and la._spawner.proc.pid != first.pid
        ev = wait_exit(la, "c")
        assert ev.exit_code == 4 and "hello" in ev.log_tail
    finally:
        la.close()


def test_closing_the_launcher_leaves_running_pods_alone(tmp_path):
    la = LocalLauncher(tmp_path, cgroups="off")
    la.launch("d", req([PY, "-c", "import time; print('up', flush=True); time.sleep(30)"]), placement([0]), 1)
    wait_until(lambda: "up" in la.logs("d")[0])
    runner = la._jobs["d"].pods[0].pid
    server = la._spawner.proc
    la.close()
    assert server.poll() is not None            # the fork server ended with its input
    assert os.path.exists(f"/proc/{runner}")    # the pod did not
    again = LocalLauncher(tmp_path, cgroups="off")
    try:
        assert again.adopt("d", placement([0]))
        again.terminate("d", 0)
        assert wait_exit(again, "d").exit_code == -signal.SIGKILL
    finally:
        again.close()


def cgroup_of(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        return next(line[3:].strip() for line in f if line.startswith("0::"))


def test_the_command_is_born_in_the_pods_cgroup_and_the_runner_leaves_it(tmp_path):
    la = LocalLauncher(tmp_path, cgroups="auto")
    if la.cgroup_base is None:
        pytest.skip("no writable cgroup v2 on this host: pods are swept by process tree")
    try:
        la.warm()
        la.launch("e", req([PY, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(30)"]),
                  placement([0]), 1)
        wait_until(lambda: la.logs("e")[0].count("\n") >= 3)
        pod = la._jobs["e"].pods[0]
        command = int(la.logs("e")[0].splitlines()[2])
        assert pod.cgroup is not None and os.path.isdir(pod.cgroup)
        assert pod.cgroup.endswith(cgroup_of(command))          # born in the pod's cgroup
        wait_until(lambda: not pod.cgroup.endswith(cgroup_of(pod.pid)))   # the runner left it
        with open(os.path.join(pod.cgroup, "cgroup.procs")) as f:
            assert [int(p) for p in f.read().split()] == [command]
        la.terminate("e", 0)
        assert wait_exit(la, "e").exit_code == -signal.SIGKILL
        assert not os.path.exists(pod.cgroup)
    finally:
        la.close()


def test_the_end_of_the_last_job_does_not_block_poll(tmp_path, monkeypatch):
    """The spare runner's cgroup keeps the cgroup folder: poll must not wait for it to empty."""
    la = LocalLauncher(tmp_path, cgroups="auto")
    if la.cgroup_base is None:
        pytest.skip("no writable cgroup v2 on this host: pods are swept by process tree")
    waits = []   # (cgroup, seconds remove() may wait for it to empty)
    real_remove = local_cgroups.remove
    monkeypatch.setattr(local_cgroups, "remove",
                        lambda path, wait=1.0: (waits.append((path, wait)), real_remove(path, wait))[1])
    try:
        la.warm()
        la.launch("f", req(["true"]), placement([0]), 1)
        deadline = time.monotonic() + 15
        while not any(e.kind == "exited" for e in la.poll()):
            assert time.monotonic() < deadline, "f did not exit"
            time.sleep(0.01)
        # the folder of all pods is tried once, never waited on: the spare runner still lives in it
        assert [w for p, w in waits if p == str(la.cgroup_base)] in ([], [0])
    finally:
        la.close()
