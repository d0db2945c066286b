"""The restart snapshot (service/snapshot.py): a clean stop stores the engine, the next start
loads it plus the journal's tail, and rebuilds exactly what a full replay of the journal
rebuilds; a snapshot that cannot be trusted is passed over with one log line."""
import logging
import shutil
import sqlite3
from pathlib import Path

import pytest

from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher

SPEC = Path(__file__).with_name("spec_small.yaml")

NOT_USED = "restart snapshot not used"


def service(data, spec=SPEC):
    return SchedulerService(str(spec), data, launcher=NoopLauncher(adopt=True), health=None, tick_seconds=0.05,
                            scheme="hived", preemption_policy="none")


def crash(svc):
    """Gone without a clean stop: no snapshot written (as after kill -9)."""
    svc.stop()
    svc.store.close()
    svc._lockfile.close()
    svc._lockfile = None


def state(svc):
    jobs = {r.job_id: (r.state.value, None if r.placement is None else
                       sorted((p.node, tuple(p.gpus)) for p in r.placement.pods)) for r in svc.eng.jobs()}
    return jobs, {vc: svc.vc(vc)["queue"] for vc in ("vca", "vcb")}


def submit(svc, vc, user, gpus, cls="be"):
    return svc.submit(user, {"vc": vc, "command": "true", "gpus": gpus, "job_class": cls})["id"]


def busy(data):
    """A journal with running and waiting jobs in both VCs, closed cleanly (snapshot written)."""
    svc = service(data)
    running = [submit(svc, vc, user, 4) for vc, user in (("vca", "alice"), ("vca", "alice"), ("vcb", "bob"),
                                                        ("vcb", "bob"))]
    svc.tick()
    svc.tick()
    for gpus, cls in ((4, "be"), (2, "te"), (4, "te"), (2, "be")):
        submit(svc, "vca", "alice", gpus, cls)
    submit(svc, "vcb", "bob", 1)
    svc.tick()
    before = state(svc)
    svc.close()
    return running, before


def without_snapshot(data, copy):
    """A copy of the data directory whose start replays the whole journal."""
    shutil.copytree(data, copy)
    con = sqlite3.connect(copy / "hived.db")
    con.execute("DELETE FROM snapshot")
    con.commit()
    con.close()
    return copy


def replayed_state(tmp_path, spec=SPEC):
    """The state a start that replays the whole journal of tmp_path/data reaches (on a copy)."""
    expected = service(without_snapshot(tmp_path / "data", tmp_path / "full"), spec)
    try:
        return state(expected)
    finally:
        expected.close()


def test_a_clean_restart_loads_the_snapshot_and_places_the_same_next(tmp_path):
    running, before = busy(tmp_path / "data")
    full_dir = without_snapshot(tmp_path / "data", tmp_path / "full")
    fast, full = service(tmp_path / "data"), service(full_dir)
    try:
        assert fast.recovered["snapshot"] is True and full.recovered["snapshot"] is False
        assert fast.recovered["jobs"] == full.recovered["jobs"] == 9
        assert sorted(fast.recovered["adopted"]) == sorted(full.recovered["adopted"]) == sorted(running)
        assert state(fast) == state(full) == before
        for svc in (fast, full):   # half of vca frees: the same waiting jobs start, on the same GPUs
            svc.cancel(running[0], "alice")
            for _ in range(3):
                svc.tick()
        assert state(fast) == state(full) != before
        assert any(state(fast)[0][j][0] == "running" for j in before[1]["vca"])
    finally:
        for svc in (fast, full):
            svc.close()


def _truncate(data):
    con = sqlite3.connect(data / "hived.db")
    con.execute("UPDATE snapshot SET body = substr(body, 1, length(body) / 2)")
    con.commit()
    con.close()
    return SPEC


def _change_a_job(data):
    svc = service(data)
    assert svc.recovered["snapshot"] is True
    svc.cancel(svc.vc("vca")["queue"][-1], "alice")
    svc.tick()
    crash(svc)
    return SPEC


def _another_spec(data):
    other = data.parent / "other.yaml"
    other.write_text(SPEC.read_text() + "# the same cluster, another text\n")
    return other


@pytest.mark.parametrize("spoil, words", [(_truncate, "damaged or truncated"),
                                          (_change_a_job, "older than the journal"),
                                          (_another_spec, "another spec")])
def test_a_snapshot_that_cannot_be_trusted_replays_the_journal_with_one_log_line(tmp_path, caplog, spoil, words):
    busy(tmp_path / "data")
    spec = spoil(tmp_path / "data")
    want = replayed_state(tmp_path, spec)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hived.service"):
        svc = service(tmp_path / "data", spec)
    try:
        said = [r.getMessage() for r in caplog.records if NOT_USED in r.getMessage()]
        assert len(said) == 1 and words in said[0], said
        assert svc.recovered["snapshot"] is False
        assert state(svc) == want
    finally:
        svc.close()
    again = service(tmp_path / "data", spec)   # that clean stop wrote a good one
    try:
        assert again.recovered["snapshot"] is True and state(again) == want
    finally:
        again.close()


def test_submissions_after_the_snapshot_are_the_tail_it_replays(tmp_path):
    busy(tmp_path / "data")
    svc = service(tmp_path / "data")
    new = [submit(svc, "vcb", "bob", 2, "te"), submit(svc, "vca", "alice", 4)]
    crash(svc)
    want_dir = without_snapshot(tmp_path / "data", tmp_path / "full")
    full = service(want_dir)
    try:
        want = state(full)
    finally:
        full.close()
    fast = service(tmp_path / "data")
    try:
        assert fast.recovered["snapshot"] is True
        assert state(fast) == want and set(new) <= set(want[0])
        assert new[1] in fast.vc("vca")["queue"]
    finally:
        fast.close()


def test_an_ended_job_removed_after_the_snapshot_is_forgotten(tmp_path):
    busy(tmp_path / "data")
    svc = service(tmp_path / "data")
    gone = svc.vc("vca")["queue"][-1]
    svc.cancel(gone, "alice")
    svc.tick()
    svc.close()                      # the snapshot holds it, cancelled
    svc = service(tmp_path / "data")
    svc.store.delete_jobs([gone])    # as retention removes an ended job
    crash(svc)
    fast = service(tmp_path / "data")
    try:
        assert fast.recovered["snapshot"] is True
        assert gone not in fast.eng and fast.recovered["jobs"] == 8
    finally:
        fast.close()
