"""Issue 15: trace inputs that crashed or were silently misread, and the TE/BE columns."""
import io
import subprocess
import sys

import pytest

from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import TraceError, parse_csv, read_csv

HEAD = "job_id,tenant,submit,duration,gpus\n"


@pytest.mark.parametrize("line,words", [
    ("a,t,0,10,1000000000", "gpus: at most 32768"),
    ("a,t,0,1e12,1", "duration: at most"),
    ("a,t,1e12,10,1", "out of range"),
])
def test_huge_values_are_refused_in_one_line(line, words):
    with pytest.raises(TraceError) as e:
        parse_csv(io.StringIO(HEAD + line + "\n"), "x.csv")
    assert words in str(e.value) and str(e.value).startswith("x.csv:2")


def test_submit_span_is_limited():
    with pytest.raises(TraceError, match="submit times span"):
        parse_csv(io.StringIO(HEAD + "a,t,0,10,1\nb,t,1000000000,10,1\n"), "x.csv")


def test_byte_order_mark_is_not_part_of_job_id(tmp_path):
    p = tmp_path / "bom.csv"
    p.write_bytes("\ufeff".encode() + (HEAD + "a,t,0,10,1\n").encode())
    assert [j.job_id for j in read_csv(str(p)).jobs] == ["a"]
    assert [j.job_id for j in parse_csv(io.StringIO("\ufeff" + HEAD + "a,t,0,10,1\n")).jobs] == ["a"]


def test_mixed_seconds_and_iso_times_are_refused():
    with pytest.raises(TraceError, match="use one of them"):
        parse_csv(io.StringIO(HEAD + "a,t,0,10,1\nb,t,2020-01-01T00:00:00,10,1\n"), "x.csv")
    with pytest.raises(TraceError, match="use one of them"):
        parse_csv(io.StringIO(HEAD + "a,t,2020-01-01T00:00:00,10,1\nb,t,5,10,1\n"), "x.csv")


def test_te_be_columns_fractional_and_cpu_only_pods():
    tr = parse_csv(io.StringIO(
        "job_id,tenant,submit,duration,gpus,pods,class,grace,cpus,memory_gb\n"
        "a,t,0,100,0.5,1,te,,4,16\n"
        "b,t,0,100,1.5,2,be,30,2,8\n"    # 0.75 GPU per pod: two pods of one whole GPU
        "c,t,0,100,0,1,be,,2,4\n"))
    a, b, c = tr.jobs
    assert (a.gpus, a.pods, a.gpus_asked, a.job_class, a.cpus, a.memory_gb) == (1, 1, 0.5, "te", 4.0, 16.0)
    assert (b.gpus, b.pod_sizes, b.grace_period, b.job_class, b.gpus_asked) == (2, [1, 1], 30.0, "be", 1.5)
    assert c.gpus == 0
    sz = size_cluster(tr, nodes=1)
    r = simulate(tr, "hived", sizing=sz)
    rows = {x["job_id"]: x for x in r.rows}
    assert rows["a"]["start"] == 0 and rows["b"]["start"] == 0
    assert rows["c"]["state"].startswith("refused: gpus: a CPU-only job")
    s = r.summary()
    assert s["refused"] == 1 and s["jobs"] == 3 and s["never_started"] == 0


def test_fitgpp_runs_from_a_trace(tmp_path):
    """A TE job arriving on a VC full of BE jobs preempts one with --preemption fitgpp."""
    csv = tmp_path / "tebe.csv"
    csv.write_text("job_id,tenant,submit,duration,gpus,class,grace\n"
                   "b1,t,0,1000,4,be,0\nb2,t,0,1000,4,be,0\nt1,t,10,50,4,te,\n")
    tr = read_csv(str(csv))
    sz = size_cluster(tr, nodes=1)
    none = {x["job_id"]: x for x in simulate(tr, "hived", sizing=sz).rows}
    fit = {x["job_id"]: x for x in simulate(tr, "hived", sizing=sz, preemption_policy="fitgpp").rows}
    assert none["t1"]["start"] == 1000 and fit["t1"]["start"] == 10
    assert fit["b1"]["preemptions"] + fit["b2"]["preemptions"] == 1
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "hived.cli.main", "simulate", "--trace", str(csv),
                        "--nodes", "1", "--scheme", "hived", "--preemption", "fitgpp", "--out", str(out),
                        "--no-progress"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "preempted GPUs 4" in p.stdout


def test_cli_refuses_nodes_with_spec_and_too_few_nodes(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text(HEAD + "a,t1,0,10,32\nb,t2,0,10,1\n")
    p = subprocess.run([sys.executable, "-m", "hived.cli.main", "simulate", "--trace", str(csv),
                        "--nodes", "2", "--scheme", "hived", "--out", str(tmp_path / "o"), "--no-progress"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--nodes 2 is too small" in p.stderr and "Traceback" not in p.stderr
