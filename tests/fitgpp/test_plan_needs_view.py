"""preemption_order.plan: a policy asked without the cluster view is a clear error."""
from types import SimpleNamespace as NS

import pytest

from hived.core.jobs import JobClass, JobRequest, JobState, PodGroup
from hived.core.policies import preemption_order
from hived.core.policies.fitgpp import FitGppPolicy


def _rec(jid: str, cls: JobClass, gpus: int) -> NS:
    req = JobRequest(user="u", vc="vc0", job_class=cls, groups=[PodGroup(1, gpus)])
    return NS(job_id=jid, request=req, preemptions=0, state=JobState.RUNNING, started=None)


def test_plan_without_view_names_the_missing_view():
    te = _rec("t", JobClass.TE, 4)
    running = [_rec("a", JobClass.BE, 4)]
    with pytest.raises(ValueError, match="^view: the preemption policy needs the cluster view"):
        preemption_order.plan(te, fits_without_policy=False, running=running, policy=FitGppPolicy())


def test_plan_without_view_is_fine_when_the_policy_is_not_asked():
    te = _rec("t", JobClass.TE, 4)
    plan = preemption_order.plan(te, opportunistic_victims=["o"], fits_without_policy=True,
                                 running=[_rec("a", JobClass.BE, 4)], policy=FitGppPolicy())
    assert plan.victims == ["o"]
