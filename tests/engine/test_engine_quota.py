"""Engine behaviour, driven through the GPU-quota baseline allocator."""
import json

import pytest
from engine_helpers import eight_gpu_spec, fig2_spec, kinds, quota_engine, req, run

from hived.core.engine import EngineConfig, JobRecord, RequestError
from hived.core.jobs import JobClass, JobState, PodGroup


def test_figure2_anomaly_under_quota():
    """HiveD (earlier version) Figure 2: B has 4 unused quota GPUs yet its 4-GPU job cannot start."""
    eng = quota_engine(fig2_spec())
    a = [eng.submit(req("A", 1), 1.0) for _ in range(4)]
    ds = run(eng, 1.0)
    assert [d.placement.pods[0].node for d in ds] == ["node1"] * 4   # YARN-CS packs them
    eng.on_finished(a[1], 2.0, 0)
    eng.on_finished(a[3], 2.0, 0)
    a5 = eng.submit(req("A", 2), 2.0)
    ds = run(eng, 2.0)
    # GPUs 1 and 3 of node1 sit on different PCIe switches: a5 goes to node2 for affinity
    assert kinds(ds) == [("start", a5)] and ds[0].placement.pods[0].node == "node2"
    b1 = eng.submit(req("B", 4, user="bob"), 3.0)
    assert run(eng, 3.0) == []
    rec = eng.job(b1)
    assert rec.state is JobState.QUEUED
    assert eng.alloc.vc_view("B")["NODE"]["used"] == 0      # quota unused: the anomaly
    eng.alloc.check_invariants()


def test_fifo_head_of_line_and_te_first():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}), config=EngineConfig(backfill=False))
    big = eng.submit(req("A", 8), 0.0)
    run(eng, 0.0)
    blocked = eng.submit(req("A", 8, cls=JobClass.BE), 1.0)
    small = eng.submit(req("A", 1, cls=JobClass.BE), 1.0)
    te = eng.submit(req("A", 1), 1.0)
    assert eng.queue("A") == [te, blocked, small]              # TE lane first, then FIFO
    assert run(eng, 1.0) == []                                 # head does not fit: nothing starts
    assert eng.stats["attempts"] == 2                          # te and blocked tried, small never
    before = eng.stats["attempts"]
    assert run(eng, 2.0) == [] and eng.stats["attempts"] == before   # nothing changed: no retry
    eng.on_finished(big, 3.0, 0)
    ds = run(eng, 3.0)
    assert [d.job_id for d in ds] == [te]                      # te takes a GPU; blocked 8-GPU job still waits


def test_opportunistic_preempted_with_grace_then_requeued_at_head():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}))
    # A borrows B's idle node as low priority (over its quota)
    a1 = eng.submit(req("A", 8), 0.0)
    a2 = eng.submit(req("A", 8, allow_opportunistic=True, grace_period=30.0), 0.0)
    ds = run(eng, 0.0)
    assert kinds(ds) == [("start", a1), ("start", a2)] and ds[1].placement.opportunistic
    a3 = eng.submit(req("A", 1), 1.0)          # queued behind, in A's lane
    b1 = eng.submit(req("B", 8, user="bob"), 5.0)
    ds = run(eng, 5.0)
    assert kinds(ds) == [("preempt", a2)] and ds[0].grace_period == 30.0
    assert eng.job(b1).state is JobState.PLACED and eng.job(b1).waiting_for == [a2]
    assert run(eng, 20.0) == []                  # inside the grace period
    ds = run(eng, 35.0)
    assert kinds(ds) == [("kill", a2)]
    assert run(eng, 36.0) == []                  # KILL only once
    eng.on_preempted(a2, 36.0)
    ds = run(eng, 36.0)
    assert kinds(ds) == [("start", b1)]
    rec = eng.job(a2)
    assert rec.state is JobState.QUEUED and rec.preemptions == 1 and rec.gpus_preempted == 8
    assert eng.queue("A")[0] == a2 and eng.queue("A")[1] == a3    # back at the head
    assert [h[1] for h in rec.history] == ["queued", "placed", "running", "preempting", "queued"]
    eng.alloc.check_invariants()


