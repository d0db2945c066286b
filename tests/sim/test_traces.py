import io

import pytest

from hived.core.sim import generator
from hived.core.sim.traces import PHILLY_DIR as PHILLY
from hived.core.sim.traces import TraceError, default_pods, parse_csv, read_csv, read_philly, soften, write_csv


def test_philly_reader_maps_vcs_and_gangs():
    tr = read_philly(PHILLY, limit=2000)
    assert len(tr.jobs) == 2000 and tr.jobs[0].submit == 0.0
    assert all(a.submit <= b.submit for a, b in zip(tr.jobs, tr.jobs[1:]))
    assert "6214e9" in tr.tenants
    for j in tr.jobs:
        assert j.pods * j.gpus_per_pod == j.gpus and j.gpus_per_pod <= 8


def test_philly_full_drops_tiny_vcs():
    tr = read_philly(PHILLY)
    assert len(tr.jobs) == 82247 - 18          # four VCs with 3-8 jobs each
    assert len(tr.tenants) == 11


def test_default_pods():
    assert [default_pods(g) for g in (1, 2, 4, 8, 12, 16, 24, 128)] == [1, 1, 1, 1, 3, 2, 3, 16]


def test_csv_roundtrip(tmp_path):
    text = ("job_id,tenant,submit,duration,gpus,affinity\n"
            "a,t1,100,60,4,soft\nb,t2,50,30,16,\nc,t1,2020-01-01T00:00:00,5,1,hard\n")
    tr = parse_csv(io.StringIO(text.replace("2020-01-01T00:00:00", "70")))
    assert [j.job_id for j in tr.jobs] == ["b", "c", "a"] and tr.jobs[0].submit == 0
    a = tr.jobs[2]
    assert a.pods == 4 and a.gpus_per_pod == 1 and a.affinity == "soft"   # soft: one-GPU pods
    assert tr.jobs[0].pods == 2
    p = tmp_path / "t.csv"
    write_csv(tr, str(p))
    back = read_csv(str(p))
    def rows(trace):
        return [(j.job_id, j.gpus, j.pods, j.submit) for j in trace.jobs]
    assert rows(back) == rows(tr)


@pytest.mark.parametrize("line,where", [
    ("a,t,0,x,1", "duration"), ("a,t,0,5,-1", "gpus"), ("a,t,0,5,1e9", "gpus"), (",t,0,5,1", "job_id"),
    ("a,,0,5,1", "tenant"), ("a,t,yesterday,5,1", "submit"), ("a,t,0,-5,1", "duration"),
])
def test_csv_errors_name_line_and_field(line, where):
    with pytest.raises(TraceError) as e:
        parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus\n" + line + "\n"), "x.csv")
    assert e.value.where.startswith("x.csv:2") and where in str(e.value)


def test_csv_errors_columns_pods_duplicates(tmp_path):
    with pytest.raises(TraceError, match="missing columns"):
        parse_csv(io.StringIO("job_id,tenant\n"))
    with pytest.raises(TraceError, match="divide gpus=4"):
        parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus,pods\na,t,0,1,4,3\n"))
    with pytest.raises(TraceError, match="duplicate 'a'"):
        parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus\na,t,0,1,1\na,t,0,1,1\n"))
    with pytest.raises(TraceError, match="job_class"):
        parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus,job_class\na,t,0,1,1,vip\n"))
    with pytest.raises(TraceError, match="file not found"):
        read_csv(str(tmp_path / "none.csv"))
    with pytest.raises(TraceError, match="file not found"):
        read_philly(str(tmp_path))


def test_generator_follows_table1():
    tr = generator.generate(scale=0.01, days=3, seed=1)
    by = {}
    for j in tr.jobs:
        by.setdefault(j.tenant, []).append(j)
    assert set(by) == set(generator.TABLE1)
    assert len(by["prod-e"]) == sum(round(c * 0.01) for c in generator.TABLE1["prod-e"][0])
    assert sum(1 for j in by["prod-a"] if j.gpus == 8) == round(1132 * 0.01)
    assert all(0 <= j.submit <= 3 * 86400 and 60 <= j.duration <= 7 * 86400 for j in tr.jobs)
    assert generator.generate(scale=0.01, days=3, seed=1).jobs[5].duration == tr.jobs[5].duration
    assert abs(sum(generator.quota_shares().values()) - 1.0) < 1e-3
    with pytest.raises(ValueError, match="scale"):
        generator.generate(scale=0)
    with pytest.raises(ValueError, match="unknown"):
        generator.generate(tenants=["nobody"])


def test_soften_turns_multi_gpu_jobs_into_one_gpu_pods():
    tr = generator.generate(scale=0.01, days=1, seed=2)
    soft = soften(tr, 1.0)
    for a, b in zip(tr.jobs, soft.jobs):
        if 1 < a.gpus <= 8:
            assert b.affinity == "soft" and b.pods == a.gpus
        else:
            assert b is a


def test_window_rebases_and_checks():
    tr = parse_csv(io.StringIO("job_id,tenant,submit,duration,gpus\na,t,0,1,1\nb,t,90000,1,1\nc,t,200000,1,1\n"))
    w = tr.window(1, 1)
    assert [(j.job_id, j.submit) for j in w.jobs] == [("b", 90000 - 86400)]
    assert [j.job_id for j in tr.window(1).jobs] == ["b", "c"]
    with pytest.raises(ValueError, match="window"):
        tr.window(-1)
