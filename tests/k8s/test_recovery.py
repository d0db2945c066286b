"""Kill the service, restart it: the cluster's pods rebuild its state (k8s/recovery.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))   # k8s_helpers (pytest runs with --import-mode=importlib)

import json  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402

from k8s_helpers import vc_prefix  # noqa: E402

from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.launcher import KubernetesLauncher  # noqa: E402
from hived.k8s.service import KubernetesSchedulerService  # noqa: E402
from hived.k8s.watch import wait_for  # noqa: E402

HERE = Path(__file__).parent
JOB_4x2 = {"vc": "vca", "command": ["python", "train.py"], "job_class": "be", "pods": 4, "gpus": 2,
           "grace_period": 20}
JOB_B = {"vc": "vcb", "command": "sleep 1000", "job_class": "be", "pods": 1, "gpus": 2}


def grants(svc):
    return {o: (g.vc, g.chain, g.opportunistic, list(g.cells)) for o, g in svc.eng.alloc.grants().items()}


def test_restart_rebuilds_bindings_exactly_and_schedules_nothing_twice(hv):
    svc = hv.service()
    a, b = hv.start_jobs(svc, JOB_4x2, JOB_B)
    # each VC's job in its VC's namespace, a's 4-pod gang with its headless Service beside it
    assert {p.metadata.namespace for p in hv.pods(a)} == {hv.vc_namespaces["vca"]}
    assert {p.metadata.namespace for p in hv.pods(b)} == {hv.vc_namespaces["vcb"]}
    assert hv.core.list_namespaced_pod(hv.ns).items == []
    assert [s.metadata.name for s in hv.core.list_namespaced_service(hv.vca).items] == [pb.service_name(a)]
    before, pods_before = grants(svc), {p.metadata.name: p.metadata.uid for p in hv.pods()}
    placements = {j: svc.get_job(j)["placement"] for j in (a, b)}
    svc.close()                                    # the service goes away; its pods keep running

    svc2 = hv.service()
    rec = svc2.recovered
    assert sorted(rec["adopted"]) == sorted([a, b]) and rec["lost"] == [] and rec["unrestorable"] == []
    assert sorted(rec["cluster"]["agreed"]) == sorted([a, b]) and rec["cluster"]["corrected"] == []
    assert grants(svc2) == before
    svc2.eng.alloc.check_invariants()
    for _ in range(5):
        assert svc2.tick() == []                   # no START, no PREEMPT
    assert {p.metadata.name: p.metadata.uid for p in hv.pods()} == pods_before
    for j in (a, b):
        job = svc2.get_job(j)
        assert job["state"] == "running" and job["attempts"] == 1 and job["placement"] == placements[j]
    # the adopted gang still reports its end
    for p in hv.pods(a):
        hv.kubelet.exit(p.metadata.namespace, p.metadata.name, 0)
    hv.tick_until(svc2, lambda: svc2.get_job(a)["state"] == "succeeded")
    assert a not in svc2.eng.alloc.grants()
    assert wait_for(lambda: not hv.core.list_namespaced_service(hv.vca).items, 10), \
        "the adopted gang's Service outlived it"


def test_journal_disagreeing_with_the_cluster_loses_and_is_logged(hv, caplog):
    svc = hv.service()
    a, b = hv.start_jobs(svc, JOB_4x2, JOB_B)
    cluster_a = svc.get_job(a)["placement"]
    svc.close()
    # The journal goes wrong while hived is down: job a's placement is rewritten to other GPUs and
    # job b's record is lost.
    db = sqlite3.connect(hv.data / "hived.db")
    (rec_a,) = db.execute("SELECT record FROM jobs WHERE job_id=?", (a,)).fetchone()
    rec_a = json.loads(rec_a)
    wrong = json.loads(json.dumps(rec_a["placement"]))
    other = f"{hv.uid}-n1" if wrong["pods"][0]["node"] == f"{hv.uid}-n0" else f"{hv.uid}-n0"
    for q in wrong["pods"]:
        q["node"] = other
        q["cells"] = [c.replace(cluster_a["pods"][0]["node"], other) for c in q["cells"]]
    rec_a["placement"] = wrong
    db.execute("UPDATE jobs SET record=? WHERE job_id=?", (json.dumps(rec_a), a))
    db.execute("DELETE FROM jobs WHERE job_id=?", (b,))
    db.commit()
    db.close()

    with caplog.at_level(logging.WARNING, logger="hived.k8s.recovery"):
        svc2 = hv.service()
    cl = svc2.recovered["cluster"]
    assert [c.split(":")[0] for c in cl["corrected"]] == [a] and "placement differs" in cl["corrected"][0]
    assert [c.split(":")[0] for c in cl["rebuilt"]] == [b]
    assert sorted(svc2.recovered["adopted"]) == sorted([a, b])
    assert svc2.get_job(a)["placement"] == cluster_a                      # the cluster won
    assert svc2.get_job(b)["state"] == "running" and svc2.get_job(b)["vc"] == "vcb"
    held = {o: g.placement for o, g in svc2.eng.alloc.grants().items()}
    assert {p.node for p in held[a].pods} == {q["node"] for q in cluster_a["pods"]}
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"job {a}: placement differs" in logged and f"job {b}: not in the journal" in logged
    # the journal now says what the cluster says
    stored = {d["job_id"]: d for d in svc2.store.load_jobs()}
    assert [(q["node"], q["gpus"]) for q in stored[a]["placement"]["pods"]] == \
        [(q["node"], q["gpus"]) for q in cluster_a["pods"]] and stored[b]["state"] == "running"
    assert any("recovered from the cluster" in h[2] for h in stored[a]["history"])
    for _ in range(3):
        assert svc2.tick() == []


def test_reconfigured_spec_downgrades_gangs_that_no_longer_fit(hv):
    svc = hv.service()
    a, b = hv.start_jobs(svc, JOB_4x2, JOB_B)
    assert not svc.eng.job(a).opportunistic
    svc.close()
    # vca shrinks from a node to one socket (4 GPUs): the 8-GPU gang no longer fits it; vcb is gone.
    smaller = hv.spec("spec2.yaml", vcs=(("vca", "T-SOCKET", 1),), users={"vca": ["alice"]})
    svc2 = hv.service(smaller)
    cl = svc2.recovered["cluster"]
    assert cl["downgraded"] == [a]
    assert [e.split(":")[0] for e in cl["ended"]] == [b] and "does not fit" in cl["ended"][0]
    job = svc2.eng.job(a)
    assert job.state.value == "running" and job.opportunistic and svc2.eng.alloc.grant_of(a).opportunistic
    assert "downgraded to opportunistic" in job.history[-1][2]
    pods = hv.pods(a)
    assert len(pods) == 4 and all(p.metadata.labels[pb.L_PRIORITY] == "opportunistic" for p in pods)
    assert all(json.loads(p.metadata.annotations[pb.A_BINDING])["opportunistic"] for p in pods)
    assert all(p.metadata.deletion_timestamp is None for p in pods)
    # b could not be held at all: failed, with its reason, and its pod is being deleted
    assert svc2.get_job(b)["state"] == "failed"
    assert all(p.metadata.deletion_timestamp is not None for p in hv.pods(b))
    assert svc2.tick() == []      # nothing relaunched
    # a is opportunistic now: vca's quota is free for its own guaranteed work
    assert svc2.vc("vca")["gpus_used"] == 0 if "gpus_used" in svc2.vc("vca") else True
    assert svc2.eng.alloc.vc_view("vca").gpus_used == 0


def test_gang_missing_members_is_completed_when_none_started(hv):
    svc = hv.service()
    a = svc.submit("alice", JOB_4x2)["id"]
    hv.tick_until(svc, lambda: len(hv.pods(a)) == 4)    # launched, nothing runs yet
    svc.close()
    names = [p.metadata.name for p in hv.pods(a)]
    for n in names[1:3]:                                 # as if the launch was cut short
        hv.core.delete_namespaced_pod(n, hv.vca, grace_period_seconds=0)
    svc2 = hv.service()
    cl = svc2.recovered["cluster"]
    assert cl["completed"] == [f"{a}: members [1, 2] were missing and none had started; created them"]
    assert [p.metadata.name for p in hv.pods(a)] == names
    assert svc2.recovered["adopted"] == [a]
    for _ in range(3):
        assert svc2.tick() == []
    hv.run_all(a)
    hv.tick_until(svc2, lambda: svc2.get_job(a)["state"] == "running")
    assert svc2.get_job(a)["attempts"] == 1


def test_gang_missing_a_member_that_ran_is_torn_down(hv):
    svc = hv.service()
    (a,) = hv.start_jobs(svc, JOB_4x2)
    svc.close()
    names = [p.metadata.name for p in hv.pods(a)]
    hv.kubelet.confirm_deletion(hv.vca, names[2])         # a member vanished while hived was down
    svc2 = hv.service()
    assert svc2.recovered["adopted"] == [a]

    def old():
        return [p for p in hv.pods(a) if p.metadata.annotations[pb.A_ATTEMPT] == "1"]
    # the survivors are deleted with the job's grace period; its cells stay held while they stop
    hv.tick_until(svc2, lambda: len(old()) == 3 and all(p.metadata.deletion_timestamp is not None for p in old()))
    assert {p.metadata.deletion_grace_period_seconds for p in old()} == {20}
    assert svc2.eng.job(a).state.value == "running"
    for p in old():
        hv.kubelet.confirm_deletion(p.metadata.namespace, p.metadata.name)
    hv.tick_until(svc2, lambda: svc2.eng.job(a).state.value != "running")
    # exit 143 (the member is gone as if killed): the failure rules requeue it as a whole
    states = [h["state"] for h in svc2.get_job(a)["history"]]
    assert states[:3] == ["queued", "placed", "running"] and states[3] == "queued"
    # the retry is a whole new gang (attempt 2), never the 3 survivors plus one
    hv.tick_until(svc2, lambda: len([p for p in hv.pods(a) if p.metadata.annotations[pb.A_ATTEMPT] == "2"]) == 4)


def test_pods_of_a_job_the_journal_ended_are_deleted(hv):
    svc = hv.service()
    (a,) = hv.start_jobs(svc, JOB_4x2)
    svc.close()
    db = sqlite3.connect(hv.data / "hived.db")
    (rec,) = db.execute("SELECT record FROM jobs WHERE job_id=?", (a,)).fetchone()
    rec = json.loads(rec)
    rec.update(state="cancelled", placement=None)
    db.execute("UPDATE jobs SET record=?, state='cancelled' WHERE job_id=?", (json.dumps(rec), a))
    db.commit()
    db.close()
    svc2 = hv.service()
    assert [x.split(":")[0] for x in svc2.recovered["cluster"]["finished_teardown"]] == [a]
    assert svc2.get_job(a)["state"] == "cancelled" and a not in svc2.eng.alloc.grants()
    assert all(p.metadata.deletion_timestamp is not None for p in hv.pods(a))


def test_sigkill_of_the_service_process_then_restart(hv, tmp_path):
    """A real crash: the service runs in its own process and is killed with SIGKILL."""
    spec = hv.spec()
    marker = tmp_path / "launched"
    script = f"""
