"""The simulator's numbers can be trusted (issue 28): guarantee checks, plots, trace edges."""
from __future__ import annotations

import io

import pytest

from hived.core.sim.schemes import size_cluster
from hived.core.sim.simulate import simulate
from hived.core.sim.traces import parse_csv


def _trace(header: str, rows: list[str]):
    return parse_csv(io.StringIO(header + "\n" + "\n".join(rows) + "\n"))


@pytest.mark.parametrize("scheme", ["hived", "quota"])
def test_jobs_waiting_for_cpus_are_no_guarantee_breach(scheme):
    """Two 1-GPU jobs asking 40 CPUs each on one 64-CPU node: the second waits for CPUs,
    which placement counts, so the guarantee check must count them too."""
    tr = _trace("job_id,tenant,submit,duration,gpus,cpus,memory_gb",
                ["a,t1,0,100,1,40,8", "b,t1,0,100,1,40,8"])
    res = simulate(tr, scheme, sizing=size_cluster(tr, nodes=1))
    rows = {r["job_id"]: r for r in res.rows}
    assert rows["b"]["start"] == 100                      # it did wait for a's CPUs
    s = res.summary()
    assert s["guarantee_breach_jobs"] == 0 and s["guarantee_breach_rounds"] == 0


def test_a_head_that_fits_cpus_and_cells_and_waits_is_still_a_breach():
    from hived.core.engine import Engine
    from hived.core.jobs import JobRequest, PodGroup
    from hived.core.sim.cluster import node_spec
    from hived.core.sim.safety import blocked_heads
    eng = Engine(node_spec(2, {"A": 8, "B": 8}), preemption_policy="none")
    j = eng.submit(JobRequest(user="u", vc="A", groups=[PodGroup(1, 1, cpus=8)]), 0.0)
    assert blocked_heads(eng, 0.0) == [j]                 # not yet tried: it fits and waits
    eng.step(0.0)
    assert blocked_heads(eng, 0.0) == []


def test_a_tenant_that_never_waited_is_marked_0_s_not_a_full_bar():
    from hived.reports.sharing import bar_height
    assert bar_height((0.0, 0.0, None), 0.5, 2.0) == (0.5, "0 s")        # no wait in either run
    assert bar_height((0.0, 30.0, 0.0), 0.5, 2.0) == (0.5, "0 s")        # waited only in private
    top, label = bar_height((600.0, 0.0, None), 0.5, 2.0)
    assert top == 2.0 and "private 0 s" in label and "10 min" in label
    assert bar_height((60.0, 30.0, 2.0), 0.5, 4.0) == (2.0, "")


def test_every_run_appears_in_every_plot(tmp_path):
    from hived.reports.sharing import plot_delay_over_time, plot_fragmentation, plot_preempted, run_name
    tr = _trace("job_id,tenant,submit,duration,gpus", ["a,t1,0,100,8", "b,t1,0,100,8", "c,t2,10,50,4"])
    sz = size_cluster(tr, nodes=2)
    results = {}
    for scheme, cells in (("private", "node"), ("quota", "node"), ("hived", "node"), ("hived", "multi"),
                          ("hived-static", "node")):
        r = simulate(tr, scheme, cells=cells, sizing=sz)
        results[run_name(r)] = r
    names = list(results)
    assert len(names) == 5
    assert plot_delay_over_time(results, str(tmp_path / "d.png")) == names
    assert plot_fragmentation(results, str(tmp_path / "f.png")) == names
    assert plot_preempted(results, str(tmp_path / "p.png")) == names
    assert all((tmp_path / f).stat().st_size > 0 for f in ("d.png", "f.png", "p.png"))


def test_bytes_that_are_not_utf8_are_refused_naming_file_and_line(tmp_path):
    from hived.core.sim.traces import TraceError, read_csv
    p = tmp_path / "t.csv"
    p.write_bytes(b"job_id,tenant,submit,duration,gpus\na,t1,0,10,1\nb,caf\xe9,0,10,1\n")
    with pytest.raises(TraceError) as e:
        read_csv(str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}:3") and "0xe9" in msg and "UTF-8" in msg and "\n" not in msg


