"""Survivors of the engine's mutation run (docs/engine.md, "Mutation testing"): the version
counters that tell a remembered failed attempt it is out of date. Each test drives the
engine through its public methods."""
from __future__ import annotations

from engine_helpers import eight_gpu_spec, fig2_spec, kinds, quota_engine, req, run

from hived.core.allocator import Allocator
from hived.core.engine import Engine
from hived.core.jobs import JobClass, JobState
from hived.core.spec import load_spec


def _other_node(eng: Engine, job_id: str) -> str:
    mine = eng.job(job_id).placement.pods[0].node
    return next(n for n in ("node1", "node2") if n != mine)


def test_a_job_that_failed_beside_bad_hardware_is_tried_again_once_it_is_healthy():
    """HiveD keeps a failed attempt per VC version: marking hardware healthy must move every
    VC's version on, or A's job stays remembered as failed next to a healthy node."""
    eng = Engine(load_spec(fig2_spec()), preemption_policy="none")
    eng.submit(req("B", 4, cls=JobClass.BE, user="bob"), 0.0, job_id="b")
    run(eng, 0.0)
    bad = _other_node(eng, "b")
    eng.set_health(bad, None, False, 1.0)
    eng.submit(req("A", 4), 2.0, job_id="a")
    assert run(eng, 2.0) == [] and eng.job("a").state is JobState.QUEUED
    eng.set_health(bad, None, True, 3.0)
    assert kinds(run(eng, 3.0)) == [("start", "a")]
    assert eng.job("a").placement.pods[0].node == bad


def test_under_gpu_quotas_a_job_is_tried_again_once_hardware_is_healthy():
    """The quota baseline shares GPUs across VCs, so its failed attempts are kept per global
    version: the health change must move it on."""
    eng = quota_engine(eight_gpu_spec(2, {"A": 8, "B": 8}))
    eng.submit(req("B", 8, cls=JobClass.BE, user="bob"), 0.0, job_id="b")
    run(eng, 0.0)
    bad = next(n for n in ("n0000", "n0001") if n != eng.job("b").placement.pods[0].node)
    eng.set_health(bad, None, False, 1.0)
    eng.submit(req("A", 8), 2.0, job_id="a")
    assert run(eng, 2.0) == []
    eng.set_health(bad, None, True, 3.0)
    assert kinds(run(eng, 3.0)) == [("start", "a")]


def test_a_vc_that_borrows_a_node_tries_its_waiting_job_again():
    """A's one node is busy, so A's next job waits; once A borrows B's idle node (a cell
    exchange), the capacity change must make the engine try it again."""
    alloc = Allocator(load_spec(fig2_spec()))
    eng = Engine(alloc, preemption_policy="none")
    eng.submit(req("A", 4), 0.0, job_id="first")
    run(eng, 0.0)
    eng.on_finished("first", 1.0, 0)                  # a release in A: A's version moves once
    eng.submit(req("A", 4), 2.0, job_id="busy")
    eng.submit(req("A", 4), 2.0, job_id="next")
    assert kinds(run(eng, 2.0)) == [("start", "busy")]
    alloc.transfer("B", "A", "NODE", 3, 1)
    eng.on_capacity_changed(["A", "B"], [], 3.0)
    assert kinds(run(eng, 3.0)) == [("start", "next")]