import json, sys, time
from hived.k8s.launcher import KubernetesLauncher
from hived.k8s.service import KubernetesSchedulerService
lau = KubernetesLauncher({hv.kube.kubeconfig!r}, template={{"image": "img"}}, namespace_prefix={vc_prefix(hv.ns)!r},
                         instance={hv.uid!r}, watch_timeout=1)
svc = KubernetesSchedulerService({spec!r}, {str(hv.data)!r}, launcher=lau, tick_seconds=0.05)
jid = svc.submit("alice", json.loads({json.dumps(JOB_4x2)!r}))["id"]
while len(lau.owned_pods()) < 4:
    svc.tick(); time.sleep(0.05)
open({str(marker)!r}, "w").write(jid)
time.sleep(600)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            stderr=subprocess.PIPE)
    try:
        assert wait_for(lambda: marker.exists() or proc.poll() is not None, 60, step=0.1)
        assert marker.exists(), proc.stderr.read().decode()[-2000:]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    a = marker.read_text()
    hv.run_all(a)
    svc2 = hv.service()
    assert svc2.recovered["adopted"] == [a] and svc2.recovered["cluster"]["agreed"] == [a]
    hv.tick_until(svc2, lambda: svc2.get_job(a)["state"] == "running")
    assert len(hv.pods()) == 4 and svc2.get_job(a)["attempts"] == 1


