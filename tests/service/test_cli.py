"""The hived job commands: embedded on a data dir, and against a real `hived serve`."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hived.jupyter_ext.cli.main import main

SPEC = str(Path(__file__).with_name("spec_small.yaml"))
SCHEME = os.environ.get("HIVED_TEST_SCHEME", "hived")


@pytest.fixture(autouse=True)
def scheme(monkeypatch):
    monkeypatch.setenv("HIVED_SCHEME", SCHEME)
    monkeypatch.delenv("HIVED_URL", raising=False)
    monkeypatch.delenv("HIVED_DATA_DIR", raising=False)


def hived(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_help_everywhere(capsys):
    for cmd in ("submit", "jobs", "status", "logs", "cancel", "vc", "discover"):
        with pytest.raises(SystemExit) as info:
            main([cmd, "--help"])
        out = capsys.readouterr().out
        assert info.value.code == 0 and "usage: hived " + cmd in out
        assert "exit codes: 0 ok" in out          # each help says what its exit codes mean
        if cmd not in ("logs",):
            assert "--json" in out
    with pytest.raises(SystemExit) as info:       # bad usage is exit 2, like a refusal
        main(["jobs", "--no-such-flag"])
    assert info.value.code == 2


def test_embedded_submit_list_cancel_and_refusals(capsys, tmp_path):
    d = str(tmp_path / "d")
    code, out, err = hived(capsys, "jobs", "--data-dir", d)
    assert code == 4 and "no hived data here" in err
    code, out, err = hived(capsys, "submit", "--data-dir", d, "--spec", SPEC, "--vc", "vca", "--user", "alice",
                           "--be", "--gpus", "2", "--name", "first", "--", "echo", "hi")
    assert code == 0 and "submitted j1 to VC vca as alice: queued" in out
    tpl, tpl_list = tmp_path / "tpl.yaml", tmp_path / "list.yaml"
    tpl.write_text("image: nvcr.io/nvidia/pytorch:24.05-py3\n")
    tpl_list.write_text("- image\n")
    bad = [
        (["--vc", "vca", "--k8s-template", str(tmp_path / "none.yaml")], 2, "--k8s-template: cannot read"),
        (["--vc", "vca", "--k8s-template", str(tpl_list)], 2, "must hold a mapping of template fields"),
        (["--vc", "vca", "--k8s-template", str(tpl)], 2, "job template fields apply on Kubernetes only"),
        (["--vc", "nope"], 4, "vc: unknown VC 'nope'"),
        (["--vc", "vca", "--user", "bob"], 3, "'bob' is not a member of VC 'vca'"),
        (["--vc", "vca", "--gpus", "-3"], 2, "gpus: must be between 1 and"),
        (["--vc", "vca", "--gpus", "99999999"], 2, "gpus"),
        (["--vc", "vca", "--pods", "3", "--gpus", "4"], 2, "never fits VC 'vca'"),
        (["--vc", "vca", "--grace", "-1"], 2, "grace_period: must be between 0 and 86400"),
        (["--vc", "vca", "--workdir", "/no/such/dir"], 2, "workdir: /no/such/dir does not exist"),
        (["--vc", "vca", "--env", "NOEQUALS"], 2, "--env: want NAME=VALUE"),
        (["--vc", "vca", "--env", "HIVED_VC=x"], 2, "env.HIVED_VC: set by hived"),
        (["--vc", "vca", "--pods", "100000"], 2, "pods: must be between 1 and 4096, got 100000"),
        (["--vc", "vca", "--pods", "-2"], 2, "pods: must be between 1 and 4096, got -2"),
        (["--vc", "vca", "--grace", "1e9"], 2, "grace_period: must be between 0 and 86400"),
        (["--vc", "vca", "--grace", "nan"], 2, "grace_period: must be a finite number"),
        (["--vc", "vca", "--estimate", "-5"], 2, "estimate: must be between 0"),
    ]
    for extra, want, words in bad:
        argv = ["submit", "--data-dir", d] + (["--user", "alice"] if "--user" not in extra else []) + extra
        code, out, err = hived(capsys, *argv, "--", "true")
        assert (code, words in err) == (want, True), (extra, code, err)
    code, out, err = hived(capsys, "submit", "--data-dir", d, "--vc", "vca", "--user", "alice", "--")
    assert code == 2 and "command: missing" in err
    code, out, err = hived(capsys, "submit", "--data-dir", d, "--vc", "vca", "--user", "alice", "--", "  ")
    assert code == 2 and "command: must not be empty" in err
    code, out, err = hived(capsys, "submit", "--data-dir", d, "--user", "alice", "--", "true")
    assert code == 2 and "--vc: required" in err
    code, out, _ = hived(capsys, "jobs", "--data-dir", d, "--json")
    jobs = json.loads(out)["jobs"]
    assert [j["name"] for j in jobs] == ["first"]            # nothing else was stored
    code, out, _ = hived(capsys, "jobs", "--data-dir", d)
    assert code == 0 and "j1" in out and "queued #0" in out
    code, out, _ = hived(capsys, "status", "j1", "--data-dir", d)
    assert "state queued" in out and "submitted" in out
    code, out, err = hived(capsys, "logs", "j1", "--data-dir", d)
    assert code == 0 and out == ""                           # not started: no log yet
    code, out, err = hived(capsys, "logs", "j1", "-f", "--data-dir", d)
    assert code == 5 and "the job is queued and no service runs" in err
    code, _, err = hived(capsys, "logs", "j1", "--rank", "4", "--data-dir", d)
    assert code == 2 and "rank: must be an integer from 0 to 0, got 4" in err
    code, _, err = hived(capsys, "status", "j7", "--data-dir", d)
    assert code == 4 and "unknown job 'j7'" in err
    code, out, _ = hived(capsys, "vc", "--data-dir", d)
    assert code == 0 and "vca" in out and "vcb" in out
    code, out, _ = hived(capsys, "vc", "vca", "--data-dir", d, "--json")
    assert json.loads(out)["queue"] == ["j1"]
    code, _, err = hived(capsys, "cancel", "j1", "--data-dir", d, "--user", "bob")
    assert code == 3 and "may not cancel" in err
    code, out, _ = hived(capsys, "cancel", "j1", "--data-dir", d, "--user", "alice", "--json")
    assert code == 0 and json.loads(out)["jobs"][0]["state"] == "cancelled"
    code, out, err = hived(capsys, "cancel", "j1", "j9", "--data-dir", d, "--user", "alice")
    assert code == 4 and "already cancelled" in err and "unknown job 'j9'" in err
    code, out, _ = hived(capsys, "status", "--data-dir", d, "--json")
    assert code == 0 and json.loads(out)["jobs"] == {"cancelled": 1}


def test_foreign_or_newer_database_is_refused_untouched(capsys, tmp_path):
    from hived.jupyter_ext.service.store import SCHEMA_VERSION, SqliteStore
    from service_helpers import foreign_database
    foreign = foreign_database(tmp_path / "foreign")
    newer = tmp_path / "newer"
    s = SqliteStore(newer)
    s._db.execute("INSERT INTO schema_version VALUES (?, 'future', 0)", (SCHEMA_VERSION + 1,))
    s.close()
    for d, words in ((foreign, "foreign SQLite database"), (newer, "written by a newer hived")):
        before = (d / "hived.db").read_bytes()
        for argv in (["jobs"], ["submit", "--vc", "vca", "--user", "alice", "--spec", SPEC, "--", "true"]):
            code, out, err = hived(capsys, argv[0], "--data-dir", str(d), *argv[1:])
            assert code == 5 and words in err and "Traceback" not in err, (argv, err)
        assert (d / "hived.db").read_bytes() == before


def test_discover_cli(capsys, tmp_path):
    code, out, err = hived(capsys, "discover")
    assert code in (0, 4)
    if code == 4:
        assert "no NVIDIA driver or GPU found" in err and "--gpus N" in err
    out_file = tmp_path / "spec.yaml"
    code, out, err = hived(capsys, "discover", "--gpus", "8", "--vcs", "a,b", "-o", str(out_file))
    assert code == 0 and "wrote" in err
    from hived.core.spec import load_spec
    spec = load_spec(str(out_file))
    assert sorted(spec.vcs) == ["a", "b"] and sum(c.gpus_per_level[-1] for c in spec.chains.values()) == 8
    code, out, err = hived(capsys, "discover", "--gpus", "0")
    assert code == 2 and "--gpus: must be an integer from 1 to 1024" in err
    code, out, _ = hived(capsys, "discover", "--gpus", "2", "--json")
    assert json.loads(out)["spec"]["physicalCluster"]


def test_against_a_running_hived_serve(tmp_path):
    """The same commands through HivedClient and the REST API of `hived serve`."""
    d = tmp_path / "served"
    env = dict(os.environ, HIVED_SCHEME=SCHEME)
    env.pop("HIVED_URL", None)
    exe = [sys.executable, "-m", "hived.jupyter_ext.cli.main"]
    srv = subprocess.Popen(exe + ["serve", "--spec", SPEC, "--data-dir", str(d), "--port", "0",
                                  "--trust-user-header", "--tick", "0.1", "--allow-root"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while not (d / "server.json").exists():
            assert srv.poll() is None and time.time() < deadline, srv.stdout.read().decode()[-2000:]
            time.sleep(0.1)

        def cli(*argv):
            argv = [argv[0], "--data-dir", str(d)] + list(argv[1:])
            p = subprocess.run(exe + argv, env=env, capture_output=True,
                               text=True, timeout=60)
            return p.returncode, p.stdout, p.stderr

        code, out, err = cli("submit", "--vc", "vca", "--user", "alice", "--be", "--wait", "--json", "--",
                             "sh", "-c", "echo one; sleep 0.3; echo two")
        assert code == 0, err
        job = json.loads(out)
        assert job["state"] == "succeeded"
        code, out, _ = cli("logs", job["id"], "-f", "--user", "alice")
        assert code == 0 and "one\ntwo\n" in out
        code, _, err = cli("submit", "--vc", "vca", "--user", "bob", "--", "true")
        assert code == 3 and "403" in err
        code, _, err = cli("submit", "--vc", "vca", "--user", "alice", "--gpus", "9", "--", "true")
        assert code == 2
        code, out, _ = cli("jobs", "--user", "alice", "--json")
        assert [j["id"] for j in json.loads(out)["jobs"]] == [job["id"]]
    finally:
        srv.terminate()
        srv.wait(timeout=30)
