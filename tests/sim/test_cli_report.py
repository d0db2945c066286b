"""`hived simulate` and the report writer, on tiny traces."""
import json
import sys
import types

import pytest

from hived.cli.main import main
from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import Trace, TraceJob
from hived.reports import sharing

CSV = """job_id,tenant,submit,duration,gpus
a,t1,0,3600,8
b,t1,60,3600,8
c,t2,120,600,1
d,t2,180,600,4
e,t1,200,100,1
"""


@pytest.fixture
def trace_csv(tmp_path):
    p = tmp_path / "trace.csv"
    p.write_text(CSV)
    return str(p)


def test_cli_private_and_quota_writes_files(trace_csv, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["simulate", "--trace", trace_csv, "--scheme", "private,quota", "--out", str(out),
               "--nodes", "2", "--no-progress"])
    assert rc == 0
    names = {p.name for p in out.iterdir()}
    assert {"jobs_private.csv", "jobs_quota.csv", "summary_quota.json", "summary.json",
            "queue_delay_over_time.png", "normalized_delay.png", "fragmentation.png"} <= names
    doc = json.loads((out / "summary.json").read_text())
    assert set(doc["runs"]) == {"private", "quota"} and "quota" in doc["anomalies"]
    lines = (out / "jobs_quota.csv").read_text().splitlines()
    assert lines[0].startswith("job_id,tenant,gpus") and len(lines) == 6
    assert "avg queueing delay" in capsys.readouterr().out


@pytest.mark.parametrize("argv,words", [
    (["simulate", "--out", "x"], "give --trace"),
    (["simulate", "--trace", "TRACE"], "give --out"),
    (["simulate", "--trace", "TRACE", "--out", "OUT", "--scheme", "fair"], "--scheme: unknown"),
    (["simulate", "--trace", "TRACE", "--out", "OUT", "--limit", "0"], "--limit"),
    (["simulate", "--trace", "TRACE", "--out", "OUT", "--load", "-1"], "--load"),
    (["simulate", "--trace", "/no/such.csv", "--out", "OUT"], "file not found"),
    (["simulate", "--trace", "TRACE", "--out", "OUT", "--spec", "/no/spec.yaml"], "file not found"),
    (["simulate", "--workload", "no_such_workload"], "no workload named"),
])
def test_cli_refuses_bad_input(argv, words, trace_csv, tmp_path, capsys):
    argv = [trace_csv if a == "TRACE" else str(tmp_path / "o") if a == "OUT" else a for a in argv]
    assert main(argv) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cli_workload_dispatch(monkeypatch):
    seen = {}
    mod = types.ModuleType("hived.reports.dummywl")
    mod.main = lambda argv: seen.setdefault("argv", argv) and 7
    monkeypatch.setitem(sys.modules, "hived.reports.dummywl", mod)
    assert main(["simulate", "--workload", "dummywl", "--jobs", "5", "-x"]) == 7
    assert seen["argv"] == ["--jobs", "5", "-x"]


def test_cli_workload_trace_runs_replay(trace_csv, tmp_path):
    out = tmp_path / "w"
    assert main(["simulate", "--workload", "trace", "--trace", trace_csv, "--scheme", "quota",
                 "--out", str(out), "--nodes", "2", "--no-progress"]) == 0
    assert (out / "jobs_quota.csv").exists()


def test_moving_average_and_anomaly_detection():
    xs, ys = sharing.moving_average([(0, 10.0), (3600, 20.0), (13 * 3600, 30.0)])
    assert ys == [10.0, 15.0, 25.0]
    jobs = [TraceJob("a", "t1", 0, 100, 8), TraceJob("b", "t1", 10, 100, 8), TraceJob("c", "t2", 20, 10, 1)]
    tr = Trace(jobs)
    sz = size_cluster(tr, nodes=2)
    res = {"private": simulate(tr, "private", sizing=sz), "quota": simulate(tr, "quota", sizing=sz)}
    a = sharing.anomalies(res)
    assert "quota" in a and all(v["shared_s"] > v["private_s"] for v in a["quota"].values())
    w = sharing.waited_for_others(res)
    assert w["quota"]["jobs_at_once_in_private"] >= 1
