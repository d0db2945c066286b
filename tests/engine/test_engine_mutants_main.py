"""The engine's own module (core/engine.py) asserted where `make mutants MUTANT_SCOPE=engine-main`
found a planted bug that no other test noticed.

Each test drives a real engine on Figure 2's cluster through its public methods; time is the
engine's ``now``, never the wall clock."""
from __future__ import annotations

import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.engine import Engine
from hived.core.spec import load_spec


def _engine(**kw) -> Engine:
    return Engine(load_spec(fig2_spec()), **kw)


class _CappedPolicy:
    """A preemption policy that brings a cap of its own, which the engine refuses."""

    cap = 2

    def choose(self, job, candidates, view, now):
        return []


def test_a_preemption_policy_with_its_own_cap_is_refused_with_where_the_cap_belongs():
    with pytest.raises(ValueError) as e:
        _engine(preemption_policy=_CappedPolicy())
    assert str(e.value) == (
        "preemption_policy: the policy object sets its own cap; the engine's P is "
        "EngineConfig.preemption_cap (or a VC's maxPreemptions): leave the policy's cap unset")


def test_job_ids_the_engine_gives_count_from_j1_and_skip_ids_already_taken():
    eng = _engine()
    assert eng.submit(req(), 0.0) == "j1"
    eng.submit(req(), 0.0, job_id="j2")
    eng.submit(req(), 0.0, job_id="j3")
    assert eng.submit(req(), 0.0) == "j4"
    assert eng.submit(req(), 0.0) == "j5"
    assert eng.job_ids() == ["j1", "j2", "j3", "j4", "j5"]


def test_the_queues_walked_are_known_before_the_first_round_and_after_each():
    eng = _engine()
    assert eng.scanned == set()
    eng.submit(req(gpus=4), 0.0, job_id="a")
    assert kinds(run(eng, 0.0)) == [("start", "a")]
    assert eng.scanned == {"A"}
