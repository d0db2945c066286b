"""`hived simulate --workload fitgpp` (reports/fitgpp.py main(argv))."""
import json

from hived.reports import fitgpp as report


def test_main_prints_tables_writes_plots_and_json(tmp_path, capsys):
    out_json = tmp_path / "r.json"
    rc = report.main(["--workload", "fitgpp", "--jobs", "600", "--nodes", "8", "--s-sweep", "0,4",
                      "--plots", str(tmp_path / "plots"), "--json", str(out_json)])
    assert rc == 0
    cap = capsys.readouterr()
    text = cap.out
    for needle in ("Table 1", "Table 2", "Table 3", "FIFO", "LRTP", "RAND", "FitGpp (s=4)", "[33.4]", "[0.63%]",
                   "Fig. 4", "fitgpp_cdf.png", "fitgpp_s_sweep.png"):
        assert needle in text
    assert "job" in cap.err                      # the tqdm bar went to stderr
    assert (tmp_path / "plots" / "fitgpp_cdf.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "fitgpp_s_sweep.png").stat().st_size > 1000
    data = json.loads(out_json.read_text())
    assert data["jobs"] == 600 and [r["s"] for r in data["sweep"]] == [0.0, 4.0]
    assert set(data["results"]) == {"fifo", "lrtp", "rand", "fitgpp"}


def test_s_sweep_without_value_uses_the_default_list(tmp_path, capsys):
    rc = report.main(["--jobs", "300", "--nodes", "4", "--policies", "fitgpp", "--s-sweep", "--no-plots",
                      "--no-progress"])
    assert rc == 0
    out = capsys.readouterr()
    assert out.err == ""
    sweep = out.out.split("Fig. 4")[1].strip().splitlines()[2:]
    assert [float(line.split()[0]) for line in sweep] == [float(x) for x in report.DEFAULT_SWEEP.split(",")]


def test_bad_options_are_refused_with_a_clear_message(capsys, tmp_path):
    cases = [(["--jobs", "0"], "--jobs must be >= 1, got 0"),
             (["--policies", "fifo,sjf"], "unknown policy 'sjf'"),
             (["--cap", "-1"], "--cap P must be a whole number >= 0 or inf"),
             (["--s", "-2"], "--s must be >= 0"),
             (["--s-sweep", "1,x"], "s sweep must be a comma-separated list"),
             (["--nodes", "0"], "--nodes must be >= 1"),
             (["--load", "0"], "--load must be > 0")]
    for argv, msg in cases:
        rc = report.main(argv + ["--plots", str(tmp_path / "no")])
        err = capsys.readouterr().err
        assert rc == 2 and msg in err, (argv, err)
    assert not (tmp_path / "no").exists()        # nothing written on bad input


def test_cap_inf_prints_table_4(capsys):
    rc = report.main(["--jobs", "800", "--nodes", "8", "--cap", "inf", "--policies", "lrtp,fitgpp", "--no-plots",
                      "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0 and "Table 4: share of jobs preempted N times (P = inf)" in out and "[6.30%]" in out
    assert "P = inf), ours [paper, P = 1]" in out