def test_refused_launch_fails_the_job_and_frees_its_cells(hv):
    lau = KubernetesLauncher(hv.kube.kubeconfig, template={"image": "img"}, namespace_prefix=f"{hv.uid}-missing-",
                             instance=hv.uid, watch_timeout=1)
    svc = KubernetesSchedulerService(hv.spec(), hv.data, launcher=lau, tick_seconds=0.05)
    hv.made.append(svc)
    a = svc.submit("alice", JOB_4x2)["id"]
    hv.tick_until(svc, lambda: svc.get_job(a)["state"] != "queued" and svc.get_job(a)["state"] != "placed")
    job = svc.eng.job(a)
    assert (job.state.value, job.exit_code) == ("failed", 127)     # the service's rule for launch errors
    assert a not in svc.eng.alloc.grants() and hv.pods() == []


def test_live_spec_reload_downgrades_instead_of_refusing(hv):
    svc = hv.service()
    a, b = hv.start_jobs(svc, JOB_4x2, JOB_B)
    out = svc.reload_spec(hv.spec("spec2.yaml", vcs=(("vca", "T-SOCKET", 1), ("vcb", "T-NODE", 1))))
    assert out["ok"] and out["downgraded"] == [a]
    job = svc.eng.job(a)
    assert job.state.value == "running" and job.opportunistic and "reloaded spec" in job.history[-1][2]
    assert not svc.eng.job(b).opportunistic
    assert all(p.metadata.labels[pb.L_PRIORITY] == "opportunistic" for p in hv.pods(a))
    stored = {d["job_id"]: d for d in svc.store.load_jobs()}
    assert stored[a]["placement"]["opportunistic"] is True
    svc.eng.alloc.check_invariants()
    assert svc.tick() == []
    # a restart after the reload agrees with the cluster: nothing to correct
    svc.close()
    svc2 = hv.service(str(hv.tmp / "spec2.yaml"))
    assert sorted(svc2.recovered["cluster"]["agreed"]) == sorted([a, b])
    assert svc2.recovered["cluster"]["downgraded"] == []
    assert svc2.eng.job(a).opportunistic


