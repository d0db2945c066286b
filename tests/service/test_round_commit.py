"""A scheduling round commits under the service's lock but waits for its fsync outside it:
requests go on meanwhile, and nothing the round decided reaches the launcher before the
round's commit is on disk. A failed fsync acts on nothing; the decisions are carried out
once the journal is written again."""
import threading

from test_group_commit import JOB, blocking_fsync

from hived.testing.launcher_noop import NoopLauncher


class RecordingLauncher(NoopLauncher):
    def __init__(self, order: list):
        super().__init__()
        self.order = order

    def launch(self, job_id, request, placement, attempt):
        self.order.append(("launch", job_id))
        super().launch(job_id, request, placement, attempt)


def test_requests_go_on_while_the_rounds_fsync_runs_and_nothing_launches_before_it(make_service):
    order: list = []
    svc = make_service(launcher=RecordingLauncher(order), start=False)
    jid = svc.submit("alice", dict(JOB, name="placed-by-the-round"))["id"]
    started, release, calls = blocking_fsync(svc.store)
    round_ = threading.Thread(target=svc.tick)
    round_.start()
    assert started.wait(30)                       # the round committed; its fsync is held
    seen: dict = {}

    def requests():
        seen["state"] = svc.get_job(jid)["state"]
        seen["listed"] = [j["id"] for j in svc.list_jobs()]
        order.append(("answered while the fsync is held", jid))
    asker = threading.Thread(target=requests)
    asker.start()
    asker.join(10)          # a bound on a hang, not a timing: the old code answers only after the release
    order.append(("fsync released", jid))
    release.set()
    round_.join(30)
    asker.join(30)
    assert not round_.is_alive()
    assert seen["state"] == "placed" and seen["listed"] == [jid]
    assert order == [("answered while the fsync is held", jid), ("fsync released", jid), ("launch", jid)]


def test_a_failed_round_fsync_launches_nothing_until_the_journal_is_written_again(make_service):
    order: list = []
    svc = make_service(launcher=RecordingLauncher(order), start=False)
    jid = svc.submit("alice", dict(JOB, name="waits-for-the-disk"))["id"]
    real = svc.store._fsync_wal

    def broken():
        raise OSError(5, "Input/output error")
    svc.store._fsync_wal = broken
    svc.tick()
    assert order == []                            # decided and committed, never acted on
    assert svc.degraded is not None and "Input/output error" in svc.degraded
    svc.store._fsync_wal = real
    svc.tick()                                    # the journal is written again, then acted on
    assert svc.degraded is None
    assert order == [("launch", jid)]
    svc.tick()
    assert svc.get_job(jid)["state"] == "running"
