"""AlloX's (EuroSys '20) worked examples, reproduced exactly (§1 Table 1, §2.2, §3.1)."""
from fractions import Fraction
from itertools import product

import numpy as np
import pytest

from hived.core.allox.baselines import make
from hived.core.allox.matching import cost_matrix, solve, total_completion
from hived.core.allox.model import Machine, SimJob
from hived.core.allox.simulator import simulate

TABLE1 = [(10, 15), (8, 10), (10, 50), (5, 75), (10, 15), (10, 15)]  # (GPU, CPU) minutes; J1..J6
TWO_TWO = [Machine(0, "gpu"), Machine(1, "gpu"), Machine(2, "cpu"), Machine(3, "cpu")]


def jobs(rows, users=None):
    return [SimJob(f"J{i + 1}", users[i] if users else "u", 0.0, {"gpu": g, "cpu": c})
            for i, (g, c) in enumerate(rows)]


def table1_P():
    # columns: GPU, GPU, CPU, CPU
    return np.array([[g, g, c, c] for g, c in TABLE1], dtype=float)


def test_table1_equal_share_is_181_over_6():
    r = simulate(jobs(TABLE1, ["u1", "u2"] * 3), TWO_TWO, make("es-fcfs"))
    assert Fraction(sum(r.completion.values())).limit_denominator() / 6 == Fraction(181, 6)
    # Fig. 1a: J3 and J4 fall back to CPUs because the users' GPUs are busy
    assert r.kind_of["J3"] == "cpu" and r.kind_of["J4"] == "cpu"
    assert r.makespan == 75


def test_table1_paper_optimal_schedule_is_76_over_6_with_makespan_18():
    # Fig. 1b: GPU1 J4 then J3, GPU2 J2 then J6, CPUs J1 and J5
    order = [(3, 2), (1, 5), (0,), (4,)]
    assert total_completion(table1_P(), order) / 6 == pytest.approx(76 / 6)


def _all_schedules(P):
    """Every job->machine assignment with each machine in SPT order: (total, makespan)."""
    n, m = P.shape
    for assign in product(range(m), repeat=n):
        order = [sorted((j for j in range(n) if assign[j] == i), key=lambda j: P[j, i]) for i in range(m)]
        span = max((sum(P[j, i] for j in o) for i, o in enumerate(order)), default=0)
        yield total_completion(P, order), span


def test_table1_matching_is_the_true_minimum_75_and_76_is_best_at_makespan_18():
    P = table1_P()
    sched = solve(P)
    best = min(t for t, _ in _all_schedules(P))
    assert sched.cost == best == 75          # AlloX's matching beats the paper's figure by 1 minute
    assert total_completion(P, sched.order) == 75
    # the paper's 76 is the optimum among schedules with its 18-minute makespan (76% below 75)
    assert min(t for t, s in _all_schedules(P) if s <= 18) == 76
    r = simulate(jobs(TABLE1, ["u1", "u2"] * 3), TWO_TWO, make("allox"))
    assert sum(r.completion.values()) == 75 <= 76


def test_jsq_plus_matrix_100_vs_45():
    P = [(40, 50), (40, 50), (40, 160), (40, 160)]
    r = simulate(jobs(P), TWO_TWO, make("jsq+"))
    assert r.avg_completion == 100
    assert [r.kind_of[j] for j in ("J1", "J2", "J3", "J4")] == ["gpu", "gpu", "cpu", "cpu"]
    a = simulate(jobs(P), TWO_TWO, make("allox"))
    assert a.avg_completion == 45
    assert [a.kind_of[j] for j in ("J1", "J2", "J3", "J4")] == ["cpu", "cpu", "gpu", "gpu"]


def test_sjf_plus_matrix_50_vs_20():
    P = [(10, 20), (10, 20), (20, 90), (20, 90)]
    r = simulate(jobs(P), TWO_TWO, make("sjf+"))
    assert r.avg_completion == 50
    a = simulate(jobs(P), TWO_TWO, make("allox"))
    assert a.avg_completion == 20
    assert {a.kind_of["J3"], a.kind_of["J4"]} == {"gpu"}


def test_three_job_example_q_matrix_total_17_and_figure7_placement():
    P = [[3, 4], [4, 6], [5, 10]]
    assert cost_matrix(P).tolist() == [[3, 4, 6, 8, 9, 12], [4, 6, 8, 12, 12, 18], [5, 10, 10, 20, 15, 30]]
    s = solve(P)
    assert s.cost == 17
    # M: J1 -> (C,1), J2 -> (G,2), J3 -> (G,1); GPU runs J2 then J3, CPU runs J1
    assert s.slots == ((1, 1), (0, 2), (0, 1))
    assert s.order == ((1, 2), (0,))
    assert s.first_job(0) == 1 and s.first_job(1) == 0
    r = simulate(jobs(P), [Machine(0, "gpu"), Machine(1, "cpu")], make("allox"))
    assert r.finish == {"J1": 4, "J2": 4, "J3": 9}
    assert sum(r.completion.values()) == 17
