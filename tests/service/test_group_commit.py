"""Group commit: submissions made while an fsync runs share the next one, each is
answered only once its commit is on disk, and a failed fsync refuses the
submission and cancels the job."""
import threading

import pytest

from hived.service.degraded import ServiceDegraded
from hived.testing.launcher_noop import NoopLauncher

JOB = {"vc": "vca", "gpus": 1, "command": "true", "job_class": "be"}


def blocking_fsync(store):
    """Wrap the store's WAL fsync: the first call waits for ``release``; records each call's
    commit count at entry."""
    real = store._fsync_wal
    started, release, calls = threading.Event(), threading.Event(), []

    def fsync():
        calls.append(store.commit_ticket)
        if len(calls) == 1:
            started.set()
            assert release.wait(30)
        real()
    store._fsync_wal = fsync
    return started, release, calls


def test_submissions_during_an_fsync_share_the_next_one_and_wait_for_it(make_service):
    svc = make_service(launcher=NoopLauncher(), start=False)
    started, release, calls = blocking_fsync(svc.store)
    answers: dict[int, dict] = {}

    def submit(k):
        answers[k] = svc.submit("alice", dict(JOB, name=f"g{k}"))
    first = threading.Thread(target=submit, args=(0,))
    first.start()
    assert started.wait(30)                  # job 0 is committed, its fsync is held
    base = svc.store.commit_ticket
    others = [threading.Thread(target=submit, args=(k,)) for k in range(1, 6)]
    for t in others:
        t.start()
    # they commit (the service lock is free during an fsync) but none is answered yet
    for _ in range(3000):
        if svc.store.commit_ticket >= base + 5:
            break
        threading.Event().wait(0.01)
    assert svc.store.commit_ticket == base + 5
    assert answers == {}
    release.set()
    for t in [first, *others]:
        t.join(30)
    assert sorted(answers) == [0, 1, 2, 3, 4, 5]
    assert len(calls) == 2                   # one fsync for job 0, one for the five behind it
    assert calls[1] == base + 5
    assert {a["state"] for a in answers.values()} == {"queued"}


def test_a_failed_fsync_refuses_the_submission_and_cancels_the_job(make_service):
    svc = make_service(launcher=NoopLauncher(), start=False)

    def broken():
        raise OSError(5, "Input/output error")
    svc.store._fsync_wal = broken
    with pytest.raises(ServiceDegraded, match="Input/output error"):
        svc.submit("alice", dict(JOB, name="lost"))
    (job,) = svc.list_jobs()
    assert job["name"] == "lost" and job["state"] == "cancelled"
    assert svc.degraded is not None


def test_normal_synchronous_makes_no_fsync_of_its_own(tmp_path):
    from hived.service.store import SqliteStore
    store = SqliteStore(tmp_path / "d", synchronous="NORMAL")
    calls = []
    store._fsync_wal = lambda: calls.append(1)
    with store.transaction():
        store.set_meta("k", "v")
    store.sync_through(store.commit_ticket)
    assert calls == [] and store.get_meta("k") == "v"
    store.close()


def test_closing_the_store_waits_for_an_fsync_in_flight_and_a_later_sync_returns(make_service):
    """The fsync runs outside the store lock; closing during it must not close (and free the
    number of) the WAL descriptor that fsync is using."""
    svc = make_service(launcher=NoopLauncher(), start=False)
    store = svc.store
    started, release, _ = blocking_fsync(store)
    submitter = threading.Thread(target=svc.submit, args=("alice", dict(JOB, name="held")))
    submitter.start()
    assert started.wait(30)
    closer = threading.Thread(target=store.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive()                 # waits for the fsync instead of closing under it
    assert store._wal_fd is not None
    release.set()
    submitter.join(30)
    closer.join(30)
    assert not closer.is_alive() and store._wal_fd is None
    store.sync_through(store.commit_ticket + 1)   # after close: returns, nothing left to sync


def test_a_wal_removed_behind_the_store_fails_each_sync_without_closing_another_files_descriptor(tmp_path):
    """A failed WAL reopen used to leave the closed number recorded; the next sync closed
    it again, by then another file's (here: one the test opens)."""
    import os

    from hived.service.store import JournalWriteError, SqliteStore
    store = SqliteStore(tmp_path / "data")
    try:
        with store.transaction():
            store.set_meta("a", "1")
        wal = store.path.with_name(store.path.name + "-wal")
        os.unlink(wal)
        for attempt in range(2):
            with pytest.raises(JournalWriteError, match="sync failed"):
                with store.transaction():
                    store.set_meta("a", str(attempt))
            bystander = os.open(tmp_path / f"other{attempt}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                with pytest.raises(JournalWriteError):
                    with store.transaction():
                        store.set_meta("b", str(attempt))
                os.fstat(bystander)          # still open: the store closed only its own
            finally:
                os.close(bystander)
    finally:
        store.close()
