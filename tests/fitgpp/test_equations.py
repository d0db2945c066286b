"""eq. 1-4 of FitGpp (OpML '19) against numbers worked out by hand."""
import math
import random

import pytest

from hived.core.policies import fitgpp
from hived.core.policies.fitgpp import Candidate, choose, fits, scores, size

CAP = (32.0, 256.0, 8.0)           # one node of the paper's cluster
A = (16.0, 128.0, 4.0)             # half a node in every resource
B = (8.0, 64.0, 8.0)               # all GPUs, a quarter of CPU and RAM
C = (4.0, 32.0, 2.0)


def test_size_eq1_by_hand():
    assert size(A, CAP) == pytest.approx(math.sqrt(0.75))           # 0.8660
    assert size(B, CAP) == pytest.approx(math.sqrt(1.125))          # 1.0607
    assert size(C, CAP) == pytest.approx(math.sqrt(0.09375))        # 0.3062
    # invariant under the unit of a resource (paper: "4 CPUs vs. 64 GB")
    assert size((16, 128 * 1024, 4), (32, 256 * 1024, 8)) == pytest.approx(size(A, CAP))


def test_size_refuses_zero_capacity():
    with pytest.raises(ValueError, match="capacity of memory_gb must be > 0"):
        size(A, (32, 0, 8))


def test_fit_eq2_elementwise():
    te = (4.0, 32.0, 4.0)
    assert fits(te, A, (0, 0, 0))
    assert not fits(te, C, (2, 10, 0))          # 2 + 0 GPUs < 4
    assert fits(te, C, (0, 0, 2))               # exactly enough of everything
    assert not fits(te, C, (0, -1, 2))          # 1 GB short


def test_score_eq3_by_hand():
    sz = [size(A, CAP), size(B, CAP), size(C, CAP)]
    sc = scores(sz, [60, 0, 120], s=4.0)
    assert sc[0] == pytest.approx(math.sqrt(0.75) / math.sqrt(1.125) + 2.0)   # 2.8165
    assert sc[1] == pytest.approx(1.0)
    assert sc[2] == pytest.approx(math.sqrt(0.09375) / math.sqrt(1.125) + 4.0)  # 4.2887
    assert scores([0.5, 1.0], [0, 0], s=4.0) == [0.5, 1.0]                   # all rewindable: no 0/0


def _cands(pre_b=0, gp=(60, 0, 120)):
    return [
        Candidate("a", {"n1": A}, size(A, CAP), gp[0]),
        Candidate("b", {"n2": B}, size(B, CAP), gp[1], preemptions=pre_b),
        Candidate("c", {"n3": C}, size(C, CAP), gp[2]),
    ]


FREE = {"n1": (0.0, 0.0, 0.0), "n2": (0.0, 0.0, 0.0), "n3": (2.0, 10.0, 0.0)}
TE = (4.0, 32.0, 4.0)


def test_rule_eq4_picks_lowest_score_that_fits():
    ch = choose([TE], _cands(), FREE, s=4.0, cap=1)
    assert ch.victims == ["b"] and not ch.fallback
    assert "fits alone" in ch.reason and "score 1.000" in ch.reason


def test_s_changes_the_choice():
    # s = 0: sizes only; c is smallest but does not fit (eq. 2), so a (0.816) beats b (1.0)
    assert choose([TE], _cands(), FREE, s=0.0).victims == ["a"]
    # a large s makes b's zero grace period decisive
    assert choose([TE], _cands(), FREE, s=100.0).victims == ["b"]


def test_cap_p_excludes_jobs_preempted_often_enough():
    assert choose([TE], _cands(pre_b=1), FREE, cap=1).victims == ["a"]
    assert choose([TE], _cands(pre_b=1), FREE, cap=2).victims == ["b"]
    none = [Candidate("x", {"n1": A}, size(A, CAP), 0, preemptions=1)]
    ch = choose([TE], none, FREE, cap=1)
    assert ch.victims == [] and "cap P=1" in ch.reason


