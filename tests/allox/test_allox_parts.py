"""AlloX pieces: delay matrix, fairness, Algorithm 2, AlloX+, baselines, bad input."""
import math

import pytest

from hived.core.allox.baselines import EqualShare, OnlineDRF, make
from hived.core.allox.fairness import dominant_share, lowest_progress_users, progress_std, value
from hived.core.allox.matching import cost_matrix, solve
from hived.core.allox.model import Machine, SimJob
from hived.core.allox.scheduler import AlloX, AlloXPlus, plan_allox_plus
from hived.core.allox.simulator import simulate, simulate_srpt


def test_delay_matrix_adds_wait_once_per_slot():
    # Fig. 8: machine busy until 10, job arrived at 4, p = 5 -> expected completion 11 at T = 6
    q = cost_matrix([[5.0]], D=[[10 - 4]])
    assert q.tolist() == [[11.0]]
    q2 = cost_matrix([[5.0], [2.0]], D=[[6.0], [1.0]])
    assert q2.tolist() == [[11.0, 16.0], [3.0, 5.0]]


def test_infeasible_kind_is_never_chosen_and_all_infeasible_is_an_error():
    s = solve([[math.inf, 4.0], [3.0, math.inf]])
    assert s.slots == ((1, 1), (0, 1))
    with pytest.raises(ValueError, match="none of the machines"):
        solve([[math.inf, math.inf]])


@pytest.mark.parametrize("P, msg", [([], "non-empty"), ([[0, 1]], "> 0"), ([[-1, 2]], "> 0"),
                                    ([[float("nan"), 1]], "> 0")])
def test_bad_processing_matrix(P, msg):
    with pytest.raises(ValueError, match=msg):
        cost_matrix(P)


def test_bad_positions_and_D_shape():
    with pytest.raises(ValueError, match="slots for 3 jobs"):
        cost_matrix([[1, 1]] * 3, positions=1)
    with pytest.raises(ValueError, match="D must have P's shape"):
        cost_matrix([[1, 1]], D=[[1]])


def test_paper_fairness_example_value_half_and_eighth():
    # CPU config (1 CPU, 4 GB, 20), GPU config (1 GPU, 2 GB, 5); capacity 8 CPUs, 2 GPUs, 64 GB
    j = SimJob("j", "u", 0, {"cpu": 20, "gpu": 5}, memory_gb={"cpu": 4, "gpu": 2})
    cap = {"cpu": 8, "gpu": 2}
    assert dominant_share(j, "gpu", cap, 64) == 0.5
    assert value(j, "gpu", cap, 64) == 0.5
    assert value(j, "cpu", cap, 64) == 0.125


def test_alpha_picks_lowest_progress_users():
    prog = {f"u{i}": float(i) for i in range(20)}
    assert lowest_progress_users(prog, prog, 0.3, 20) == ["u0", "u1", "u2", "u3", "u4", "u5"]
    # users with nothing queued are skipped
    assert lowest_progress_users(prog, ["u7", "u3"], 0.05, 20) == ["u3"]
    assert lowest_progress_users(prog, ["u7", "u3"], 1.0, 20) == ["u3", "u7"]
    with pytest.raises(ValueError, match=r"alpha must be in \[0, 1\]"):
        lowest_progress_users(prog, prog, 1.5, 20)
    assert progress_std({"a": 1.0, "b": 3.0}, ["a", "b"]) == 1.0


def test_allox_keeps_a_cpu_idle_when_waiting_for_the_gpu_is_better():
    # one GPU, one CPU; job A (gpu 10) running... B arrives: gpu 2, cpu 100 -> waits for the GPU
    M = [Machine(0, "gpu"), Machine(1, "cpu")]
    jobs = [SimJob("A", "u", 0, {"gpu": 10, "cpu": 50}), SimJob("B", "u", 1, {"gpu": 2, "cpu": 100})]
    r = simulate(jobs, M, AlloX())
    assert r.kind_of == {"A": "gpu", "B": "gpu"}
    assert r.finish["B"] == 12
    jsq = simulate(jobs, M, make("jsq+"))
    assert jsq.kind_of["B"] == "cpu" and jsq.finish["B"] == 101


def test_allox_alpha_serves_the_user_with_lower_progress_first():
    M = [Machine(0, "gpu"), Machine(1, "gpu")]
    jobs = [SimJob("a1", "a", 0, {"gpu": 1}), SimJob("a2", "a", 0, {"gpu": 1}),
            SimJob("b1", "b", 0, {"gpu": 5}), SimJob("b2", "b", 0, {"gpu": 5})]
    fair = simulate(jobs, M, AlloX(alpha=0.5))
    fast = simulate(jobs, M, AlloX(alpha=1.0))
    # alpha = 1: both short jobs first (SPT); alpha = 0.5: the second GPU goes to b,
    # whose progress is lower once a1 runs
    assert sorted(fast.finish[j] for j in ("a1", "a2")) == [1, 1]
    assert sorted(fast.finish[j] for j in ("b1", "b2")) == [6, 6]
    assert fair.finish == {"a1": 1, "b1": 5, "a2": 2, "b2": 7}
    assert fast.avg_completion == 3.5 < fair.avg_completion == 3.75


