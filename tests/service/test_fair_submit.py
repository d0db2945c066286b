"""One team flooding the service with submissions does not make another team's submission
wait behind all of its own: submissions reach the service's lock taking the VCs in turn."""
import threading

from test_group_commit import JOB

from hived.service.fair_queue import FairGate
from hived.testing.launcher_noop import NoopLauncher


def wait_for(cond, what: str) -> None:
    for _ in range(3000):
        if cond():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"never happened: {what}")


def test_another_vcs_submission_goes_after_one_of_the_flooders_not_all(make_service):
    svc = make_service(launcher=NoopLauncher(), start=False)
    done: list[str] = []

    def submit(user, vc, name):
        svc.submit(user, dict(JOB, vc=vc, name=name))
        done.append(name)
    threads = []
    with svc._lock:     # a round holds the lock; meanwhile the flood piles up, then bob comes
        for k in range(4):
            threads.append(threading.Thread(target=submit, args=("alice", "vca", f"flood-{k}")))
            threads[-1].start()
            wait_for(lambda k=k: svc._gate.busy and svc._gate.waiting == k, f"flood-{k} holds or waits")
        threads.append(threading.Thread(target=submit, args=("bob", "vcb", "bob")))
        threads[-1].start()
        wait_for(lambda: svc._gate.waiting == 4, "bob waits")
    for t in threads:
        t.join(30)
    stored = [j["name"] for j in sorted(svc.list_jobs(), key=lambda j: int(j["id"].lstrip("j")))]
    assert stored == ["flood-0", "bob", "flood-1", "flood-2", "flood-3"]
    assert sorted(done) == sorted(stored)


def test_the_gate_takes_vcs_in_turn_and_each_vcs_in_order():
    gate = FairGate()
    order: list[str] = []
    release = threading.Event()

    def hold():
        with gate.turn("a"):
            order.append("a0")
            release.wait(30)
    first = threading.Thread(target=hold)
    first.start()
    wait_for(lambda: order == ["a0"], "a0 holds")

    def enter(vc, name):
        with gate.turn(vc):
            order.append(name)
    waiting = []
    for vc, name in (("a", "a1"), ("a", "a2"), ("a", "a3"), ("b", "b1"), ("c", "c1"), ("b", "b2")):
        waiting.append(threading.Thread(target=enter, args=(vc, name)))
        waiting[-1].start()
        queued = len(waiting)
        wait_for(lambda queued=queued: gate.waiting == queued, f"{name} waits")
    release.set()
    for t in [first, *waiting]:
        t.join(30)
    assert order == ["a0", "b1", "c1", "a1", "b2", "a2", "a3"]
    assert gate.waiting == 0
    with gate.turn("a"):       # free again: taken at once
        order.append("again")