def test_over_quota_job_refused_unless_opportunistic_allowed():
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}))
    with pytest.raises(RequestError) as e:
        eng.submit(req("A", 8, pods=2), 0.0)
    assert e.value.field == "groups" and "quota of 8" in str(e.value) and str(e.value).startswith("groups: ")
    assert eng.jobs() == []                                          # nothing changed
    jid = eng.submit(req("A", 8, pods=2, allow_opportunistic=True), 0.0)
    ds = run(eng, 0.0)
    assert kinds(ds) == [("start", jid)] and ds[0].placement.opportunistic
    with pytest.raises(RequestError, match="the cluster has 16"):
        eng.submit(req("A", 8, pods=3, allow_opportunistic=True), 0.0)


@pytest.mark.parametrize("mutate,field,words", [
    (dict(vc="Z"), "vc", "unknown VC 'Z'"),
    (dict(user=""), "user", "non-empty"),
    (dict(grace_period=-1.0), "grace_period", ">= 0"),
    (dict(duration=float("nan")), "duration", "finite"),
    (dict(chain="NOPE"), "chain", "unknown chain"),
    (dict(groups=[]), "groups", "non-empty"),
    (dict(groups=[PodGroup(0, 1)]), "groups[0].pods", ">= 1"),
    (dict(groups=[PodGroup(1, 0)]), "groups[0].gpus", ">= 1"),
    (dict(groups=[PodGroup(1, 5)]), "groups[0].gpus", "a node has at most 4"),
    (dict(groups=[PodGroup(1, 1, cpus=100.0)]), "groups[0].cpus", "a node has 16"),
    (dict(groups=[PodGroup(1, 1, memory_gb=-1.0)]), "groups[0].memory_gb", ">= 0"),
    (dict(groups=[PodGroup(1, 1, cell_type="RACK")]), "groups[0].cell_type", "RACK"),
    (dict(max_retries=-2), "max_retries", ">= 0"),
])
def test_validation_names_field_and_changes_nothing(mutate, field, words):
    eng = quota_engine(fig2_spec())
    r = req("A", 1, user="alice")
    for k, v in mutate.items():
        setattr(r, k, v)
    with pytest.raises(RequestError) as e:
        eng.validate(r)
    assert e.value.field == field and words in e.value.problem, str(e.value)
    with pytest.raises(RequestError):
        eng.submit(r, 0.0)
    assert eng.jobs() == [] and eng.queue("A") == []


def test_cell_type_request_resolves_gpus():
    eng = quota_engine(fig2_spec())
    jid = eng.submit(req("A", 1, groups=[PodGroup(1, cell_type="NODE.PCIE")]), 0.0)
    assert eng.job(jid).pod_gpus == [2]
    ds = run(eng, 0.0)
    assert len(ds[0].placement.pods[0].gpus) == 2


def test_retry_by_failure_class_with_back_off():
    eng = quota_engine(fig2_spec(), config=EngineConfig(retry_cap=2))
    jid = eng.submit(req("A", 1), 0.0)
    run(eng, 0.0)
    eng.on_finished(jid, 10.0, 1, "NCCL error: unhandled system error")
    rec = eng.job(jid)
    assert rec.state is JobState.QUEUED and rec.failure_class == "infrastructure" and rec.not_before == 130.0
    assert run(eng, 100.0) == []                                       # back-off
    assert eng.next_wakeup() == 130.0
    assert kinds(run(eng, 130.0)) == [("start", jid)]
    eng.on_finished(jid, 140.0, 1, "Connection reset by peer")
    assert kinds(run(eng, 380.0)) == [("start", jid)]                   # 240 s the second time
    eng.on_finished(jid, 400.0, 1, "Connection reset by peer")
    assert eng.job(jid).state is JobState.FAILED and "cap 2" in eng.job(jid).history[-1][2]
    other = eng.submit(req("A", 1), 500.0)
    run(eng, 500.0)
    eng.on_finished(other, 510.0, 1, "SyntaxError: invalid syntax")
    assert eng.job(other).state is JobState.FAILED and eng.job(other).attempts == 1   # user error: no retry


