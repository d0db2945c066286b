"""Engine hooks for outside changes: progress reports reach the queue policy,
and capacity moved between VCs (cell exchange) re-opens their queues."""
import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.allocator import Allocator
from hived.core.engine import Engine, RequestError
from hived.core.jobs import JobClass
from hived.core.spec import load_spec


def test_progress_reaches_the_policy_hook():
    eng = Engine(fig2_spec(), preemption_policy="none")
    seen = []
    eng.queue_policy.on_progress = lambda rec, now: seen.append((rec.job_id, rec.progress, now))
    j = eng.submit(req("A", 1), 0.0)
    run(eng, 0.0)
    eng.report_progress(j, 3, 10, 5.0)
    assert seen == [(j, (3, 10), 5.0)]
    with pytest.raises(RequestError):       # refused before the hook sees anything
        eng.report_progress(j, 11, 10, 6.0)
    assert len(seen) == 1


def test_capacity_change_retries_queues_and_downgrades_jobs():
    alloc = Allocator(load_spec(fig2_spec()))
    eng = Engine(alloc, preemption_policy="none")
    first = eng.submit(req("B", 4, cls=JobClass.BE, user="bob"), 0.0)
    run(eng, 0.0)
    waiting = eng.submit(req("B", 2, cls=JobClass.BE, user="bob"), 1.0)
    assert run(eng, 1.0) == []               # B's one node is full
    alloc.transfer("A", "B", "NODE", 3, 1)   # what an exchange window start does
    assert run(eng, 2.0) == []               # the engine was not told yet: memo holds
    eng.on_capacity_changed(["A", "B"], [], 2.0)
    assert kinds(run(eng, 2.0)) == [("start", waiting)]
    assert not eng.job(waiting).opportunistic
    # the borrowed node goes back while `waiting` runs on it: booked as opportunistic
    from hived.core.exchange import Cells, give_back
    down = give_back(alloc, "B", "A", Cells("NODE", 3, 1))
    eng.on_capacity_changed(["A", "B"], down, 3.0)
    assert down == [waiting] and eng.job(waiting).opportunistic and eng.job(waiting).placement.opportunistic
    assert not eng.job(first).opportunistic
    eng.on_finished(waiting, 4.0, 0)         # its release is booked as opportunistic: counters stay sane
    assert eng.books.vc_used["B"][eng.job(first).bound_chain] == 4
    with pytest.raises(RequestError, match="unknown VC"):
        eng.on_capacity_changed(["nope"], [], 5.0)
