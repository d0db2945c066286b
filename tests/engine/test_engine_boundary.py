"""The engine's boundary: records carry only declared fields, the queue key is one of them
and is journaled, a restore rebuilds the same queue, and nothing outside the engine
modules reaches into its job table."""
from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest
from engine_helpers import fig2_spec, kinds, req, run

from hived.core.engine import Engine, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import ACTIVE, HOLDING, TERMINAL, DecisionKind, JobClass, JobState
from hived.core.policies.fifo import FifoPolicy

REPO = Path(__file__).resolve().parents[2]
FOLDERS = ["core", "service", "cli", "reports", "jupyter_ext", "mlflow_plugin", "k8s", "testing", "benchmarks"]
# the engine's undeclared attributes of old: nobody may read or write them any more
OLD_RECORD_ATTRS = {"_seq", "_memo", "_chain", "_chain_bound", "_default", "_policy_note"}


def _preempted_behind_its_preemptor() -> Engine:
    """VC A (4 GPUs): be1 runs, te1 preempts it, be2 and be3 wait. be1 goes back to the
    queue right behind te1 (a key between two others), nothing placed yet."""
    eng = Engine(fig2_spec(), queue_policy=FifoPolicy(te_first=False))
    be1 = eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="be1")
    run(eng, 0.0)
    eng.submit(req(gpus=4, cls=JobClass.TE), 1.0, job_id="te1")
    for j in ("be2", "be3"):
        eng.submit(req(gpus=4, cls=JobClass.BE), 1.0, job_id=j)
    eng.submit(req(vc="B", gpus=2, cls=JobClass.BE, user="bob"), 1.0, job_id="b1")
    assert kinds(run(eng, 1.0))[0] == ("preempt", be1)
    eng.on_preempted(be1, 2.0)
    return eng


def _restart(eng: Engine) -> Engine:
    """A new engine from the records as the journal holds them (JSON)."""
    new = Engine(fig2_spec(), queue_policy=FifoPolicy(te_first=False))
    for rec in eng.restore_order():
        new.restore(JobRecord.from_dict(json.loads(json.dumps(rec.to_dict()))))
    return new


def test_restore_rebuilds_the_same_queue_and_the_same_next_placements():
    eng = _preempted_behind_its_preemptor()
    assert eng.queue("A") == ["te1", "be1", "be2", "be3"]
    keys = [eng.job(j).queue_key for j in eng.queue("A")]
    assert keys == sorted(keys) and len(set(keys)) == 4   # strictly ordered, no tie to break
    again = _restart(eng)
    assert again.queue("A") == eng.queue("A") and again.queue("B") == eng.queue("B")
    assert [again.job(j).queue_key for j in again.queue("A")] == keys
    # both go on the same way: same decisions, round after round, as jobs finish
    for t in (3.0, 4.0, 5.0, 6.0, 7.0):
        a, b = run(eng, t), run(again, t)
        assert kinds(a) == kinds(b)
        for e in (eng, again):
            for d in a:
                if d.kind is DecisionKind.START:
                    e.on_finished(d.job_id, t + 0.5, 0)
    def ended(e):
        return sorted((r.ended, r.job_id) for r in e.jobs(state="succeeded"))
    assert ended(eng) == ended(again) and [j for _, j in ended(eng)] == ["te1", "be1", "be2", "be3"]
    # a submission after the restart queues behind every restored job
    for e in (eng, again):
        e.submit(req(gpus=4, cls=JobClass.BE), 8.0, job_id="late")
    assert again.queue("A") == eng.queue("A") and again.queue("A")[-1] == "late"


def test_records_hold_only_declared_fields():
    eng = _preempted_behind_its_preemptor()
    run(eng, 3.0)
    declared = {f.name for f in dataclasses.fields(JobRecord)}
    for rec in eng.jobs():
        assert set(vars(rec)) <= declared, set(vars(rec)) - declared
    d = eng.job("be1").to_dict()
    assert d["queue_key"] == eng.job("be1").queue_key
    assert not {"chain", "default_share", "policy_note"} & set(d)   # resolved again at restore


