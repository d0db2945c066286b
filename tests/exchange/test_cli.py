"""``hived exchange``: the offline dry run and the online errors."""
import json

import yaml

from hived.cli.main import main


def write(tmp_path, doc):
    p = tmp_path / "posts.yaml"
    p.write_text(yaml.safe_dump(doc))
    return str(p)


def test_dry_run_temporal_and_spatial(tmp_path, spec_file, capsys):
    posts = write(tmp_path, {"now": 0, "posts": [
        {"kind": "offer", "vc": "big", "cell_type": "NODE", "count": 1, "duration": 36000},
        {"kind": "request", "vc": "small", "cell_type": "NODE.NODE", "count": 1, "duration": 36000,
         "in_return": {"cell_type": "NODE.GPU", "count": 8}},
        {"kind": "offer", "vc": "big", "cell_type": "NODE", "count": 1, "duration": 3600, "start": 36000,
         "in_return": {"cell_type": "GPU", "count": 8}},
        {"kind": "request", "vc": "small", "cell_type": "NODE", "count": 1, "duration": 3600, "start": 36000,
         "in_return": {"cell_type": "GPU", "count": 8}},
    ]})
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", posts, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    # the plain offer cannot serve the spatial request; the reciprocal pair matches
    assert len(out["exchanges"]) == 1
    ex = out["exchanges"][0]
    assert ex["spatial"] and [(g["lender"], g["borrower"], g["level"], g["count"]) for g in ex["legs"]] == \
        [("big", "small", 4, 1), ("small", "big", 1, 8)]
    assert len(out["left"]["offers"]) == 1 and len(out["left"]["requests"]) == 1
    assert out["ledger"]["big"] == {"contributed": 8.0, "consumed": 8.0, "surplus": 0.0}
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", posts]) == 0
    text = capsys.readouterr().out
    assert "1 exchange(s) matched by policy balanced" in text and "(spatial)" in text


def test_dry_run_bad_posts(tmp_path, spec_file, capsys):
    bad = write(tmp_path, {"posts": [{"kind": "offer", "vc": "big", "cell_type": "NODE", "count": 2,
                                      "duration": 10}]})
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", bad]) == 2
    err = capsys.readouterr().err
    assert "posts[0].offer.count: VC big can lend at most 1" in err
    bad = write(tmp_path, {"posts": [{"kind": "offer", "vc": "big", "cell_type": "RACK", "count": 1,
                                      "duration": 10}]})
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", bad]) == 2
    assert "posts[0].cell_type: unknown cell type 'RACK'" in capsys.readouterr().err
    bad = write(tmp_path, {"posts": [{"kind": "swap"}]})
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", bad]) == 2
    assert "posts[0].kind" in capsys.readouterr().err
    assert main(["exchange", "dry-run", "--spec", str(spec_file), "--posts", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    assert main(["exchange", "dry-run", "--spec", str(tmp_path / "x.yaml"), "--posts", bad]) == 2


def test_online_without_a_service_says_where(capsys, monkeypatch):
    monkeypatch.delenv("HIVED_URL", raising=False)
    assert main(["exchange", "board", "--url", "http://127.0.0.1:9"]) == 5   # no service: exit 5 (docs/cli.md)
    assert "no hived service at http://127.0.0.1:9" in capsys.readouterr().err
    assert main(["exchange"]) == 2
    assert "say what to do" in capsys.readouterr().err
