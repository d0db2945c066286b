"""The cluster is the source of truth for accepted jobs (round 2, finding 6): a job answered 201 is in
the API server, so the standby that takes over from a killed leader schedules it under the same id,
and job ids come from one counter that no two instances share a number of (k8s/durable.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402

from k8s_helpers import vc_prefix  # noqa: E402

from hived.k8s.durable import COUNTER, ClusterJobs  # noqa: E402
from hived.k8s.trust import PodSigner  # noqa: E402
from hived.k8s.watch import wait_for  # noqa: E402

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2}


def lease(hv, name):
    return {"namespace": hv.ns, "name": "hived-scheduler", "identity": name,
            "lease_duration": 3, "renew_deadline": 2, "retry_period": 1}


def test_kill_9_of_the_leader_right_after_the_201_loses_no_job(hv, tmp_path):
    spec = hv.spec()
    leading, go, answered = tmp_path / "leading", tmp_path / "go", tmp_path / "answered"
    # The leader accepts and answers, then dies at once: its scheduler is held (it would launch within
    # milliseconds), so that no pod of the job can exist when it dies.
    script = f"""
import json, os, signal, time
from hived.k8s.launcher import KubernetesLauncher
from hived.k8s.service import KubernetesSchedulerService
lau = KubernetesLauncher({hv.kube.kubeconfig!r}, template={{"image": "img"}}, namespace_prefix={vc_prefix(hv.ns)!r},
                         instance={hv.uid!r}, watch_timeout=1, pipeline=True)
svc = KubernetesSchedulerService({spec!r}, {str(tmp_path / "leader-data")!r}, launcher=lau, tick_seconds=0.05,
                                 leader=json.loads({json.dumps(lease(hv, "a"))!r}))
svc.execute = lambda decisions, now: None
svc.start()
while not svc.leading:
    time.sleep(0.05)
open({str(leading)!r}, "w").write("a")
while not os.path.exists({str(go)!r}):
    time.sleep(0.02)
job = svc.submit("alice", json.loads({json.dumps(JOB)!r}))
open({str(answered)!r}, "w").write(job["id"])
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: leading.exists() or proc.poll() is not None, 60, step=0.1), "leader never led"
        assert leading.exists(), proc.stderr.read().decode()[-3000:]
        b = hv.service(spec, data=tmp_path / "standby-data", leader=lease(hv, "b")).start()
        go.write_text("go")
        assert proc.wait(timeout=60) == -9, proc.stderr.read().decode()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    jid = answered.read_text()
    assert hv.pods(jid) == []                         # it died before any pod existed
    assert wait_for(lambda: b.leading and "cluster" in b.recovered, 20), b.status()
    assert jid in b.recovered["cluster"]["accepted"]
    hv.tick_until(b, lambda: len(hv.pods(jid)) == 2, timeout=20)
    hv.run_all(jid)
    hv.tick_until(b, lambda: b.get_job(jid)["state"] == "running")
    job = b.get_job(jid)
    assert job["user"] == "alice" and job["vc"] == "vca" and job["pods"] == 2 and job["attempts"] == 1
    nxt = b.submit("alice", {**JOB, "pods": 1})["id"]
    assert int(nxt[1:]) > int(jid[1:])                 # never the dead leader's id again


def test_job_ids_are_unique_across_instances(hv, core):
    """Two instances reserving ids at the same moment never get the same one (optimistic concurrency
    on the counter object: a stale update is refused and read again)."""
    own = f"{hv.ns}-own"
    core.create_namespace({"metadata": {"name": own}})
    signer = PodSigner(core, own, lambda vc: vc)
    counters = [ClusterJobs(core, own, hv.uid, signer) for _ in range(4)]
    got: list[int] = []
    lock = threading.Lock()

    def take(c):
        for _ in range(10):
            n = c.reserve(1)
            with lock:
                got.append(n)
    threads = [threading.Thread(target=take, args=(c,)) for c in counters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1, 41))
    assert core.read_namespaced_config_map(COUNTER, own).data == {"next": "41"}


def test_an_ended_job_leaves_no_record_and_a_forged_record_is_no_job(hv, core):
    svc = hv.service()
    (a,) = hv.start_jobs(svc, {**JOB, "pods": 1})
    own = svc.launcher.own_namespace
    assert a in svc.cluster_jobs.load()
    svc.cancel(a, "alice")
    for p in hv.pods(a):
        hv.kubelet.confirm_deletion(p.metadata.namespace, p.metadata.name)
    hv.tick_until(svc, lambda: svc.get_job(a)["state"] == "cancelled")
    assert wait_for(lambda: a not in svc.cluster_jobs.load(), 10)
    # a record someone else wrote, with hived's labels: not hived's signature, so no job
    core.create_namespaced_config_map(own, {"metadata": {"name": "hived-job-j900", "labels": {
        "app.kubernetes.io/managed-by": "hived", "hived.io/instance": hv.uid, "hived.io/kind": "accepted-job"}},
        "data": {"job-id": "j900", "submitted": "1.0", "signature": "0" * 64,
                 "request": json.dumps({"user": "bob", "vc": "vcb", "groups": [{"pods": 1, "gpus": 8}]})}})
    assert "j900" not in svc.cluster_jobs.load()
    svc.close()
    svc2 = hv.service()
    assert svc2.recovered["cluster"]["accepted"] == [] and "j900" not in [j["id"] for j in svc2.list_jobs()]