def test_finished_and_success_release_cells():
    eng = quota_engine(fig2_spec())
    jid = eng.submit(req("A", 4), 0.0)
    run(eng, 0.0)
    assert eng.view.nodes["node1"].gpus_free == 0 or eng.view.nodes["node2"].gpus_free == 0
    eng.on_finished(jid, 5.0, 0)
    rec = eng.job(jid)
    assert rec.state is JobState.SUCCEEDED and rec.ended == 5.0 and rec.placement is None
    assert all(n.gpus_free == 4 for n in eng.view.nodes.values())
    with pytest.raises(RequestError, match="not running"):
        eng.on_finished(jid, 6.0, 0)
    with pytest.raises(RequestError, match="unknown job"):
        eng.on_started("nope", 6.0)


def test_cancel_queued_and_running():
    eng = quota_engine(fig2_spec())
    r1 = eng.submit(req("A", 4), 0.0)
    r2 = eng.submit(req("A", 4, allow_opportunistic=True), 0.0)   # runs on node2, low priority
    q = eng.submit(req("A", 4), 0.0)
    run(eng, 0.0)
    assert eng.cancel(q, 1.0, "alice") == [] and eng.job(q).state is JobState.CANCELLED
    ds = eng.cancel(r1, 2.0, "root")                 # VC admin
    assert kinds(ds) == [("preempt", r1)]
    eng.on_preempted(r1, 3.0)
    assert eng.job(r1).state is JobState.CANCELLED and eng.job(r1).preemptions == 0
    with pytest.raises(RequestError, match="already cancelled"):
        eng.cancel(r1, 4.0, "alice")
    assert eng.job(r2).state is JobState.RUNNING


def test_set_health_preempts_jobs_on_bad_gpu():
    eng = quota_engine(fig2_spec())
    jid = eng.submit(req("A", 1), 0.0)
    ds = run(eng, 0.0)
    node, gpu = ds[0].placement.pods[0].node, ds[0].placement.pods[0].gpus[0]
    ds = eng.set_health(node, gpu, False, 1.0)
    assert kinds(ds) == [("preempt", jid)] and "unhealthy" in ds[0].reason
    eng.on_preempted(jid, 1.0)
    ds = run(eng, 1.0)
    assert ds[0].placement.pods[0].gpus != (gpu,) or ds[0].placement.pods[0].node != node


def test_report_progress_checks_bounds():
    eng = quota_engine(fig2_spec())
    jid = eng.submit(req("A", 1), 0.0)
    eng.report_progress(jid, 5, 10, 1.0)
    assert eng.job(jid).progress == (5, 10)
    with pytest.raises(RequestError, match="done"):
        eng.report_progress(jid, 11, 10, 1.0)
    with pytest.raises(RequestError, match="total"):
        eng.report_progress(jid, 0, 0, 1.0)


def test_record_roundtrip_and_restore():
    eng = quota_engine(fig2_spec())
    run_id = eng.submit(req("A", 2, grace_period=5.0), 0.0)
    q_id = eng.submit(req("A", 4), 0.0)
    run(eng, 0.0)
    eng.report_progress(run_id, 1, 2, 1.0)
    dicts = [json.loads(json.dumps(r.to_dict())) for r in eng.jobs()]
    recs = [JobRecord.from_dict(d) for d in dicts]
    assert recs[0].to_dict() == dicts[0]
    fresh = quota_engine(fig2_spec())
    for r in recs:
        fresh.restore(r)
    assert fresh.job(run_id).state is JobState.RUNNING and fresh.queue("A") == [q_id]
    assert fresh.alloc.grant_of(run_id) is not None
    assert fresh.view.nodes[fresh.job(run_id).placement.pods[0].node].gpus_free == 2
    with pytest.raises(RequestError, match="already exists"):
        fresh.restore(JobRecord.from_dict(dicts[0]))
    with pytest.raises(ValueError, match="unknown fields"):
        JobRecord.from_dict({**dicts[0], "bogus": 1})
    fresh.on_finished(run_id, 9.0, 0)
    assert kinds(run(fresh, 9.0)) == [("start", q_id)]
    fresh.alloc.check_invariants()


def test_duplicate_or_bad_job_id():
    eng = quota_engine(fig2_spec())
    eng.submit(req("A", 1), 0.0, job_id="x")
    with pytest.raises(RequestError, match="already exists"):
        eng.submit(req("A", 1), 0.0, job_id="x")
    with pytest.raises(RequestError, match="job_id"):
        eng.submit(req("A", 1), 0.0, job_id="")
