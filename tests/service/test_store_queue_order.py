"""A restart rebuilds each VC's queue in the same order from the journal (the queue key is a
field of every job's record) and starts the same jobs next."""
import time
from pathlib import Path

from hived.service.scheduler import SchedulerService

SPEC = Path(__file__).with_name("spec_small.yaml")   # vca: 8 GPUs


def test_restart_keeps_the_queue_order_and_the_next_starts(tmp_path):
    data = tmp_path / "data"

    def service():
        return SchedulerService(str(SPEC), data, tick_seconds=0.05, scheme="hived", preemption_policy="none")

    svc = service()
    # two 4-GPU jobs fill vca; the rest wait
    first, second = (svc.submit("alice", {"vc": "vca", "command": "sleep 60", "gpus": 4, "job_class": "be"})["id"]
                     for _ in range(2))
    svc.tick()
    waiting = [svc.submit("alice", {"vc": "vca", "command": "true", "gpus": 4, "job_class": cls})["id"]
               for cls in ("be", "te", "be", "te", "be")]
    svc.tick()
    order = svc.vc("vca")["queue"]
    assert sorted(order) == sorted(waiting) and order[:2] == [waiting[1], waiting[3]]   # TE first
    keys = {d["job_id"]: d["queue_key"] for d in svc.store.load_jobs()}
    assert all(keys[j] is not None for j in order)   # journaled with each record
    svc.close()

    again = service()
    try:
        assert again.vc("vca")["queue"] == order
        assert {first, second} <= set(again.recovered["adopted"])
        again.cancel(first, "alice")   # one socket free: the waiting jobs run one after another
        deadline = time.time() + 30
        while any(again.get_job(j)["state"] != "succeeded" for j in waiting):
            assert time.time() < deadline, [again.get_job(j)["state"] for j in waiting]
            again.tick()
            time.sleep(0.02)
        started = sorted(waiting, key=lambda j: again.eng.job(j).first_started)
        assert started == order
    finally:
        again.stop(cancel_jobs=True, timeout=5)
        again.close()