def test_allox_plus_timeout_and_shortest_pairs():
    q = [SimJob("old", "u", 0, {"gpu": 50, "cpu": 60}), SimJob("s", "u", 90, {"gpu": 1, "cpu": 30}),
         SimJob("t", "u", 95, {"gpu": 2, "cpu": 3})]
    plan = plan_allox_plus(q, {"gpu": 1, "cpu": 1}, {"gpu": 200, "cpu": 200}, now=100, timeout=60)
    assert [(j.id, k) for j, k in plan] == [("old", "gpu"), ("t", "cpu")]
    plan = plan_allox_plus(q, {"gpu": 1, "cpu": 1}, {"gpu": 200, "cpu": 200}, now=100)
    assert [(j.id, k) for j, k in plan] == [("s", "gpu"), ("t", "cpu")]
    # a slow CPU is refused when the GPU frees up soon enough
    plan = plan_allox_plus([SimJob("x", "u", 0, {"gpu": 1, "cpu": 30})], {"cpu": 1}, {"gpu": 105}, now=100)
    assert plan == []
    with pytest.raises(ValueError, match="timeout"):
        AlloXPlus(timeout=0)


def test_drff_uses_only_the_favourite_kind_and_drfa_pools():
    M = [Machine(0, "gpu"), Machine(1, "cpu")]
    jobs = [SimJob("a", "u", 0, {"gpu": 1, "cpu": 2}), SimJob("b", "v", 0, {"gpu": 1, "cpu": 2})]
    drff = simulate(jobs, M, OnlineDRF("fcfs"))
    assert set(drff.kind_of.values()) == {"gpu"}
    drfa = simulate(jobs, M, OnlineDRF("sjf", speedup=2))
    assert sorted(drfa.kind_of.values()) == ["cpu", "gpu"]


def test_equal_share_splits_machines_round_robin():
    M = [Machine(0, "gpu"), Machine(1, "gpu"), Machine(2, "cpu"), Machine(3, "cpu")]
    es = EqualShare()
    from hived.core.allox.simulator import SimState
    st = SimState(M, ["u1", "u2"], {})
    assert es.owners(st) == {0: "u1", 1: "u2", 2: "u1", 3: "u2"}
    with pytest.raises(ValueError, match="order"):
        EqualShare("lifo")


def test_srpt_is_a_lower_bound_here_and_migrates():
    M = [Machine(0, "gpu"), Machine(1, "cpu")]
    jobs = [SimJob("long", "u", 0, {"gpu": 10, "cpu": 20}), SimJob("short", "u", 2, {"gpu": 1, "cpu": 50})]
    r = simulate_srpt(jobs, M)
    # short preempts long on the GPU at t=2; long moves to the CPU keeping its 20% done
    assert r.finish["short"] == pytest.approx(3)
    assert r.avg_completion <= simulate(jobs, M, AlloX()).avg_completion


def test_estimation_error_truth_drives_finish_times():
    M = [Machine(0, "gpu")]
    r = simulate([SimJob("a", "u", 0, {"gpu": 10})], M, AlloX(), truth={"a": {"gpu": 13}})
    assert r.finish["a"] == 13


@pytest.mark.parametrize("kw, msg", [(dict(id="x", user="u", arrival=0, times={}), "at least one"),
                                     (dict(id="x", user="u", arrival=0, times={"gpu": 0}), "> 0"),
                                     (dict(id="x", user="u", arrival=-1, times={"gpu": 1}), "arrival")])
def test_bad_jobs(kw, msg):
    with pytest.raises(ValueError, match=msg):
        SimJob(**kw)


def test_bad_simulation_inputs():
    M = [Machine(0, "gpu")]
    with pytest.raises(ValueError, match="duplicate job id"):
        simulate([SimJob("a", "u", 0, {"gpu": 1})] * 2, M, AlloX())
    with pytest.raises(ValueError, match="cluster has only"):
        simulate([SimJob("a", "u", 0, {"tpu": 1})], M, AlloX())
    with pytest.raises(ValueError, match="indices"):
        simulate([SimJob("a", "u", 0, {"gpu": 1})], [Machine(3, "gpu")], AlloX())
    with pytest.raises(ValueError, match="unknown policy"):
        make("best")
