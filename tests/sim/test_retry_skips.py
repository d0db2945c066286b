"""The retries the simulator skips change no result (issue 29).

Two skips: the engine does not ask again for a guaranteed placement that failed because no
cell of the VC held the job's largest pod, until the VC releases cells (``Engine._attempt``);
the guarantee check does not measure a VC's free cells again for the same head until the VC's
version moves (``safety.vc_room``'s memo). Both must leave every row and the summary as they
were, and must not keep a job waiting once something it could use was freed.
"""
from __future__ import annotations

from typing import Any

import pytest

from hived.core.engine import Engine
from hived.core.jobs import JobClass, JobRequest, JobState, PodGroup
from hived.core.sim import simulate as sim_mod
from hived.core.sim.cluster import node_spec
from hived.core.sim.safety import blocked_heads
from hived.core.sim.schemes import build_engine, size_cluster
from hived.core.sim.traces import PHILLY_DIR, read_philly


def _run(scheme: str, jobs: int, skips: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any], int]:
    """(rows, summary without timings, guaranteed placements asked) of the first ``jobs`` Philly jobs."""
    tr = read_philly(PHILLY_DIR, limit=jobs)
    asked = [0]
    real_try = Engine.try_place
    real_check = sim_mod.blocked_heads

    def counting(self: Engine, rec: Any, opportunistic: bool) -> Any:
        asked[0] += not opportunistic
        return real_try(self, rec, opportunistic)

    with monkeypatch.context() as m:
        m.setattr(Engine, "try_place", counting)
        if not skips:
            m.setattr(Engine, "_fails_untouched", lambda self, rec: False)
            m.setattr(sim_mod, "blocked_heads", lambda eng, now, vcs=None, memo=None: real_check(eng, now, vcs))
        res = sim_mod.simulate(tr, scheme, cells="node", sizing=size_cluster(tr, 0.9))
    summary = {k: v for k, v in res.summary().items() if k not in ("wall_s", "jobs_per_s")}
    return res.rows, summary, asked[0]


@pytest.mark.parametrize("scheme", ["hived", "quota"])
def test_philly_replays_the_same_with_the_skips_off(scheme, monkeypatch):
    rows_on, summary_on, asked_on = _run(scheme, 4000, True, monkeypatch)
    rows_off, summary_off, asked_off = _run(scheme, 4000, False, monkeypatch)
    assert summary_on == summary_off
    assert rows_on == rows_off
    assert summary_on["started"] > 3000 and summary_on["guarantee_breach_jobs"] == 0
    if scheme == "hived":
        assert asked_on < asked_off      # the skip did skip: the same replay asked fewer placements
    else:
        assert asked_on == asked_off     # the quota baseline's VCs are not isolated: no skip there


def _fragmented() -> tuple[Engine, list[tuple[str, bool]], dict[str, str]]:
    """VC A of two 8-GPU nodes, each half used (8 GPUs free, no whole node), VC B's one node busy,
    and A's head ``a2`` (one 8-GPU pod) waiting, as the simulator builds them; every placement
    asked from then on is logged."""
    eng = build_engine("hived", node_spec(3, {"A": 16, "B": 8}))
    asked: list[tuple[str, bool]] = []
    real = eng.alloc.place

    def place(owner: str, vc: str, pod_gpus: list[int], **kw: Any) -> Any:
        asked.append((owner, bool(kw.get("opportunistic"))))
        return real(owner, vc, pod_gpus, **kw)

    eng.alloc.place = place  # type: ignore[method-assign]
    p, q, b1 = _start(eng, 0.0, ("A", 4), ("A", 4), ("B", 8))   # p and q share one of A's nodes
    (r,) = _start(eng, 1.0, ("A", 4))                           # r splits A's other node
    eng.on_finished(p, 2.0, 0)
    assert eng.step(2.0) == [] and eng.vc_free("A") == 8
    asked.clear()
    (a2,) = _start(eng, 3.0, ("A", 8))
    assert eng.job(a2).state is JobState.QUEUED
    assert asked == [(a2, False)]                  # A's cells were asked; nothing borrowable: B is busy
    asked.clear()
    return eng, asked, {"q": q, "r": r, "b1": b1, "a2": a2}


def _start(eng: Engine, now: float, *jobs: tuple[str, int]) -> list[str]:
    ids = [eng.submit(JobRequest(user="u", vc=vc, job_class=JobClass.BE, groups=[PodGroup(1, gpus)],
                                 allow_opportunistic=True), now) for vc, gpus in jobs]
    for d in eng.step(now):
        eng.on_started(d.job_id, now)
    return ids


def test_a_cell_freed_in_another_vc_wakes_a_waiting_head_at_once():
    eng, asked, j = _fragmented()
    eng.on_finished(j["b1"], 4.0, 0)                 # B's node is free: A may borrow it
    decisions = eng.step(4.0)
    assert [d.job_id for d in decisions] == [j["a2"]]
    assert decisions[0].placement is not None and decisions[0].placement.opportunistic
    # A released nothing since: its own cells were not asked again, only the borrowed node
    assert asked == [(j["a2"], True)]


def test_a_cell_freed_in_its_own_vc_is_asked_for_again():
    eng, asked, j = _fragmented()
    eng.on_finished(j["q"], 4.0, 0)                  # A's first node is whole again
    decisions = eng.step(4.0)
    assert [d.job_id for d in decisions] == [j["a2"]]
    assert decisions[0].placement is not None and not decisions[0].placement.opportunistic
    assert asked == [(j["a2"], False)]


def test_the_guarantee_check_measures_a_vc_again_once_it_released_cells():
    eng, _, j = _fragmented()
    memo: dict[str, tuple[object, bool]] = {}
    assert blocked_heads(eng, 3.0, ["A"], memo) == []     # 8 GPUs free in A, but no whole node
    assert memo["A"][1] is False
    eng.on_finished(j["q"], 4.0, 0)                        # no round yet: a2 now fits A and waits
    assert blocked_heads(eng, 4.0, ["A"], memo) == [j["a2"]]