def test_capped_jobs_still_count_in_the_eq3_maxima():
    # b (the largest job) is capped; a's score must still be divided by b's size
    cands = _cands(pre_b=1, gp=(60, 60, 60))
    ch = choose([TE], cands, FREE, s=0.0, cap=1)
    assert ch.victims == ["a"]
    assert f"score {math.sqrt(0.75) / math.sqrt(1.125):.3f}" in ch.reason


def test_fallback_random_until_it_fits_and_says_so():
    half = (8.0, 64.0, 4.0)
    cands = [Candidate("p", {"n1": half}, size(half, CAP), 0),
             Candidate("q", {"n1": half}, size(half, CAP), 0),
             Candidate("r", {"n2": half}, size(half, CAP), 0)]
    free = {"n1": (16.0, 128.0, 0.0), "n2": (16.0, 128.0, 0.0)}
    te = (4.0, 32.0, 8.0)      # needs a whole node's GPUs: only p and q together free that
    seen = set()
    for seed in range(20):
        ch = choose([te], cands, free, rng=random.Random(seed))
        assert ch.fallback and "fallback" in ch.reason and "no single BE job fits" in ch.reason
        # r's node can never host the TE job, so the random draw is among p and q,
        # and the node's other job follows: exactly the two that make room
        assert sorted(ch.victims) == ["p", "q"]
        assert "random BE job" in ch.reason and "on its node n1" in ch.reason
        seen.add(tuple(ch.victims))
    assert seen == {("p", "q"), ("q", "p")}  # the first victim is random, but seeded
    again = [choose([te], cands, free, rng=random.Random(s)).victims for s in range(20)]
    assert [list(v) for v in again] == [choose([te], cands, free, rng=random.Random(s)).victims for s in range(20)]


def test_fallback_takes_lowest_scores_after_the_random_one():
    q1, q4 = (4.0, 32.0, 1.0), (4.0, 32.0, 4.0)
    cands = [Candidate("big", {"n1": q4}, size(q4, CAP), 600),   # highest score
             Candidate("s1", {"n1": q1}, size(q1, CAP), 0),
             Candidate("s2", {"n1": q1}, size(q1, CAP), 0),
             Candidate("s3", {"n1": (4.0, 32.0, 2.0)}, size((4.0, 32.0, 2.0), CAP), 0)]
    free = {"n1": (16.0, 128.0, 0.0)}
    te = (4.0, 32.0, 4.0)   # needs 4 GPUs; big would fit alone but is capped
    cands[0] = Candidate("big", {"n1": q4}, size(q4, CAP), 600, preemptions=1)
    for seed in range(10):
        ch = choose([te], cands, free, rng=random.Random(seed))
        assert ch.fallback
        freed = sum({"s1": 1, "s2": 1, "s3": 2}[v] for v in ch.victims)
        assert freed >= 4 and "big" not in ch.victims
        # after the random first victim, the rest come in ascending score and stop at fit
        assert freed - {"s1": 1, "s2": 1, "s3": 2}[ch.victims[-1]] < 4


def test_fallback_never_preempts_in_vain():
    cands = [Candidate("p", {"n1": C}, size(C, CAP), 0)]
    ch = choose([(4.0, 32.0, 8.0)], cands, {"n1": (0.0, 0.0, 0.0)})
    assert ch.victims == [] and "would still not make room" in ch.reason


def test_gang_te_counts_pods_on_freed_nodes():
    pod = (4.0, 32.0, 4.0)
    cands = [Candidate("big", {"n1": (16.0, 128.0, 8.0)}, 1.0, 0),
             Candidate("small", {"n2": (4.0, 32.0, 4.0)}, 0.1, 0)]
    free = {"n1": (16.0, 128.0, 0.0), "n2": (0.0, 0.0, 0.0)}
    ch = choose([pod, pod], cands, free, s=0.0)
    assert ch.victims == ["big"]      # two pods fit on n1 alone; small frees room for one


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="weight s must be >= 0"):
        choose([TE], _cands(), FREE, s=-1)
    with pytest.raises(ValueError, match="cap P must be >= 0"):
        fitgpp.FitGppPolicy(cap=-1)
