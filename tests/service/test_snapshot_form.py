"""The restart snapshot's body (service/snapshot.py): job records in their lean pickled form
(core/engine_records.py ``lean_reducer``) come back with every field as it was, values shared
within a dump stay apart where they differ in type or sign, and a body written by other code
(another ``hived.core``) is never read."""
import dataclasses
import logging
import pickle
import shutil
from pathlib import Path

from test_snapshot import NOT_USED, SPEC, busy, replayed_state, service, state

from hived.core.engine_records import RECORD_FIELDS, REQUEST_FIELDS, JobRecord, lean_record
from hived.core.jobs import Affinity, JobClass, JobRequest, JobState, Placement, PodGroup, PodPlacement
from hived.service import snapshot
from hived.service.admission import AdmissionControl, journal_bytes
from hived.service.scheduler import SchedulerService
from hived.testing.launcher_noop import NoopLauncher


def full_record(job_id="j7") -> JobRecord:
    """A record whose every field, and every field of its request, is set away from its default."""
    where = Placement("DGX", (PodPlacement(0, "node-1", (0, 1), ("node-1/0", "node-1/1")),
                              PodPlacement(1, "node-2", (3,), ("node-2/3",))), opportunistic=True)
    request = JobRequest(
        user="ada", vc="vca", command=["python", "train.py", "--lr=0.1"], job_class=JobClass.BE,
        groups=[PodGroup(2, 1, None, 4.0, 16.0), PodGroup(1, 0, "DGX.NODE", 2, None)], chain="DGX",
        affinity=Affinity.SOFT, grace_period=30.0, allow_opportunistic=True, name="sweep-3",
        env={"SEED": "3", "É": "\udcff"}, workdir="/w", duration=60.0, estimate=90.0, max_retries=2,
        labels={"team": "nlp"}, k8s_template={"spec": {"nodeSelector": {"a": "b"}}}, time_limit=3600.0,
        after=["j1", "j2"])
    rec = JobRecord(
        job_id=job_id, request=request, state=JobState.PREEMPTING, submitted=1.5, started=2.5,
        first_started=2.0, ended=9.0, placement=where,
        history=[(1.5, "queued", "submitted"), (2, "running", "started")],
        preemptions=1, attempts=2, failures=1, failure_class="oom", exit_code=137, opportunistic=True,
        pod_demands=[(4.0, 16.0, 1.0), (2, 8, 0)], pod_gpus=[1, 0], want_level=2, level=3, relax_at=7.0,
        relaxations=1, not_before=3.0, queued_since=4.0, queued_time=0.5, grace_deadline=8.0, killed=True,
        started_pending=True, cancel_requested=True, waiting_for=["j3"], policy_victims=["j4"], run_time=5.0,
        progress=(1.0, 4.0), reason="preempted", gpus_preempted=2, last_error="Killed", wait_reason="waits",
        queue_key=-2.5, limit_at=99.0, timed_out=True, held_by="bob", last_placement=where, chain="DGX",
        default_share=False, policy_note="no victims", epoch=6)
    for f in dataclasses.fields(JobRecord):   # a field added later must be set here too
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(rec, f.name) != default, f"full_record leaves {f.name} at its default"
    for f in dataclasses.fields(JobRequest):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(request, f.name) != default, f"full_record leaves request.{f.name} at its default"
    return rec


