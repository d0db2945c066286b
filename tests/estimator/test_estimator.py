"""The estimator: sample extrapolation, history, hints, progress refinement, bad input."""
import math

import pytest

from hived.core.estimator import (
    Estimate,
    Estimator,
    InMemoryHistory,
    Sample,
    from_hint,
    from_history,
    from_samples,
    refine,
    signature,
)


def test_two_samples_extrapolate_linearly_with_startup_cost():
    # 30 s start-up + 0.5 s/step: 3% and 6% of 10,000 steps
    e = from_samples([Sample(300, 180, 3.0), Sample(600, 330, 3.5)], 10_000, kind="gpu")
    assert e.value == pytest.approx(30 + 0.5 * 10_000)
    assert e.source == "sample" and e.kind == "gpu"
    assert e.memory_gb == 3.5                       # the samples' peak
    assert e.confidence == pytest.approx(0.85)      # two samples on a line
    assert "2 sample run(s)" in e.detail


def test_one_sample_is_proportional_and_less_sure():
    e = from_samples([Sample(100, 20)], 1000)
    assert e.value == pytest.approx(200)
    assert e.confidence == pytest.approx(0.6)
    assert e.memory_gb is None


def test_noisy_samples_lower_confidence_and_negative_slope_falls_back():
    good = from_samples([Sample(100, 10), Sample(200, 20), Sample(300, 30)], 1000)
    noisy = from_samples([Sample(100, 10), Sample(200, 30), Sample(300, 25)], 1000)
    assert noisy.confidence < good.confidence
    dec = from_samples([Sample(100, 30), Sample(200, 20)], 1000)   # later sample faster: noise
    assert dec.value == pytest.approx(50 / 300 * 1000)


@pytest.mark.parametrize("samples, total, msg", [
    ([], 100, "at least one"),
    ([Sample(0, 1)], 100, r"samples\[0\].steps"),
    ([Sample(10, -1)], 100, r"samples\[0\].seconds"),
    ([Sample(200, 1)], 100, "more than total_steps"),
    ([Sample(10, 1)], 0, "total_steps"),
    ([Sample(10, 1, -2)], 100, "peak_memory_gb"),
    ([Sample(10, float("nan"))], 100, "seconds"),
])
def test_bad_samples(samples, total, msg):
    with pytest.raises(ValueError, match=msg):
        from_samples(samples, total)


def test_history_median_and_confidence_grows_with_runs():
    few = from_history([100, 120], signature="abc")
    many = from_history([100, 110, 120, 105, 115, 100, 120, 110])
    assert few.value == 110 and few.source == "history" and "abc" in few.detail
    assert many.confidence > few.confidence
    spread = from_history([10, 1000, 50, 500, 5, 2000, 100, 300])
    assert spread.confidence < many.confidence
    with pytest.raises(ValueError, match="no finished runs"):
        from_history([])
    with pytest.raises(ValueError, match=r"history\[1\]"):
        from_history([10, 0])


def test_hint():
    e = from_hint(3600, "cpu")
    assert (e.value, e.source, e.confidence, e.kind) == (3600, "hint", 0.3, "cpu")
    with pytest.raises(ValueError, match="hint"):
        from_hint(-5)


def test_refine_from_progress_blends_with_prior():
    prior = from_hint(1000)                     # says 1000 s, weakly
    e = refine(prior, done=50, total=100, elapsed=300)   # progress says 600 s
    assert e.source == "progress"
    own_conf = 0.5 + 0.45 * 0.5
    # the prior's weight: its confidence x the half still to do
    assert e.value == pytest.approx((0.15 * 1000 + own_conf * 600) / (0.15 + own_conf))
    assert e.confidence == pytest.approx(own_conf)
    done = refine(e, done=100, total=100, elapsed=640)
    assert done.value == pytest.approx(640)
    assert refine(None, 10, 100, 5).value == pytest.approx(50)
    # never below what already ran
    assert refine(from_hint(10), 1, 100, 50).value >= 50


@pytest.mark.parametrize("done, total, elapsed, msg", [(5, 0, 1, "total"), (150, 100, 1, "done"),
                                                       (-1, 100, 1, "done"), (5, 100, -1, "elapsed")])
def test_refine_bad_input(done, total, elapsed, msg):
    with pytest.raises(ValueError, match=msg):
        refine(from_hint(10), done, total, elapsed)


def test_refine_without_progress_needs_a_prior():
    with pytest.raises(ValueError, match="no prior"):
        refine(None, 0, 100, 0)
    assert refine(from_hint(10), 0, 100, 0).value == 10


def test_signature_ignores_irrelevant_params_and_is_stable():
    a = signature("proj", "train", {"epochs": 10, "lr": 0.1, "seed": 1}, relevant=["epochs", "lr"])
    b = signature("proj", "train", {"epochs": "10", "lr": "0.1", "seed": 7}, relevant=["epochs", "lr"])
    c = signature("proj", "train", {"epochs": 20, "lr": 0.1}, relevant=["epochs", "lr"])
    assert a == b != c and len(a) == 16
    assert signature("proj") != signature("proj", "eval")
    with pytest.raises(ValueError, match="project"):
        signature("")


