"""The §5.4 reproduction on a slice of the Philly trace: metrics and shape of the result."""
import pytest

from hived.core.sim import exchange_experiment as E
from hived.reports import exchange as report


def test_relative_fluctuation_eq3():
    # usage 0, 2, 4 on a VC of 2 GPUs: sqrt((4 + 0 + 4) / 3) / 2
    assert E.relative_fluctuation([0, 2, 4], 2) == pytest.approx((8 / 3) ** 0.5 / 2)
    assert E.relative_fluctuation([], 4) == 0.0
    with pytest.raises(ValueError, match="capacity"):
        E.relative_fluctuation([1], 0)


def test_cells_follow_shares_and_sum():
    c = E._cells({"a": 3, "b": 1, "c": 0.001}, 10)
    assert sum(c.values()) == 10 and c["c"] == 1 and c["a"] > c["b"]


@pytest.fixture(scope="module")
def result():
    return E.run(E.Config(start="2017-10-01", end="2017-10-08"))


def test_two_weeks_of_philly_gain_and_ledger_balance(result):
    assert set(result.results) == {"default", "balanced"}
    for ar in result.results.values():
        assert len(ar.rows) == 11 and ar.exchanges > 0 and ar.failed == 0
        # GPU-hours lent equal GPU-hours borrowed over all VCs
        assert sum(r.contributed_h for r in ar.rows) == pytest.approx(sum(r.consumed_h for r in ar.rows))
        for r in ar.rows:
            assert 0 <= r.effective <= 1 and 0 <= r.increase <= r.borrowed_used + 1e-12
            assert r.gain == pytest.approx(r.increase / r.effective if r.effective else 0.0)
        assert max(r.gain for r in ar.rows) > 0.05          # some VC gains guaranteed capacity
        # exchanges cut the mean queueing delay of the most delayed VC
        worst = max(ar.rows, key=lambda r: r.wait_h_before)
        assert worst.wait_h_after < worst.wait_h_before


def test_report_prints_tables_and_writes_plots(tmp_path, capsys):
    rc = report.main(["--start", "2017-10-01", "--end", "2017-10-04", "--no-progress", "--plots",
                      str(tmp_path), "--json", str(tmp_path / "r.json"), "--assignments", "balanced"])
    out = capsys.readouterr().out
    assert rc == 0 and "Table 5 (balanced assignment)" in out and "paper: up to 57.5%" in out
    assert (tmp_path / "exchange_gain.png").stat().st_size > 0 and (tmp_path / "r.json").exists()


@pytest.mark.parametrize("argv, msg", [(["--end", "2017-09-01"], "end: must be after start"),
                                       (["--load", "2"], "load"), (["--assignments", "fair"], "assignments"),
                                       (["--start", "10/01/2017"], "YYYY-MM-DD")])
def test_report_bad_options(argv, msg, capsys):
    assert report.main(argv + ["--no-progress", "--no-plots"]) == 2
    assert msg in capsys.readouterr().err
