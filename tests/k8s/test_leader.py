"""One active scheduler: two instances on one Lease; the standby acts only after it leads."""
from __future__ import annotations

import time

import pytest  # noqa: E402

from hived.k8s.watch import wait_for  # noqa: E402
from hived.service.degraded import ServiceDegraded  # noqa: E402 (REST: 503)

JOB = {"vc": "vca", "command": "sleep 1000", "job_class": "be", "pods": 3, "gpus": 2}


def _instance(hv, name, spec):
    lease = {"namespace": hv.ns, "name": "hived-scheduler", "identity": name,
             "lease_duration": 3, "renew_deadline": 2, "retry_period": 1}
    return hv.service(spec, data=hv.tmp / f"data-{name}", leader=lease)


def _leader_and_standby(hv):
    """Instance a leading, b standing by: (a, b, the id of a 3-pod gang a launched)."""
    spec = hv.spec()
    a = _instance(hv, "a", spec).start()
    assert wait_for(lambda: a.leading, 15), a.status()
    b = _instance(hv, "b", spec).start()
    jid = a.submit("alice", JOB)["id"]
    assert wait_for(lambda: len(hv.pods(jid)) == 3, 10)
    return a, b, jid


def test_standby_stays_idle_then_takes_over_and_adopts(hv):
    a, b, jid = _leader_and_standby(hv)
    hv.run_all(jid)
    assert wait_for(lambda: a.get_job(jid)["state"] == "running", 10)
    uids = {p.metadata.name: p.metadata.uid for p in hv.pods()}

    # the standby: no engine state, no pod watch, writes refused with the leader named
    time.sleep(4)                                   # longer than the lease: the leader keeps renewing
    assert not b.leading and b.status()["leader"] == {"leading": False, "identity": "b",
                                                       "lease": f"{hv.ns}/hived-scheduler", "lost": False}
    assert b.recovered.get("standby") and b.list_jobs() == [] and not b.launcher._started
    with pytest.raises(ServiceDegraded, match="standby; the leader is a"):
        b.submit("alice", JOB)
    from hived.jupyter_ext.handlers.base import ApiError, service_errors
    with pytest.raises(ApiError) as e, service_errors():      # what the REST layer answers
        b.cancel(jid, "alice")
    assert e.value.status_code == 503 and "the leader is a" in e.value.message
    assert b.tick() == []

    # the leader stops: the standby leads, rebuilds the gang from its pods and relaunches nothing
    a.close()
    # handed back at once (holder cleared): b need not wait for the lease to lapse
    assert b.elector.holder() in (None, "b")
    assert wait_for(lambda: b.leading, 10), b.status()
    assert wait_for(lambda: b.get_job(jid)["state"] == "running", 10)
    assert jid in b.recovered["adopted"] and jid in " ".join(b.recovered["cluster"]["rebuilt"])
    time.sleep(0.5)
    assert {p.metadata.name: p.metadata.uid for p in hv.pods()} == uids
    # its job ids go on after the cluster's, although its own journal never saw jid
    nxt = b.submit("alice", {**JOB, "pods": 1})["id"]
    assert int(nxt[1:]) > int(jid[1:])


def test_a_leader_that_dies_is_replaced_after_the_lease_expires(hv):
    spec = hv.spec()
    a = _instance(hv, "a", spec).start()
    assert wait_for(lambda: a.leading, 15)
    b = _instance(hv, "b", spec).start()
    time.sleep(1.5)
    assert not b.leading
    # a crash: nothing renews, nothing is handed back
    a.elector.stop(release=False)
    a.stop()
    t0 = time.monotonic()
    assert wait_for(lambda: b.leading, 15), b.status()
    took = time.monotonic() - t0
    assert took >= 1.5, f"took over after {took:.1f}s, before the crashed leader's 3 s lease ran out"


def test_job_ids_never_repeat_after_a_lost_journal(hv):
    """Ended gangs are not rebuilt from their pods, but their ids are taken: a new job must not reuse one."""
    import shutil
    svc = hv.service()
    (jid,) = hv.start_jobs(svc, {**JOB, "pods": 1})
    for p in hv.pods(jid):
        hv.kubelet.exit(p.metadata.namespace, p.metadata.name, 0)
    hv.tick_until(svc, lambda: svc.get_job(jid)["state"] == "succeeded")
    svc.close()
    shutil.rmtree(hv.data)                          # the journal is lost; the finished pod remains
    svc2 = hv.service()
    assert jid in " ".join(svc2.recovered["cluster"]["ignored"])
    nxt = svc2.submit("alice", {**JOB, "pods": 1})["id"]
    assert int(nxt[1:]) > int(jid[1:])


