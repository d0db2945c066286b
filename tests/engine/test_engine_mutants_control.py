"""Job control (core/engine_control.py) asserted where `make mutants MUTANT_SCOPE=engine-control`
found a planted bug that no other test noticed.

Each test drives a real engine on Figure 2's cluster through its public methods; time is the
engine's ``now``, never the wall clock."""
from __future__ import annotations

import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.engine import Engine, RequestError
from hived.core.jobs import JobState
from hived.core.spec import load_spec


def _engine() -> Engine:
    return Engine(load_spec(fig2_spec()))


@pytest.mark.parametrize("limit, said", [
    (3600.0, "1h"), (7200.0, "2h"), (5400.0, "90m"), (3660.0, "61m"), (60.0, "1m"), (120.0, "2m"),
    (90.0, "90s"), (30.0, "30s"), (1.5, "1.5s"), (59.6, "1m"),
])
def test_the_time_limit_is_named_in_the_largest_whole_unit(limit, said):
    eng = _engine()
    eng.submit(req(time_limit=limit, grace_period=5.0), 0.0, job_id="j")
    run(eng, 0.0)
    ds = run(eng, limit)
    assert kinds(ds) == [("preempt", "j")] and ds[0].reason == f"time limit {said} reached"
    eng.on_finished("j", limit + 1.0, -15)
    assert eng.job("j").last_error == f"time limit {said} reached"
