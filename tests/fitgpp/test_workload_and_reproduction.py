"""The synthetic workload (FitGpp, OpML '19, §4.2) and a reduced, seeded reproduction of Table 1 and 3."""
import numpy as np
import pytest

from hived.core.sim import fitgpp_experiment as E
from hived.core.sim import fitgpp_workload as W
from hived.core.spec import load_spec


def test_sampled_jobs_follow_the_paper_bounds_and_are_seeded():
    jobs = W.sample_jobs(20000, seed=5)
    assert jobs == W.sample_jobs(20000, seed=5) and jobs != W.sample_jobs(20000, seed=6)
    te = [j for j in jobs if j.te]
    be = [j for j in jobs if not j.te]
    assert abs(len(te) / len(jobs) - 0.30) < 0.02
    assert max(j.exec_min for j in te) <= 30 and max(j.exec_min for j in be) <= 24 * 60
    assert min(j.exec_min for j in jobs) >= 1
    assert max(j.grace_min for j in jobs) <= 20 and min(j.grace_min for j in jobs) >= 0
    assert all(1 <= j.gpus <= 8 and 1 <= j.cpus <= 32 and 1 <= j.memory_gb <= 256 for j in jobs)
    # TE jobs are short: the truncated normal around 5 min has a mean a little above it
    assert 4 < np.mean([j.exec_min for j in te]) < 9
    assert np.mean([j.exec_min for j in be]) > 30


def test_bad_workload_arguments_are_refused():
    with pytest.raises(ValueError, match="job count must be >= 1"):
        W.sample_jobs(0)
    with pytest.raises(ValueError, match="TE share must be in"):
        W.sample_jobs(10, te_share=1.5)
    with pytest.raises(ValueError, match="load must be > 0"):
        W.generate(10, load=0)
    with pytest.raises(ValueError, match="unknown policy 'sjf'"):
        E.simulate(W.sample_jobs(10), "sjf")


def test_arrivals_keep_the_fifo_load_at_the_target():
    jobs = W.generate(3000, seed=2, nodes=12)
    arr = [j.arrival_min for j in jobs]
    assert arr == sorted(arr) and arr[0] == 0 and arr[-1] > 0
    # the first minute fills the system to the target load (2 x capacity of the busiest resource)
    first = [j for j in jobs if j.arrival_min == 0]
    load = max(sum(j.demand[k] for j in first) / (12 * E.CAPACITY[k]) for k in range(3))
    assert 2.0 <= load < 2.0 + 1.0 / 12 * 8


def test_cluster_spec_shape():
    spec = W.cluster_spec(3)
    node = spec["physicalCluster"]["cellTypes"]["FG-NODE"]
    assert (node["cpus"], node["memoryGB"]) == (32, 256)
    chain = load_spec(spec).chains["FG-CLUSTER"]
    # buddy levels 1, 2, 4 GPUs under the 8-GPU node, so pods of 2 or 4 GPUs share a node
    assert chain.gpus_per_level[:chain.node_level] == [1, 2, 4, 8]
    assert (chain.node_cpus, chain.node_memory_gb) == (32, 256)
    assert len(spec["physicalCluster"]["physicalCells"][0]["cellChildren"]) == 3
    assert spec["virtualClusters"]["vc0"]["virtualCells"] == [{"cellType": "FG-CLUSTER.FG-NODE", "cellNumber": 3}]


@pytest.fixture(scope="module")
def reduced():
    """8,192 jobs on the paper's 84 nodes, seed 1: a few seconds."""
    return E.run(NS(jobs=8192, seed=1, policies="fifo,lrtp,rand,fitgpp", s_sweep="0,8"))


class NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_reduced_reproduction_te_p95_cut_at_least_90_percent(reduced):
    fifo = reduced.results["fifo"].percentiles("te")[1]
    fit = reduced.results["fitgpp"].percentiles("te")[1]
    assert fifo > 5                      # FIFO really makes TE jobs wait
    assert (fifo - fit) / fifo >= 0.90


def test_reduced_reproduction_be_median_at_most_25_percent_worse(reduced):
    fifo = reduced.results["fifo"].percentiles("be")[0]
    fit = reduced.results["fitgpp"].percentiles("be")[0]
    assert fit <= 1.25 * fifo


