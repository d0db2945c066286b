"""Two VC admins trade a socket on a live `hived serve`, through the CLI only: posts of
the same length made one after the other match, the lender's full-size gang is
accepted during the loan and starts at the return, and the doors say what the docs say
(local dates with the zone, withdraw, unknown VC exit 4, the ledger for admins)."""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from hived.testing.served import EXE, served_hived

SPEC = Path(__file__).parents[1] / "service" / "spec_small.yaml"   # two 8-GPU nodes of two 4-GPU sockets
WINDOW = 20   # seconds: long enough for the commands below, short enough to wait for its end


@pytest.fixture
def hived(tmp_path):
    doc = yaml.safe_load(SPEC.read_text())
    doc["virtualClusters"]["vcb"]["admins"] = ["bea"]
    for vc in ("vca", "vcb"):    # one whole node each
        doc["virtualClusters"][vc]["virtualCells"] = [{"cellType": "T-NODE", "cellNumber": 1}]
    with served_hived(doc, tmp_path) as env:
        def run(*argv):
            p = subprocess.run(EXE + list(argv), env=env, capture_output=True, text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr
        yield run


def test_two_admins_trade_a_socket_and_the_lender_keeps_its_queue(hived):
    post = ["--cell-type", "T-NODE", "--count", "1", "--duration", str(WINDOW)]
    code, out, err = hived("exchange", "offer", "--vc", "vca", "--user", "ada", *post)
    assert code == 0, err
    code, out, err = hived("exchange", "request", "--vc", "vcb", "--user", "bea", "--json", *post)
    assert code == 0, err
    (ex,) = json.loads(out)["matched"]                       # same length, posted second: matched
    assert ex["state"] == "active" and ex["legs"][0]["lender"] == "vca"
    code, out, _ = hived("exchange", "board", "--user", "ada")
    assert code == 0 and "active" in out and "no open posts" in out
    stamp = time.strftime("%Z", time.localtime(ex["end"]))
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d " + re.escape(stamp), out), out
    # the lender's gang of its full spec size (its whole node) is accepted during the loan ...
    code, out, err = hived("submit", "--vc", "vca", "--user", "alice", "--pods", "2", "--gpus", "4",
                           "--json", "--", "sleep", "600")
    assert code == 0, err
    job = json.loads(out)
    assert job["state"] == "queued"
    code, out, _ = hived("vc", "vca", "--user", "alice", "--json")
    assert json.loads(out)["gpus_total"] == 0                 # the view counts the loan
    # ... and starts when the window ends and the socket comes back
    deadline = time.time() + WINDOW + 60
    while True:
        code, out, _ = hived("status", job["id"], "--user", "alice", "--json")
        if json.loads(out)["state"] == "running":
            break
        assert time.time() < deadline, out
        time.sleep(0.5)
    code, out, _ = hived("vc", "vca", "--user", "alice", "--json")
    assert json.loads(out)["gpus_total"] == 8


def test_withdraw_unknown_vc_and_the_ledger(hived):
    code, out, err = hived("exchange", "offer", "--vc", "nope", "--user", "root", "--cell-type", "T-NODE",
                           "--count", "1", "--duration", "1h")
    assert code == 4 and "no VC named 'nope'" in err
    code, out, err = hived("exchange", "offer", "--vc", "vca", "--user", "ada", "--cell-type", "T-NODE",
                           "--count", "1", "--duration", "1h", "--json")
    assert code == 0, err
    pid = json.loads(out)["id"]
    code, out, err = hived("exchange", "withdraw", pid, "--user", "bea")      # another VC's admin
    assert code == 3 and "VC admins only" in err
    code, out, err = hived("exchange", "withdraw", pid, "--user", "ada")
    assert code == 0 and out.startswith(f"withdrew offer {pid} of VC vca"), err
    code, out, err = hived("exchange", "withdraw", pid, "--user", "ada")
    assert code == 4 and "matched, withdrawn or expired" in err
    code, out, err = hived("exchange", "ledger", "--user", "alice")
    assert code == 3 and "VC admins only" in err
    code, out, err = hived("exchange", "ledger", "--user", "bea")
    assert code == 0 and "vca" in out and "vcb" in out
