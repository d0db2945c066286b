"""Events on pods and jobs (binding, preemption, refusals) and a refused launch's message kept as last_error."""
from __future__ import annotations

from hived.k8s import pod_builder as pb  # noqa: E402
from hived.k8s.events import JOB_KIND  # noqa: E402

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 2, "gpus": 2, "grace_period": 3}


def _events(core, ns, name):
    items = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.involved_object.kind, e.type, e.reason, e.message) for e in items]


def test_binding_and_preemption_events(hv):
    svc = hv.service()
    (jid,) = hv.start_jobs(svc, JOB)
    placement = svc.get_job(jid)["placement"]
    svc.cancel(jid, "alice")
    hv.tick_until(svc, lambda: svc.get_job(jid)["state"] == "preempting")
    assert svc.launcher.flush() and svc.launcher.events.flush()
    p0 = pb.pod_name(jid, 1, 0)
    got = _events(hv.core, hv.vca, p0)
    q0 = placement["pods"][0]
    assert ("Pod", "Normal", "Scheduled", f"hived bound rank 0 of job {jid} to {q0['node']} GPUs {q0['gpus']}") in got
    assert ("Pod", "Normal", "Preempting", f"hived deletes the gang of job {jid} (grace period 3s)") in got
    job = _events(hv.core, hv.vca, jid)
    assert {(k, r) for k, _, r, _ in job} >= {(JOB_KIND, "Scheduled"), (JOB_KIND, "Preempting")}


def test_a_refused_launch_keeps_the_api_message_in_last_error_and_an_event(hv):
    svc = hv.service()
    local = svc.job_ids.next()                      # the id the next job gets: the cluster's counter decides
    svc.job_ids.give_back(local)
    jid = f"j{max(int(local[1:]), svc.cluster_jobs.peek())}"
    taken = pb.pod_name(jid, 1, 0)
    hv.core.create_namespaced_pod(hv.vca, {"metadata": {"name": taken},
                                          "spec": {"containers": [{"name": "c", "image": "x"}]}})
    got = svc.submit("alice", {**JOB, "pods": 1})["id"]
    assert got == jid
    hv.tick_until(svc, lambda: svc.get_job(jid)["state"] in ("queued", "failed") and svc.get_job(jid)["failure_class"])
    job = svc.get_job(jid)
    assert job["failure_class"] == "infrastructure" and job["attempts"] == 0      # refused: nothing ran
    assert f'pods "{taken}" already exists' in job["last_error"], job
    assert svc.launcher.events.flush()
    (ev,) = [e for e in _events(hv.core, hv.vca, jid) if e[2] == "LaunchRefused"]
    assert ev[1] == "Warning" and "already exists" in ev[3]


def test_finished_pods_are_collected_after_their_ttl(hv):
    # a TTL that a loaded machine cannot outrun between the job's end and the check below
    svc = hv.service(launcher_kw={"finished_pod_ttl": 5.0, "gc_every": 0.2})
    a, b = hv.start_jobs(svc, {**JOB, "pods": 1}, {**JOB, "pods": 1, "vc": "vcb"})
    for p in hv.pods(a):
        hv.kubelet.exit(p.metadata.namespace, p.metadata.name, 0)
    hv.tick_until(svc, lambda: svc.get_job(a)["state"] == "succeeded")
    assert len(hv.pods(a)) == 1                      # kept for a while (logs)
    hv.tick_until(svc, lambda: hv.pods(a) == [], timeout=30)
    svc.launcher.gc.join()      # the pod is gone once the API server answered; the count follows on gc's thread
    assert svc.launcher.gc.collected == 1
    assert len(hv.pods(b)) == 1 and svc.get_job(b)["state"] == "running"   # a running gang is never touched