def typed(value):
    """``value`` with the type of every part spelled out: 1 and 1.0, 0.0 and -0.0 differ."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [typed(v) for v in value])
    if isinstance(value, dict):
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, [(f.name, typed(getattr(value, f.name))) for f in dataclasses.fields(value)])
    if isinstance(value, float):
        return ("float", value.hex())
    return (type(value).__name__, value)


def round_trip(records, lean=True):
    body = snapshot.dumps(records)
    assert (lean_record.__name__.encode() in body) is lean   # the lean form, or the dataclass's own
    return pickle.loads(body)


def test_a_record_with_every_field_set_comes_back_field_for_field():
    rec = full_record()
    [back] = round_trip([rec])
    assert type(back) is JobRecord and type(back.request) is JobRequest
    assert list(vars(back)) == list(RECORD_FIELDS) and list(vars(back.request)) == list(REQUEST_FIELDS)
    for name in RECORD_FIELDS:
        assert typed(getattr(back, name)) == typed(getattr(rec, name)), name
    assert back.placement is back.last_placement   # one object before, one after
    assert back.to_dict() == rec.to_dict()


def test_a_record_at_its_defaults_comes_back_with_its_own_lists():
    recs = [JobRecord(job_id=f"j{i}", request=JobRequest(user="ada", vc="vca")) for i in range(2)]
    a, b = round_trip(recs)
    for name in RECORD_FIELDS:
        assert typed(getattr(a, name)) == typed(getattr(recs[0], name)), name
    a.history.append((1.0, "queued", "x"))
    a.request.env["K"] = "V"
    a.request.groups.append(PodGroup())
    assert b.history == [] and b.request.env == {} and len(b.request.groups) == 1


def test_shared_values_never_merge_what_differs_in_type_or_sign():
    """Equal history entries, demands and pod groups are pickled once; 1 and 1.0, 0.0 and -0.0
    are equal in Python but not the same record."""
    recs = []
    for i, (t, demand, cpus) in enumerate([(5, (1, 2, 1), 1), (5.0, (1.0, 2.0, 1.0), 1.0),
                                           (0.0, (0.0, 2.0, 1.0), 0.0), (-0.0, (-0.0, 2.0, 1.0), -0.0),
                                           (5.0, (1.0, 2.0, 1.0), 1.0)]):
        req = JobRequest(user="ada", vc="vca", command=["run", str(i)], groups=[PodGroup(1, 1, None, cpus)])
        recs.append(JobRecord(job_id=f"j{i}", request=req, history=[(t, "queued", "submitted")],
                              pod_demands=[demand]))
    back = round_trip(recs)
    for was, now in zip(recs, back):
        assert typed(now.history) == typed(was.history)
        assert typed(now.pod_demands) == typed(was.pod_demands)
        assert typed(now.request.groups) == typed(was.request.groups)
    assert back[1].history[0] is back[4].history[0] and back[1].request.groups[0] is back[4].request.groups[0]
    assert back[1].request.user is back[4].request.user


def test_a_record_with_an_attribute_beyond_its_fields_keeps_it():
    rec = full_record()
    rec.note_of_a_plugin = "kept"   # not a field: the plain dataclass form carries it
    [back] = round_trip([rec], lean=False)
    assert back.note_of_a_plugin == "kept" and back.to_dict() == rec.to_dict()


def test_journal_bytes_rebuilt_at_start_are_those_counted_at_submission():
    reqs = [JobRequest(user="ada", vc="vca", command=["python", "a.py"], name="n"),
            JobRequest(user="ada", vc="vca", command="echo é", env={"K": "ü"}),
            JobRequest(user="bob", vc="vca", command=["x"], env={"S": "\udcff"}),
            JobRequest(user="bob", vc="vcb", command="")]
    for r in reqs:
        command = r.command if isinstance(r.command, str) else "\0".join(r.command)
        text = command + r.name + "".join(k + v for k, v in r.env.items())
        assert journal_bytes(r) == len(text.encode("utf-8", "surrogatepass"))
    one_by_one, at_once = AdmissionControl(), AdmissionControl()
    for i, r in enumerate(reqs):
        one_by_one.add(f"j{i}", r)
    at_once.rebuild([JobRecord(job_id=f"j{i}", request=r) for i, r in enumerate(reqs)])
    assert (at_once._bytes, at_once._vc_bytes, at_once._user_bytes) == (
        one_by_one._bytes, one_by_one._vc_bytes, one_by_one._user_bytes)


def test_a_snapshot_written_by_other_code_is_refused(tmp_path, monkeypatch, caplog):
    """The same journal, stopped by a hived whose ``hived.core`` differs (here: one line added to
    the job records' module), then started by this one: its body is never unpickled."""
    other = tmp_path / "other"
    here = Path(snapshot.__file__).resolve().parent.parent
    shutil.copytree(here / "core", other / "core", ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "core" / "engine_records.py", "a") as f:
        f.write("# a field more, another order: another build\n")
    assert snapshot.code_digest(other) != snapshot.code_digest()
    ours = snapshot.code_digest
    with monkeypatch.context() as m:
        m.setattr(snapshot, "code_digest", lambda: ours(other))
        busy(tmp_path / "data")   # its clean stop writes the other build's snapshot
    unpickled, loads = [], pickle.loads
    monkeypatch.setattr(snapshot.pickle, "loads", lambda body: unpickled.append(body) or loads(body))
    want = replayed_state(tmp_path)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hived.service"):
        svc = service(tmp_path / "data")
    try:
        said = [r.getMessage() for r in caplog.records if NOT_USED in r.getMessage()]
        assert len(said) == 1 and "hived build" in said[0], said
        assert svc.recovered["snapshot"] is False and state(svc) == want
        assert unpickled == []
    finally:
        svc.close()


class JournalsFirst(SchedulerService):
    """A service whose ``_recover`` first writes to the journal, as the Kubernetes one journals
    what the cluster says (k8s/service.py): here, the cancel of the last queued job of vca."""

    snapshot_early = False

    def _recover(self):
        last = max((d for d in self.store.load_jobs() if d["state"] == "queued" and d["request"]["vc"] == "vca"),
                   key=lambda d: d["queue_key"])
        last.update(state="cancelled", ended=self.clock())
        self.store.update_job(last, self.clock())
        self.cancelled = last["job_id"]
        return super()._recover()


def test_a_service_that_journals_before_it_recovers_reads_the_snapshot_after(tmp_path):
    """The snapshot is read after that write: it is found older than the journal and the start
    replays the journal, with the job cancelled (read before, it would bring the job back queued)."""
    busy(tmp_path / "data")
    svc = JournalsFirst(str(SPEC), tmp_path / "data", launcher=NoopLauncher(adopt=True), health=None,
                        tick_seconds=0.05, scheme="hived", preemption_policy="none")
    try:
        assert svc.recovered["snapshot"] is False
        assert svc.eng.job(svc.cancelled).state is JobState.CANCELLED
        assert svc.cancelled not in svc.vc("vca")["queue"]
    finally:
        svc.close()
