"""The AlloX simulation on a Philly slice: workload derivation, policy ordering, report."""
import statistics

import pytest

from hived.core.allox import workload as W
from hived.core.sim import allox_experiment as E
from hived.reports import allox as report


def test_workload_cpu_times_from_speedups_and_load():
    wl = W.build(200, load=1.0, seed=3, error=0.0)
    assert len(wl.jobs) == 200 and len(wl.users) == 10
    for j in wl.jobs:
        s = wl.speedups[j.id]
        assert 1.8 <= s <= 10
        assert j.times["cpu"] == pytest.approx(j.times["gpu"] * s)     # no error: estimate = truth
        assert W.CLIP[0] <= j.times["gpu"] <= W.CLIP[1]
    # arrival span scaled so that GPU work = load x 20 GPUs x span
    span = max(j.arrival for j in wl.jobs)
    assert sum(j.times["gpu"] for j in wl.jobs) == pytest.approx(1.0 * 20 * span, rel=1e-6)
    noisy = W.build(200, load=1.0, seed=3, error=0.1)
    errs = [noisy.jobs[i].times["gpu"] / wl.truth[wl.jobs[i].id]["gpu"] - 1 for i in range(200)]
    assert 0.05 < statistics.pstdev(errs) < 0.15


@pytest.mark.parametrize("kw, msg", [(dict(n_jobs=0), "n_jobs"), (dict(load=0), "load"),
                                     (dict(error=1.5), "error"), (dict(users=0), "users"),
                                     (dict(n_jobs=10 ** 6), "only")])
def test_workload_bad_input(kw, msg):
    kw.setdefault("n_jobs", 10)
    with pytest.raises(ValueError, match=msg):
        W.build(**kw)


@pytest.fixture(scope="module")
def result():
    return E.run(E.Config(jobs=250, alphas=(0.1, 1.0)))


def test_allox_beats_the_non_preemptive_baselines(result):
    r = result.rows
    allox = r["allox"].avg_completion_min
    for base in ("es", "drff", "drfs", "drfa", "jsq+", "sjf+"):
        assert allox < r[base].avg_completion_min, base
    # DRFF and DRFS leave the CPUs idle (Fig. 12)
    assert r["drff"].cpu_util == 0 and r["drfs"].cpu_util == 0 and r["allox"].cpu_util > 0.1
    # preemptive SRPT stays below everything non-preemptive here
    assert r["srpt"].avg_completion_min < allox


def test_alpha_trades_fairness_for_speed(result):
    low, high = result.sweep
    assert high.avg_completion_min < low.avg_completion_min
    assert high.progress_std > low.progress_std


def test_report_main(tmp_path, capsys):
    rc = report.main(["--jobs", "60", "--alphas", "0.5", "--policies", "es,allox,srpt", "--no-progress",
                      "--plots", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0 and "AlloX vs SRPT" in out and "Fig. 16" in out
    assert (tmp_path / "allox_policies.png").exists() and (tmp_path / "allox_alpha.png").exists()
    assert report.main(["--policies", "fifo", "--no-progress"]) == 2
    assert "unknown fifo" in capsys.readouterr().err
    assert report.main(["--alphas", "0.1,x", "--no-progress"]) == 2