def test_settings_from_the_environment(monkeypatch):
    from hived.k8s import service as S
    monkeypatch.delenv("HIVED_K8S_LEASE", raising=False)
    assert S.leader_from_env() is None
    monkeypatch.setenv("HIVED_K8S_LEASE", "hived-scheduler")
    monkeypatch.setenv("HIVED_K8S_LEASE_NAMESPACE", "hived")
    assert S.leader_from_env() == {"name": "hived-scheduler", "namespace": "hived"}
    monkeypatch.setenv("HIVED_K8S_PENDING_TIMEOUT", "soon")
    with pytest.raises(ValueError, match=r"\$HIVED_K8S_PENDING_TIMEOUT: must be a number of seconds, got 'soon'"):
        S._env_seconds("HIVED_K8S_PENDING_TIMEOUT", 600.0)
    monkeypatch.setenv("HIVED_K8S_PENDING_TIMEOUT", "0")
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        S._env_seconds("HIVED_K8S_PENDING_TIMEOUT", 600.0)


def test_a_leader_that_cannot_renew_stops_scheduling(hv):
    """Renewals failing for the renew deadline (here: the API server is away) mean another instance
    may lead already: this one stops acting at once and says why."""
    a = _instance(hv, "a", hv.spec()).start()
    assert wait_for(lambda: a.leading, 15)
    hv.kube.stop_apiserver()
    try:
        assert wait_for(lambda: not a.leading, 15), a.status()
    finally:
        hv.kube.start_apiserver()
    st = a.status()
    assert st["leader"]["lost"] and "lost the leader Lease" in st["last_error"]
    assert a.tick() == []
    with pytest.raises(ServiceDegraded, match="standby"):
        a.submit("alice", JOB)


def _spy_cluster_reads(svc, seen: list) -> None:
    """Record, for every API read of the pods and of the cluster's records, whether the service
    lock was held by the thread that made it."""
    def spy(obj, name):
        real = getattr(obj, name)

        def call(*a, **kw):
            seen.append((name, svc.lock._is_owned()))
            return real(*a, **kw)
        setattr(obj, name, call)
    for name in ("owned_pods", "cluster_job_ids"):
        spy(svc.launcher, name)
    for name in ("load", "peek"):
        spy(svc.cluster_jobs, name)


def test_a_standby_reads_the_cluster_off_the_service_lock_when_it_takes_the_lead(hv):
    """No Kubernetes API call under the service lock: the LIST of pods, the jobs recorded in the
    cluster and the job-id counter are read before the lock is taken, then applied under it."""
    a, b, jid = _leader_and_standby(hv)
    seen: list = []
    _spy_cluster_reads(b, seen)
    a.close()
    assert wait_for(lambda: b.leading, 10), b.status()
    assert wait_for(lambda: jid in b.recovered.get("adopted", []), 10), b.recovered
    assert {name for name, _ in seen} >= {"owned_pods", "cluster_job_ids", "load", "peek"}
    assert [name for name, locked in seen if locked] == []
    seen.clear()
    b.reload_spec(hv.spec())                   # a reload continues the job ids from the cluster's too
    assert "cluster_job_ids" in {name for name, _ in seen}
    assert [name for name, locked in seen if locked] == []
    b.close()


def test_a_request_during_the_takeover_waits_for_it_instead_of_naming_itself_the_leader(hv):
    """Between taking the Lease and finishing its cluster read a standby is not yet leading: a
    request that comes then waits for the takeover and is served (before, it got a 503 telling it
    to send its request to this same instance)."""
    import threading
    a, b, jid = _leader_and_standby(hv)
    reading, go = threading.Event(), threading.Event()
    real = b._read_cluster

    def slow_read():
        reading.set()
        go.wait(20)
        return real()
    b._read_cluster = slow_read
    a.close()
    assert reading.wait(15), b.status()              # b holds the Lease and reads the cluster
    answer: dict = {}
    t = threading.Thread(target=lambda: answer.update(job=b.cancel(jid, "alice")))
    t.start()
    time.sleep(0.5)
    assert t.is_alive() and not answer               # waiting, not refused
    go.set()
    t.join(30)
    assert answer["job"]["id"] == jid and b.leading
    b.close()