def test_reduced_reproduction_fitgpp_preempts_fewer_jobs(reduced):
    r = reduced.results
    assert r["fifo"].preempted_jobs == 0
    assert 0 < r["fitgpp"].preempted_share < r["lrtp"].preempted_share
    assert r["fitgpp"].preempted_share < r["rand"].preempted_share
    # P = 1: nobody preempted twice
    assert r["fitgpp"].preemptions == r["fitgpp"].preempted_jobs


def test_reduced_reproduction_shorter_rescheduling_intervals(reduced):
    r = reduced.results
    assert r["fitgpp"].interval_percentiles()[0] <= r["lrtp"].interval_percentiles()[0]
    assert r["fitgpp"].interval_percentiles()[0] <= r["rand"].interval_percentiles()[0]


def test_every_job_finishes_and_sweep_is_recorded(reduced):
    for res in reduced.results.values():
        assert len(res.te_slowdown) + len(res.be_slowdown) == 8192
        assert min(res.te_slowdown + res.be_slowdown) >= 1.0
    assert [r.s for r in reduced.sweep] == [0.0, 8.0]
    d = reduced.to_dict()
    assert set(d["results"]) == {"fifo", "lrtp", "rand", "fitgpp"}


def test_cap_infinite_allows_repeat_preemptions():
    jobs = W.generate(6000, seed=3)
    r = E.simulate(jobs, "rand", cap=float("inf"), seed=3)
    r1 = E.simulate(jobs, "rand", cap=1, seed=3)
    assert r1.preemptions == r1.preempted_jobs
    assert r.preemptions >= r.preempted_jobs


def test_reduced_reproduction_through_the_real_engine():
    """The same workload through core/engine.py, the quota allocator and the registered policies."""
    res = E.run(E.Config(jobs=4096, seed=1, backend="engine"))
    assert res.backend == "engine"
    r = res.results
    fifo_te, fit_te = r["fifo"].percentiles("te")[1], r["fitgpp"].percentiles("te")[1]
    assert fifo_te > 5 and (fifo_te - fit_te) / fifo_te >= 0.90
    assert r["fitgpp"].percentiles("be")[0] <= 1.25 * r["fifo"].percentiles("be")[0]
    assert r["fifo"].preemptions == 0
    assert 0 < r["fitgpp"].preempted_share < min(r["lrtp"].preempted_share, r["rand"].preempted_share)
    assert r["fitgpp"].preemptions == r["fitgpp"].preempted_jobs          # P = 1 in the engine too
    for pr in r.values():
        assert len(pr.te_slowdown) + len(pr.be_slowdown) == 4096 and min(pr.te_slowdown + pr.be_slowdown) >= 1.0


def test_bad_backend_is_refused():
    with pytest.raises(ValueError, match="--backend must be one of model, engine, engine-hived, got 'gpu'"):
        E.config_from(NS(backend="gpu"))
    from hived.core.sim.fitgpp_engine import simulate_engine
    with pytest.raises(ValueError, match="unknown allocator 'yarn'; choose quota or hived"):
        simulate_engine(W.sample_jobs(4), "fifo", allocator="yarn")


def test_reduced_reproduction_through_hived_buddy_allocator():
    """The Engine with HiveD's buddy allocator (pods hold whole 1/2/4/8-GPU cells): the
    same directions hold, and nothing is left stuck."""
    res = E.run(E.Config(jobs=2048, seed=0, backend="engine-hived"))
    r = res.results
    fifo_te, fit_te = r["fifo"].percentiles("te")[1], r["fitgpp"].percentiles("te")[1]
    assert fifo_te > 5 and (fifo_te - fit_te) / fifo_te >= 0.90
    assert r["fitgpp"].percentiles("be")[0] <= 1.25 * r["fifo"].percentiles("be")[0]
    assert 0 < r["fitgpp"].preempted_share < min(r["lrtp"].preempted_share, r["rand"].preempted_share)
    for pr in r.values():
        assert len(pr.te_slowdown) + len(pr.be_slowdown) == 2048
