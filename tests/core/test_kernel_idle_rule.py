"""The idle-release rule on its own (hived.core.kernel_idle): only running kernel jobs of VCs
with a timeout, counted from the later of their start and their last reported activity."""
from __future__ import annotations

from hived.core.engine_records import JobRecord
from hived.core.jobs import JobRequest, JobState
from hived.core.kernel_idle import idle_kernels, release_reason


def rec(job_id, vc="research", kernel=True, state=JobState.RUNNING, started=100.0, cancelling=False):
    r = JobRecord(job_id, JobRequest(user="alice", vc=vc, command="x", labels={"kernel": "k"} if kernel else {}),
                  state=state, started=started)
    r.cancel_requested = cancelling
    return r


def test_released_at_the_timeout_from_start_or_last_activity_whichever_is_later():
    jobs = [rec("a"), rec("b"), rec("c", started=150.0)]
    timeouts = {"research": 60.0}
    assert idle_kernels(jobs, timeouts, {}, 159.9) == []
    assert idle_kernels(jobs, timeouts, {"b": 120.0}, 160.0) == [("a", release_reason("research", 60.0))]
    assert [j for j, _ in idle_kernels(jobs, timeouts, {"b": 120.0}, 210.0)] == ["a", "b", "c"]


def test_never_released_without_a_timeout_or_when_not_a_running_kernel():
    jobs = [rec("plain", kernel=False), rec("queued", state=JobState.QUEUED, started=None),
            rec("leaving", cancelling=True), rec("other", vc="product")]
    assert idle_kernels(jobs, {"research": 1.0, "product": None}, {}, 10_000.0) == []


def test_the_reason_names_the_timeout_and_the_vc_and_starts_with_released():
    assert release_reason("research", 600.0).startswith(
        "released: the kernel ran no cell for 600 s (kernelIdleTimeout of VC research)")