def test_fields_past_the_header_warn_once_naming_the_lines(tmp_path, capsys):
    from hived.cli.main import main
    p = tmp_path / "t.csv"
    p.write_text("job_id,tenant,submit,duration,gpus\na,t1,0,10,1,extra\nb,t1,5,10,1\nc,t1,9,10,1,x,y\n")
    from hived.core.sim.traces import read_csv
    tr = read_csv(str(p))
    assert len(tr.jobs) == 3 and len(tr.warnings) == 1
    assert tr.warnings[0].startswith(f"{p}:2: fields past the header's 5 columns are ignored (2 lines, also 4)")
    assert main(["simulate", "--trace", str(p), "--scheme", "quota", "--nodes", "1", "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {p}:2: fields past the header" in err


def test_a_trace_too_short_has_no_offered_load():
    from hived.core.sim.schemes import offered_load
    short = _trace("job_id,tenant,submit,duration,gpus", ["a,t1,0,3600,8", "b,t1,60,3600,8"])
    sz = size_cluster(short, nodes=1)
    assert sz.load is None and offered_load(short, 8) is None
    assert simulate(short, "quota", sizing=sz).summary()["offered_load"] is None
    rows = [f"j{k},t1,{k * 600},3600,4" for k in range(40)]
    assert 0 < size_cluster(_trace("job_id,tenant,submit,duration,gpus", rows), nodes=1).load < 10


def test_idle_gpu_hours_while_a_job_that_fits_waits():
    """One tenant, one 8-GPU node: a 4-GPU job holds half the node for 10 h; an 8-GPU job
    waits behind it and, behind that, a 2-GPU job that fits the 4 idle GPUs. Without
    backfill the 2-GPU job waits 10 h next to 4 idle GPUs: 2 GPUs x 10 h could have run it."""
    from hived.core.engine import EngineConfig
    tr = _trace("job_id,tenant,submit,duration,gpus",
                ["a,t1,0,36000,4", "big,t1,1,3600,8", "small,t1,2,3600,2"])
    sz = size_cluster(tr, nodes=1)
    strict = simulate(tr, "hived", sizing=sz, config=EngineConfig(backfill=False)).summary()
    assert 19.0 <= strict["idle_gpu_hours_job_fits"] <= 20.0         # 2 GPUs x ~10 h (hourly samples)
    filled = simulate(tr, "hived", sizing=sz,
                      config=EngineConfig(backfill=True, backfill_estimates="oracle")).summary()
    assert filled["idle_gpu_hours_job_fits"] < 1.0                  # small ran at once (ends before a)
    private = simulate(tr, "private", sizing=sz).summary()
    assert 19.0 <= private["idle_gpu_hours_job_fits"] <= 20.0


def test_a_whole_node_head_does_not_idle_the_other_node():
    """Issue 28's shape on two 8-GPU nodes: x holds 7 GPUs of one node for 10 h, y 4 GPUs of
    the other for 20 h; big (8 GPUs) waits for x's node. long (1 GPU, 15 h) would end after
    big's reservation, but fits beside y: it starts at once there, and big still starts when
    x ends. Counting GPUs only, big's reservation (8 free GPUs at 10 h) held long back for
    10 h next to 4 idle GPUs."""
    from hived.core.engine import EngineConfig
    tr = _trace("job_id,tenant,submit,duration,gpus",
                ["x,t1,0,36000,7", "y,t1,0,72000,4", "big,t1,1,3600,8", "long,t1,2,54000,1"])
    sz = size_cluster(tr, nodes=2)
    res = simulate(tr, "hived", sizing=sz, config=EngineConfig(backfill=True, backfill_estimates="oracle"))
    start = {r["job_id"]: r["submit"] + r["queue_delay"] for r in res.rows}
    assert start["long"] == 2 and start["big"] == 36000
    assert res.summary()["idle_gpu_hours_job_fits"] < 1.0
