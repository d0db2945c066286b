"""The trace's optional ``time_limit`` column (issue 28): read, written, refused with one line
naming file, line and value when bad, and honoured by the simulator (timeout; backfill bound)."""
from __future__ import annotations

import pytest

from hived.core.engine import EngineConfig
from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import TraceError, parse_csv, read_csv, write_csv

HEAD = "job_id,tenant,submit,duration,gpus,time_limit\n"


def test_time_limit_column_is_optional_and_read_in_seconds():
    tr = parse_csv([HEAD, "a,t,0,100,1,3600\n", "b,t,5,100,1,\n"], "x.csv")
    assert [j.time_limit for j in tr.jobs] == [3600.0, None]
    tr = parse_csv(["job_id,tenant,submit,duration,gpus\n", "a,t,0,100,1\n"], "y.csv")
    assert tr.jobs[0].time_limit is None


@pytest.mark.parametrize("value, problem", [
    ("abc", "not a number: 'abc'"),
    ("0", "must be a finite number >= 1, got 0"),
    ("-5", "must be a finite number >= 1, got -5"),
    ("inf", "must be a finite number >= 1, got inf"),
    ("1e12", "at most 3.1536e+07, got 1e12"),
])
def test_a_bad_time_limit_is_one_line_naming_file_line_and_value(value, problem):
    with pytest.raises(TraceError) as e:
        parse_csv([HEAD, "a,t,0,100,1,60\n", f"b,t,0,100,1,{value}\n"], "jobs.csv")
    assert str(e.value) == f"jobs.csv:3: time_limit: {problem}"
    assert "\n" not in str(e.value)


def test_time_limit_survives_write_and_read(tmp_path):
    tr = parse_csv([HEAD, "a,t,0,100,1,3600\n", "b,t,5,100,1,\n"], "x.csv")
    path = str(tmp_path / "t.csv")
    write_csv(tr, path)
    assert [j.time_limit for j in read_csv(path).jobs] == [3600.0, None]


def test_simulated_job_past_its_limit_ends_as_timeout_at_the_limit():
    tr = parse_csv([HEAD, "long,t,0,1000,8,300\n", "ok,t,10,100,8,300\n"], "x.csv")
    res = simulate(tr, "hived", sizing=size_cluster(tr, nodes=1), sample_every=0)
    rows = {r["job_id"]: r for r in res.rows}
    assert rows["long"]["end"] == pytest.approx(300.0)
    assert rows["long"]["state"] == "failed"          # as timeout: stopped at its limit, not retried
    assert rows["ok"]["start"] == pytest.approx(300.0) and rows["ok"]["end"] == pytest.approx(400.0)


def test_simulated_backfill_reads_time_limits_when_there_are_no_estimates():
    """A 4-GPU job runs to t=1000 under a limit of 1000 s; an 8-GPU head waits for it. A later
    job of 4 GPUs (2,000 s long) whose limit of 900 s ends it by then backfills as an ordinary
    job and is never preempted; with a limit of 1,500 s it waits for the head; without a limit it
    starts as one the head preempts at t=1000."""
    def run(limit: str) -> dict:
        tr = parse_csv([HEAD, "r,t,0,1000,4,1000\n", "head,t,1,100,8,\n", f"later,t,2,2000,4,{limit}\n"], "x.csv")
        cfg = EngineConfig(backfill=True, backfill_estimates="none")
        res = simulate(tr, "hived", sizing=size_cluster(tr, nodes=1), config=cfg, sample_every=0)
        return {r["job_id"]: r for r in res.rows}
    rows = run("900")
    assert rows["later"]["start"] == pytest.approx(2.0) and rows["later"]["preemptions"] == 0
    assert rows["later"]["end"] == pytest.approx(902.0) and rows["head"]["start"] == pytest.approx(1000.0)
    rows = run("1500")     # it could still run at t=1000: it waits for the head rather than pass it
    assert rows["later"]["start"] == pytest.approx(1100.0) and rows["later"]["preemptions"] == 0
    rows = run("")
    assert rows["later"]["start"] == pytest.approx(2.0) and rows["later"]["preemptions"] == 1