def test_reading_the_engine():
    eng = _preempted_behind_its_preemptor()
    assert eng.find("nope") is None and "nope" not in eng and "te1" in eng
    with pytest.raises(RequestError, match="unknown job 'nope'"):
        eng.job("nope")
    assert eng.job_ids() == ["be1", "te1", "be2", "be3", "b1"] and len(eng) == 5
    assert [r.job_id for r in eng.jobs(states=HOLDING)] == ["b1"]
    assert [r.job_id for r in eng.holding("B")] == ["b1"] and eng.holding("A") == []
    assert eng.counts() == {("A", "queued"): 4, ("B", "running"): 1}
    assert eng.head("A", 2.0).job_id == "te1"
    with pytest.raises(RequestError, match="only ended jobs"):
        eng.forget("be2")
    eng.cancel("be3", 2.0, "alice")
    eng.forget("be3")
    assert "be3" not in eng and eng.queue("A") == ["te1", "be1", "be2"]


def test_state_sets_are_one_partition():
    assert HOLDING | TERMINAL | {JobState.QUEUED} == set(JobState)
    assert not HOLDING & TERMINAL and ACTIVE == set(JobState) - TERMINAL
    assert all(s.terminal == (s in TERMINAL) and s.holding == (s in HOLDING) for s in JobState)


def _offences(path: Path, root: Path = REPO) -> list[str]:
    rel = str(path.relative_to(root))
    engine_module = rel.startswith("core/engine") and path.suffix == ".py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), rel)):
        if isinstance(node, ast.Attribute):
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if node.attr == "_jobs" and not on_self and not engine_module:
                out.append(f"{rel}:{node.lineno}: ._jobs of {ast.unparse(node.value)}")
            if node.attr in OLD_RECORD_ATTRS and not on_self:
                out.append(f"{rel}:{node.lineno}: .{node.attr} of {ast.unparse(node.value)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2:
            name = node.args[1]
            if isinstance(name, ast.Constant) and name.value in OLD_RECORD_ATTRS | {"_jobs"}:
                out.append(f"{rel}:{node.lineno}: {node.func.id}(..., {name.value!r})")
    return sorted(out)


def test_nothing_outside_the_engine_reaches_into_its_job_table():
    files = [f for folder in FOLDERS for f in sorted((REPO / folder).rglob("*.py"))]
    assert len(files) > 100
    assert [o for f in files for o in _offences(f)] == []


def test_the_walk_finds_what_it_forbids(tmp_path):
    bad = tmp_path / "service" / "x.py"
    bad.parent.mkdir()
    bad.write_text("def f(svc, rec):\n    svc.eng._jobs.get('j')\n    return getattr(rec, '_seq', 0)\n")
    assert _offences(bad, tmp_path) == ["service/x.py:2: ._jobs of svc.eng", "service/x.py:3: getattr(..., '_seq')"]
    mine = tmp_path / "core" / "engine_x.py"
    mine.parent.mkdir()
    mine.write_text("def f(eng):\n    return eng._jobs\n")
    assert _offences(mine, tmp_path) == []


def test_lanes_are_a_read_only_view_of_the_queue_the_service_may_count():
    eng = Engine(fig2_spec(), queue_policy=FifoPolicy(te_first=True))
    eng.submit(req(gpus=4, cls=JobClass.BE), 0.0, job_id="be1")
    eng.submit(req(gpus=4, cls=JobClass.TE), 0.0, job_id="te1")
    te, rest = eng.lanes("A")
    assert list(te) == ["te1"] and list(rest) == ["be1"] and "be1" in rest
    with pytest.raises(TypeError):
        rest["x"] = None          # the service reads the lanes; only the engine changes them
    eng.cancel("be1", 1.0, "alice")
    assert len(rest) == 0         # a live view, not a copy
    assert eng.lanes("no-such-vc") is None