def test_journal_only_job_on_cells_the_pods_hold_ends_as_lost(hv):
    svc = hv.service()
    a, b = hv.start_jobs(svc, JOB_4x2, JOB_B)
    cells_a = svc.get_job(a)["placement"]
    svc.close()
    for p in hv.pods(b):                                     # b's pod is gone ...
        hv.kubelet.confirm_deletion(p.metadata.namespace, p.metadata.name)
    db = sqlite3.connect(hv.data / "hived.db")               # ... and the journal puts b on a's GPUs
    (rec,) = db.execute("SELECT record FROM jobs WHERE job_id=?", (b,)).fetchone()
    rec = json.loads(rec)
    q = rec["placement"]["pods"][0]
    q["node"], q["gpus"] = cells_a["pods"][0]["node"], cells_a["pods"][0]["gpus"]
    q["cells"] = [f"{q['node']}/0.0"]
    db.execute("UPDATE jobs SET record=? WHERE job_id=?", (json.dumps(rec), b))
    db.commit()
    db.close()
    svc2 = hv.service()
    cl = svc2.recovered["cluster"]
    assert cl["agreed"] == [a] and [x.split(":")[0] for x in cl["ended"]] == [b] and cl["lost"] == [f"{b}: " + (
        "the journal says running, the cluster has no pod of it (lost)")]
    assert "pods of other jobs hold" in cl["ended"][0]
    assert svc2.get_job(a)["state"] == "running" and svc2.eng.job(b).state.value == "failed"
    svc2.eng.alloc.check_invariants()


def test_quota_scheme_recovery_holds_the_gpus_of_a_gang_it_ended(hv):
    # the GPU-quota baseline has no cell tree: recovery must still hold the ended gang's GPUs
    svc = hv.service(scheme="quota")
    (b,) = hv.start_jobs(svc, JOB_B, users=("bob",))
    gpus = [(q["node"], g) for q in svc.get_job(b)["placement"]["pods"] for g in q["gpus"]]
    svc.close()
    without_vcb = hv.spec("spec2.yaml", vcs=(("vca", "T-NODE", 1),), users={"vca": ["alice"]})
    svc2 = hv.service(without_vcb, scheme="quota")
    assert [e.split(":")[0] for e in svc2.recovered["cluster"]["ended"]] == [b]
    assert svc2.get_job(b)["state"] == "failed"
    assert all(p.metadata.deletion_timestamp is not None for p in hv.pods(b))
    chain = next(iter(svc2.cluster()["chains"].values()))
    for node, g in gpus:
        gpu = chain["nodes"][node]["gpus"][g]
        assert not gpu["healthy"] and f"pods of ended job {b} still stopping" in gpu["problem"]
