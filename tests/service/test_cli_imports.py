"""What a `hived` command imports: only what it needs, so that commands are instant.

Each command runs in a fresh process under ``python -X importtime``, which
lists every module the process imported; the job commands run for real
against a live `hived serve` (refusals included: mapping one to its exit code
must not import the scheduler either).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

SPEC = str(Path(__file__).with_name("spec_small.yaml"))
DEMO_SPEC = str(Path(__file__).resolve().parents[2] / "examples" / "demo" / "demo_cluster.yaml")

# what a job command talking to a service has no use for
HEAVY = ("jsonschema", "fastjsonschema", "tornado", "jupyter_server", "jupyter_core", "traitlets", "mlflow",
         "numpy", "scipy", "requests", "urllib3", "yaml", "ipykernel", "IPython", "kubernetes", "sqlite3",
         "tqdm", "psutil", "hived.core", "hived.jupyter_ext", "hived.service.scheduler", "hived.service.store")
# the job states' names are defined once, in hived.core.jobs (enum and dataclasses only): the client reads them
LIGHT = ("hived.core", "hived.core.jobs")
_LINE = re.compile(r"^import time:\s+\d+ \|\s+\d+ \| ( *)(\S+)$")


def imported(argv: list[str], env: dict[str, str]) -> tuple[int, set[str], str]:
    """(exit code, modules imported, stderr without the import lines) of ``python -m hived.cli.main ARGV``."""
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "hived.cli.main", *argv], env=env,
                       capture_output=True, text=True, timeout=60)
    mods, rest = set(), []
    for line in p.stderr.splitlines():
        m = _LINE.match(line)
        if m:
            mods.add(m.group(2))
        elif not line.startswith("import time:"):
            rest.append(line)
    assert "hived.cli.main" in mods or "hived.cli" in mods, p.stderr[-2000:]   # the listing itself works
    return p.returncode, mods, "\n".join(rest)


def heavy_in(mods: set[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted(m for m in mods if m not in LIGHT and any(m == h or m.startswith(h + ".") for h in heavy))


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A live `hived serve` (local launcher); the environment that finds it through its data dir."""
    d = tmp_path_factory.mktemp("imports") / "data"
    base = {k: v for k, v in os.environ.items()
            if k not in ("HIVED_URL", "HIVED_TOKEN", "HIVED_USER", "HIVED_DATA_DIR")}
    base["HIVED_JOB_ACCOUNT"] = "server"   # data dir in pytest's root-only temp folder (hived.testing.job_account)
    srv = subprocess.Popen([sys.executable, "-m", "hived.cli.main", "serve", "--spec", SPEC, "--data-dir", str(d),
                            "--port", "0", "--trust-user-header", "--tick", "0.1", "--allow-root"],
                           env=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.time() + 60
    while not (d / "server.json").exists():
        assert srv.poll() is None and time.time() < deadline, srv.stdout.read().decode()[-2000:]
        time.sleep(0.1)
    try:
        env = dict(base, HIVED_DATA_DIR=str(d), HIVED_USER="alice")
        # j1, which `status j1` and `logs j1` read, exists whatever test runs first
        subprocess.run([sys.executable, "-m", "hived.cli.main", "submit", "--vc", "vca", "--", "true"],
                       env=env, check=True, capture_output=True, timeout=60)
        yield env
    finally:
        srv.terminate()
        srv.wait(timeout=30)


def test_top_level_help_imports_no_command_module():
    code, mods, _ = imported(["--help"], dict(os.environ))
    assert code == 0
    assert sorted(m for m in mods if m.startswith("hived.cli.cmd_")) == []
    assert heavy_in(mods, HEAVY + ("hived.service", "http.client", "importlib.metadata", "asyncio")) == []


def test_spec_check_imports_no_server_and_no_http():
    code, mods, err = imported(["spec", "check", DEMO_SPEC], dict(os.environ))
    assert code == 0, err
    assert heavy_in(mods, ("jsonschema", "tornado", "jupyter_server", "mlflow", "numpy", "scipy", "requests",
                           "http.client", "hived.service.client", "hived.service.scheduler", "hived.service.store",
                           "hived.core.engine", "hived.core.allocator")) == []


def test_a_submit_round_trip_imports_nothing_heavy(env):
    code, mods, err = imported(["submit", "--vc", "vca", "--", "true"], env)
    assert code == 0, err
    assert heavy_in(mods) == []


@pytest.mark.parametrize("argv", [
    ["jobs"], ["jobs", "--help"], ["submit", "--help"], ["status"], ["status", "j1"], ["vc"], ["vc", "vca"],
    ["logs", "j1"], ["gc", "--dry-run", "--user", "ada"], ["exchange", "board"],
])
def test_job_commands_import_nothing_heavy(env, argv):
    code, mods, err = imported(argv, env)
    assert code == 0, err
    assert heavy_in(mods) == []


@pytest.mark.parametrize("argv, want", [
    (["cancel", "j999"], 4),                                     # not found
    (["submit", "--vc", "vcb", "--", "true"], 3),                # not allowed
    (["submit", "--vc", "vca", "--gpus", "99", "--", "true"], 2),  # refused
    (["jobs", "--url", "http://127.0.0.1:9/"], 5),               # no service there
])
def test_refusals_get_their_exit_code_without_heavy_imports(env, argv, want):
    code, mods, err = imported(argv, env)
    assert code == want and err.count("\n") == 0 and err.startswith("hived "), err
    assert heavy_in(mods) == []


def test_jobs_answer_is_the_services(env):
    """The light path is the real path: what the listing prints is what the service holds."""
    p = subprocess.run([sys.executable, "-m", "hived.cli.main", "jobs", "--json"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    info = json.loads((Path(env["HIVED_DATA_DIR"]) / "server.json").read_text())
    from hived.service.client import HivedClient
    listed = [(j["id"], j["user"], j["vc"]) for j in json.loads(p.stdout)["jobs"]]
    held = [(j["id"], j["user"], j["vc"]) for j in HivedClient(info["url"], info["token"], user="alice").jobs()]
    assert listed == held and listed
