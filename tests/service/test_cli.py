"""The hived job commands: embedded on a data dir, and against a real `hived serve`."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hived.cli.main import main

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
        (["--vc", "vca", "--pods", "3", "--gpus", "4"], 2, "(submit with --allow-opportunistic to run it at low "
                                                           "priority)"),
        (["--vc", "vca", "--grace", "-1"], 2, "grace_period: must be between 0 and 86400"),
        (["--vc", "vca", "--workdir", "/no/such/dir"], 2, "workdir: /no/such/dir is not a folder "),
        (["--vc", "vca", "--env", "NOEQUALS"], 2, "--env: want NAME=VALUE"),
        (["--vc", "vca", "--env", "HIVED_VC=x"], 2, "env.HIVED_VC: set by hived"),
        (["--vc", "vca", "--pods", "100000"], 2, "pods: must be between 1 and 1024, got 100000"),
        (["--vc", "vca", "--pods", "-2"], 2, "pods: must be between 1 and 1024, got -2"),
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
    code, out, _ = hived(capsys, "vc", "vca", "--data-dir", d)      # a table, cells spelled as --cell-type
    lines = out.splitlines()
    assert lines[1] == "  cells: T-NODE.T-SOCKET x2" and lines[2].split()[:3] == ["CELL", "GPUS/CELL", "TOTAL"]
    assert lines[3].split() == ["T-NODE.T-SOCKET", "4", "2", "0", "2", "0", "0", "0", "0"]
    code, _, err = hived(capsys, "cancel", "j1", "--data-dir", d, "--user", "bob")
    assert code == 3 and "may not cancel" in err
    code, out, _ = hived(capsys, "cancel", "j1", "--data-dir", d, "--user", "alice", "--json")
    assert code == 0 and json.loads(out)["jobs"][0]["state"] == "cancelled"
    code, out, err = hived(capsys, "cancel", "j1", "j9", "--data-dir", d, "--user", "alice")
    assert code == 4 and "already cancelled" in err and "unknown job 'j9'" in err
    code, out, _ = hived(capsys, "status", "--data-dir", d, "--json")
    assert code == 0 and json.loads(out)["jobs"] == {"cancelled": 1}


def test_foreign_or_newer_database_is_refused_untouched(capsys, tmp_path):
    from service_helpers import foreign_database

    from hived.service.store import SCHEMA_VERSION, SqliteStore
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
    exe = [sys.executable, "-m", "hived.cli.main"]
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
        assert code == 3 and err == "hived submit: vc: user 'bob' may not submit to VC 'vca' (not in its users)\n"
        code, _, err = cli("submit", "--vc", "vca", "--user", "alice", "--gpus", "9", "--", "true")
        assert code == 2
        code, out, _ = cli("jobs", "--user", "alice", "--json")
        assert [j["id"] for j in json.loads(out)["jobs"]] == [job["id"]]
    finally:
        srv.terminate()
        srv.wait(timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A real `hived serve` (server token may name the user; anna also has her own token)."""
    tmp = tmp_path_factory.mktemp("served")
    d = tmp / "data"
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps({"tok-anna": "anna"}))
    # its data dir is in pytest's root-only temp folder: jobs as the server's account
    # (hived.testing.job_account says why)
    env = dict(os.environ, HIVED_SCHEME=SCHEME, HIVED_JOB_ACCOUNT="server")
    for k in ("HIVED_URL", "HIVED_TOKEN", "HIVED_USER", "HIVED_DATA_DIR"):
        env.pop(k, None)
    exe = [sys.executable, "-m", "hived.cli.main"]
    srv = subprocess.Popen(exe + ["serve", "--spec", SPEC, "--data-dir", str(d), "--port", "0",
                                  "--trust-user-header", "--user-tokens", str(tokens), "--tick", "0.1", "--allow-root"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not (d / "server.json").exists():
        assert srv.poll() is None and time.time() < deadline, srv.stdout.read().decode()[-2000:]
        time.sleep(0.1)

    def cli(*argv, **extra_env):
        p = subprocess.run(exe + list(argv), env=dict(env, HIVED_DATA_DIR=str(d), **extra_env),
                           capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr
    cli.data_dir = d
    try:
        yield cli
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def test_served_status_is_a_summary(served):
    code, out, err = served("submit", "--vc", "vca", "--user", "alice", "--wait", "--", "true")
    assert code == 0, err
    code, out, err = served("status", "--user", "alice")
    assert code == 0, err
    assert out.startswith("hived: service up at http://") and "you are alice (VCs: vca)" in out
    code, out_admin, _ = served("status", "--user", "root")
    assert "you are root (VCs: vca, vcb; cluster admin: sees and may cancel every job)" in out_admin
    assert "  jobs: " in out and " succeeded" in out
    assert "  recovery at start: 0 job(s) read back, 0 still running adopted, 0 to relaunch, 0 lost" in out
    assert "unhealthy GPUs: 0" in out and "None" not in out
    code, out, _ = served("status", "--user", "alice", "--json")
    doc = json.loads(out)
    assert doc["jobs"]["succeeded"] >= 1 and doc["recovered"]["lost"] == 0
    assert "data_dir" not in doc and "pid" not in doc        # alice is no admin
    code, out, _ = served("status", "--user", "root", "--json")
    assert "data_dir" in json.loads(out)


def test_served_exit_codes_and_error_lines(served):
    cases = [
        (["submit", "--vc", "vca", "--grace", "-1", "--", "true"], 2,
         "hived submit: grace_period: must be between 0 and 86400, got -1\n"),
        (["submit", "--vc", "vca", "--grace", "nan", "--", "true"], 2,   # JSON has no NaN: refused before sending
         "hived submit: grace_period: must be a finite number\n"),
        (["submit", "--vc", "nope", "--", "true"], 4, "hived submit: vc: no VC named 'nope'; your VCs: vca\n"),
        (["submit", "--vc", "vca", "--workdir", "/no/such/dir", "--", "true"], 2,
         "hived submit: workdir: /no/such/dir is not a folder "),    # the job's account, then the ways out
        (["submit", "--vc", "vcb", "--", "true"], 3,
         "hived submit: vc: user 'alice' may not submit to VC 'vcb' (not in its users)\n"),
        (["status", "j999"], 4, "hived status: job_id: unknown job 'j999'\n"),
        (["vc", "nope"], 4, None),
        (["jobs", "--url", "http://127.0.0.1:9/"], 5, None),
    ]
    for argv, want, line in cases:
        code, out, err = served(argv[0], "--user", "alice", *argv[1:])
        assert code == want and (line is None or err == line or
                                 (not line.endswith("\n") and err.startswith(line))), (argv, code, err)
        assert err.count("\n") == 1 and "Traceback" not in err and "[HTTP" not in err, err
    code, _, err = served("jobs", "--mine", "--owner", "bob")       # never silently drop --owner
    assert code == 2 and "not allowed with argument" in err
    code, out, _ = served("--version")
    assert code == 0 and out.startswith("hived ")
    # the token decides who you are: --user naming someone else is refused, not ignored
    code, _, err = served("jobs", "--user", "alice", "--token", "tok-anna")
    assert code == 3 and "--user: the service knows this token as 'anna'" in err
    code, out, err = served("jobs", "--user", "anna", "--token", "tok-anna")
    assert code == 0, err


def test_served_cancel_and_logs_say_what_happened(served):
    code, out, err = served("submit", "--vc", "vca", "--user", "alice", "--retries", "0", "--wait", "--",
                            "echo bad; exit 3")
    assert code == 1 and " failed (exit code 3" in out and "None" not in out, out + err
    code, out, err = served("submit", "--vc", "vca", "--user", "alice", "--grace", "5", "--json", "--",
                            "trap 'exit 0' TERM; echo started; while :; do sleep 0.1; done")
    jid = json.loads(out)["id"]
    deadline = time.time() + 30
    while json.loads(served("status", jid, "--user", "alice", "--json")[1])["state"] != "running":
        assert time.time() < deadline
        time.sleep(0.2)
    code, out, err = served("cancel", jid, "--user", "alice")
    assert code == 0 and out == f"{jid}: stopping: SIGTERM sent, SIGKILL in 5 s if still running; " \
                                "it ends as cancelled\n", out + err
    code, out, err = served("logs", jid, "-f", "--user", "alice")
    assert code == 1 and "started" in out and err == f"hived logs: job {jid} was cancelled: cancelled by alice\n", err
    code, out, _ = served("logs", jid, "--user", "alice", "--json")
    assert "\nstarted\n" in json.loads(out)["text"] and json.loads(out)["state"] == "cancelled"
    code, out, _ = served("status", jid, "--user", "alice")
    assert "was cancelled" in out and "exit None" not in out and "None" not in out


def test_served_second_cancel_kills_a_job_that_ignores_sigterm(served):
    code, out, err = served("submit", "--vc", "vca", "--user", "alice", "--grace", "3600", "--json", "--",
                            "trap '' TERM; echo started; sleep 600")
    jid = json.loads(out)["id"]
    deadline = time.time() + 30
    while json.loads(served("status", jid, "--user", "alice", "--json")[1])["state"] != "running":
        assert time.time() < deadline
        time.sleep(0.2)
    code, out, err = served("cancel", jid, "--user", "alice")
    assert code == 0 and "SIGKILL in 3600 s" in out, out + err
    code, out, err = served("cancel", jid, "--user", "alice")
    assert code == 0 and out == f"{jid}: stopping: its processes are being killed; it ends as cancelled\n", out + err
    code, out, err = served("logs", jid, "-f", "--user", "alice")   # returns once it ended: no hour's wait
    assert code == 1 and err.startswith(f"hived logs: job {jid} was cancelled"), err
    code, out, _ = served("cancel", "j999", "--user", "alice")
    assert code == 4


def test_served_names_are_printed_escaped(served):
    """Control characters never reach a terminal: a name holding them is refused at submit
    (without echoing them), and a command's newlines (a shell script may hold them) print as
    visible escapes on the job's own row."""
    import requests
    info = json.loads((served.data_dir / "server.json").read_text())

    def post(body):
        return requests.post(info["url"] + "hived/api/jobs",
                             headers={"Authorization": f"token {info['token']}", "X-Hived-User": "alice",
                                      "Content-Type": "application/json"},
                             data=json.dumps({"vc": "vca", **body}), timeout=30)

    for evil in ("\x1b[31mred", "j0\nj0  fake row", "fake\ud800"):
        r = post({"command": "true", "name": evil})
        assert r.status_code == 400 and "\x1b" not in r.text, r.text
    r = post({"command": "true\nj0  fake row \x1b[31m", "name": "script"})
    assert r.status_code == 400 and "\x1b" not in r.text, r.text   # ESC is no shell character either
    r = post({"command": "true\nj0  fake row", "name": "script"})
    assert r.status_code == 201, r.text
    code, out, err = served("status", r.json()["id"], "--user", "alice")
    assert code == 0, err
    assert "true\\nj0  fake row" in out
    assert not any(line.startswith("j0 ") for line in out.splitlines())


def test_tables_fit_the_terminal(served):
    served("submit", "--vc", "vca", "--user", "alice", "--name", "n" * 150, "--", "true")
    code, out, _ = served("jobs", "--user", "alice", COLUMNS="100")
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 100 and "…" in out


def test_submit_flags_build_the_same_body_in_every_door(tmp_path):
    from hived.cli.cmd_submit import payload_of
    from hived.cli.main import build_parser
    from hived.jupyter_ext.magics import _submit_parser, build_payload
    flags = ["--vc", "vca", "--be", "--cell-type", "T-NODE.T-SOCKET", "--retries", "2", "--grace", "7",
             "--label", "team=vision", "--env", "A=1", "--workdir", str(tmp_path), "--cpus", "6",
             "--memory", "48"]
    cli = payload_of(build_parser().parse_args(["submit", *flags, "--", "python", "x.py"]))
    magic = build_payload(_submit_parser().parse_args([*flags, "python", "x.py"]), None, "")
    assert cli["max_retries"] == 2 and cli["labels"] == {"team": "vision"} and cli["job_class"] == "be"
    assert cli["cpus"] == 6 and cli["memory_gb"] == 48     # per pod, as Slurm's --cpus-per-task/--mem
    assert {k: v for k, v in cli.items() if k != "command"} == {k: v for k, v in magic.items() if k != "command"}
    old = build_payload(_submit_parser().parse_args(["--cell", "T-NODE.T-SOCKET", "true"]), None, "")
    assert old["cell_type"] == "T-NODE.T-SOCKET"              # the old magics spelling still works


def test_simulate_says_when_its_filters_left_no_jobs(capsys, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,tenant,submit,duration,gpus\na,t1,0,3600,8\nb,t2,60,600,1\n")
    code, _, err = hived(capsys, "simulate", "--trace", str(trace), "--out", str(tmp_path / "o"),
                         "--tenants", "t2", "--from-day", "5")
    assert code == 2 and err == f"hived simulate: --trace: no jobs in {trace} after the filters --tenants, " \
                                "--from-day\n"
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "required with --trace" in " ".join(capsys.readouterr().out.split())


def test_a_second_server_on_a_busy_data_dir_is_refused_cleanly(served):
    code, out, err = served("serve", "--spec", SPEC, "--data-dir", str(served.data_dir), "--port", "0",
                             "--allow-root")
    lines = [line for line in (out + err).splitlines() if line.startswith("hived serve:")]
    assert code != 0 and len(lines) == 1 and "another hived service" in lines[0], out + err
    assert "never awaited" not in out + err and "Traceback" not in out + err


def test_served_exchange_prints_tables_and_documented_codes(served):
    code, out, err = served("exchange", "offer", "--vc", "vca", "--cell-type", "T-NODE.T-SOCKET", "--count", "1",
                            "--duration", "1h", "--user", "ada")
    assert code == 0, err
    assert out.splitlines()[0].split() == ["ID", "KIND", "VC", "CELLS", "COUNT", "FROM", "TO"]
    assert "offer  vca" in out and "no exchanges" in out
    code, out, _ = served("exchange", "board", "--user", "ada")
    assert code == 0 and "offer  vca" in out and not out.lstrip().startswith("{")
    code, out, _ = served("exchange", "board", "--user", "ada", "--json")
    assert json.loads(out)["offers"][0]["vc"] == "vca"
    code, _, err = served("exchange", "offer", "--vc", "vcb", "--cell-type", "T-NODE.T-SOCKET", "--count", "1",
                          "--duration", "1h", "--user", "ada")
    assert code == 3 and err.startswith("hived exchange: ") and "hived: " not in err and "may not trade" in err


def test_default_data_dir_is_one_root_jobs_can_pass(monkeypatch):
    """Root's home is private, so a root server defaults to /var/lib/hived (its per-VC job
    accounts must pass through the folders above the data directory); others to ~/.hived."""
    from hived.cli.main import build_parser
    from hived.service.client import default_data_dir
    monkeypatch.delenv("HIVED_DATA_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert default_data_dir() == Path("/var/lib/hived")
    assert build_parser().parse_args(["serve", "--spec", "x.yaml"]).data_dir == "/var/lib/hived"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert default_data_dir() == Path("~/.hived").expanduser()
    monkeypatch.setenv("HIVED_DATA_DIR", "/srv/hived")
    assert default_data_dir() == Path("/srv/hived") and default_data_dir("/elsewhere") == Path("/elsewhere")