def test_estimator_picks_most_confident_source():
    hist = InMemoryHistory()
    sig = signature("p", "main", {"epochs": 3})
    est = Estimator(hist)
    assert est.estimate("gpu", signature=sig) is None
    assert est.estimate("gpu", signature=sig, hint=50).source == "hint"
    for d in (100, 102, 98, 101, 99, 100):
        hist.add(sig, "gpu", d)
    e = est.estimate("gpu", signature=sig, hint=50)
    assert e.source == "history" and e.value == pytest.approx(100)
    # samples on a line (0.85) beat 6 tight runs (6/8 = 0.75)
    s = est.estimate("gpu", signature=sig, samples=[Sample(10, 11), Sample(20, 21)], total_steps=100)
    assert s.source == "sample" and s.value == pytest.approx(101)
    with pytest.raises(ValueError, match="total_steps"):
        est.estimate("gpu", samples=[Sample(1, 1)])
    # history is per kind
    assert est.estimate("cpu", signature=sig) is None


def test_estimate_all_per_kind_and_tracking():
    est = Estimator()
    got = est.estimate_all(["gpu", "cpu"], samples={"gpu": [Sample(10, 10)], "cpu": [Sample(10, 50)]},
                           total_steps=100)
    assert got["gpu"].value == pytest.approx(100) and got["cpu"].value == pytest.approx(500)
    est.track("j1", got["gpu"])
    assert est.remaining("j1", 30) == pytest.approx(70)
    e = est.report_progress("j1", 50, 100, 40)       # running faster than sampled
    assert e.source == "progress" and e.value < 100
    assert est.get("j1") is e
    est.forget("j1")
    assert est.get("j1") is None and est.remaining("j1", 1) is None


def test_estimate_dataclass_checks_and_dict():
    with pytest.raises(ValueError, match="source"):
        Estimate(1, "guess", 0.5)
    with pytest.raises(ValueError, match="confidence"):
        Estimate(1, "hint", 0)
    with pytest.raises(ValueError, match="value"):
        Estimate(math.inf, "hint", 0.5)
    assert from_hint(5).to_dict()["source"] == "hint"


# --- per engine record: what policies call on every round ------------------
from hived.core.engine_records import JobRecord  # noqa: E402
from hived.core.jobs import JobRequest, JobState  # noqa: E402


def record(jid="j", hint=None, duration=None, labels=None):
    return JobRecord(jid, JobRequest(user="u", vc="vc", estimate=hint, duration=duration, labels=labels or {}))


def test_record_base_sources_say_where_they_came_from():
    est = Estimator()
    assert est.for_record(record("a", hint=300), 0.0).source == "hint"
    o = est.for_record(record("b", hint=300, duration=120), 0.0, oracle=True)
    assert (o.value, o.source) == (120, "oracle")
    d = est.for_record(record("c"), 0.0, default=900)
    assert (d.value, d.source, d.confidence) == (900, "default", 0.05)
    assert est.for_record(record("d"), 0.0) is None       # nothing known, no default


def test_record_history_by_signature_label():
    hist = InMemoryHistory()
    sig = signature("proj", "train", {"epochs": 3})
    for s in (100, 110, 90):
        hist.add(sig, "gpu", s)
    e = Estimator(hist).for_record(record(hint=500, labels={"signature": sig}), 0.0)
    assert (e.source, e.value) == ("history", 100)


def test_engine_progress_refines_a_running_job_idempotently():
    est = Estimator()
    r = record(hint=1000)
    r.state, r.started = JobState.RUNNING, 100.0
    assert est.for_record(r, 150.0).value == 1000               # no progress reported yet
    r.progress = (50, 100)                                       # Engine.report_progress(j, 50, 100, now)
    a = est.for_record(r, 300.0)                                 # ran 200 s for half the steps
    assert a.source == "progress" and 400 < a.value < 1000 and a.confidence > 0.3
    assert est.for_record(r, 300.0) == a                         # same inputs, same answer (no compounding)
    r.progress = (99, 100)
    late = est.for_record(r, 496.0)                              # 396 s for 99%: about 400 s in all
    assert late.value == pytest.approx(400, rel=0.05) and late.confidence > a.confidence
    assert est.remaining_for(r, 496.0) == pytest.approx(late.value - 396)
    assert est.get(r.job_id) == late                             # tracked for the service to show


def test_preempted_record_keeps_its_run_time():
    est = Estimator()
    r = record(hint=300)
    r.run_time, r.progress = 250.0, (90, 100)                    # queued again after a preemption
    assert est.remaining_for(r, 1000.0) < 50
    r2 = record("fresh", hint=300)
    assert est.remaining_for(r2, 1000.0) == 300
