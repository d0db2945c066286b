"""AlloXPolicy as an engine QueuePolicy: order, fairness knob, estimates (unit level)."""
import pytest

from hived.core.engine_records import JobRecord
from hived.core.engine_view import ClusterView
from hived.core.estimator import InMemoryHistory, signature
from hived.core.jobs import JobClass, JobRequest, PodGroup
from hived.core.policies.allox import AlloXPolicy
from hived.core.policies.registry import make_queue_policy


def rec(jid, user="u", est=None, gpus=1, submitted=0.0, cls=JobClass.BE, labels=None, duration=None):
    r = JobRecord(jid, JobRequest(user=user, vc="vc", job_class=cls, groups=[PodGroup(1, gpus)],
                                  estimate=est, labels=labels or {}, duration=duration), submitted=submitted)
    r.pod_gpus = [gpus]
    return r


def view(free=1, total=4, usage=None):
    v = ClusterView()
    v.add_node("n0", "c", total, 32, 256)
    v.nodes["n0"].gpus_free = free
    v.usage = usage or {}
    return v


def ids(recs):
    return [r.job_id for r in recs]


def test_registry_builds_it():
    assert isinstance(make_queue_policy("allox"), AlloXPolicy)


def test_one_free_gpu_gives_shortest_first_by_gpu_time():
    p = AlloXPolicy()
    q = [rec("a", est=300), rec("b", est=100), rec("c", est=60, gpus=4), rec("d", est=200)]
    # sizes (estimate x GPUs): 300, 100, 240, 200
    assert ids(p.order("vc", q, view(free=1), 0.0)) == ["b", "d", "c", "a"]


def test_te_jobs_stay_ahead():
    p = AlloXPolicy()
    q = [rec("be", est=10), rec("te", est=500, cls=JobClass.TE)]
    assert ids(p.order("vc", q, view(), 0.0)) == ["te", "be"]


def test_alpha_puts_the_user_with_less_progress_first():
    p = AlloXPolicy(alpha=0.5)
    q = [rec("a1", user="alice", est=10), rec("b1", user="bob", est=1000)]
    busy = {"running-a": {"n0": (2, 0, 0)}}
    p._user["running-a"] = "alice"          # alice already holds 2 of 4 GPUs
    assert ids(p.order("vc", q, view(usage=busy), 0.0)) == ["b1", "a1"]
    # alpha = 1: no fairness constraint, the short job first
    p1 = AlloXPolicy(alpha=1.0)
    p1._user["running-a"] = "alice"
    assert ids(p1.order("vc", q, view(usage=busy), 0.0)) == ["a1", "b1"]


def test_estimates_history_beats_hint_and_default():
    hist = InMemoryHistory()
    sig = signature("proj", "train", {"epochs": 5})
    for d in (50, 52, 48, 50, 51, 49):
        hist.add(sig, "gpu", d)
    p = AlloXPolicy(history=hist, default_estimate=999)
    assert p.estimate(rec("h", est=5000, labels={"signature": sig})) == pytest.approx(50)
    assert p.estimate(rec("x", est=70)) == 70
    assert p.estimate(rec("y")) == 999
    assert p.estimate(rec("z", duration=30)) == 999
    assert AlloXPolicy(use_duration=True).estimate(rec("z", duration=30)) == 30


def test_waiting_time_enters_through_the_delay_matrix_only_as_a_constant():
    # with one machine, delay does not change the optimal order (it is added to every slot)
    p = AlloXPolicy()
    q = [rec("old", est=500, submitted=0.0), rec("new", est=100, submitted=900.0)]
    assert ids(p.order("vc", q, view(free=1), 1000.0)) == ["new", "old"]


@pytest.mark.parametrize("kw, msg", [(dict(alpha=0), "alpha"), (dict(default_estimate=0), "default_estimate"),
                                     (dict(max_jobs=0), "max_jobs")])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        AlloXPolicy(**kw)


def test_progress_reported_before_a_preemption_reorders_the_queue():
    # x ran 250 s before it was preempted (its progress kept); y is fresh with a 40 s hint
    x, y = rec("x", est=300), rec("y", est=40)
    x.run_time = 250.0
    p = AlloXPolicy()
    assert ids(p.order("vc", [x, y], view(free=1), 0.0)) == ["y", "x"]     # 50 s left on the hint alone
    x.progress = (90, 100)        # it had done 90% in those 250 s: about 28 s left
    p = AlloXPolicy()
    assert ids(p.order("vc", [x, y], view(free=1), 0.0)) == ["x", "y"]
    assert p.estimator.get("x").source == "progress"
    assert p.on_progress(x, 0.0).value == pytest.approx(p.estimate(x))


def test_long_queues_switch_to_allox_plus_with_starvation_timeout():
    p = AlloXPolicy(max_jobs=3, timeout=600)
    q = [rec("old-long", est=900, submitted=0.0), rec("a", est=300, submitted=500.0),
         rec("b", est=100, submitted=500.0), rec("c", est=200, gpus=2, submitted=500.0)]
    # at t=1000: old-long waited 1000 s > 600 s: first; then GPU time left, shortest first (c = 2 x 200)
    assert ids(p.order("vc", q, view(free=1), 1000.0)) == ["old-long", "b", "a", "c"]
    # before the timeout it is just the longest job
    assert ids(p.order("vc", q, view(free=1), 550.0)) == ["b", "a", "c", "old-long"]
    with pytest.raises(ValueError, match="timeout"):
        AlloXPolicy(timeout=0)
