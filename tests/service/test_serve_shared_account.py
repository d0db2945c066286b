"""A ``hived serve`` that does not run as root runs every VC's local jobs as its own account: with
several VCs it says so when it starts, and ``hived status`` shows it to admins (not to members)."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

SPEC = Path(__file__).with_name("spec_small.yaml")
NOBODY = pwd.getpwnam("nobody")
pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"),
                                reason="starts hived serve as another account (needs root and setpriv)")


@pytest.fixture
def nonroot_serve():
    base = Path(tempfile.mkdtemp(prefix="hived-nonroot-"))
    os.chmod(base, 0o711)
    home = base / "srv"
    home.mkdir()
    (home / "token").write_text("tok-server\n")
    (home / "tokens.json").write_text(json.dumps({"tok-root": "root", "tok-alice": "alice"}))
    for path in (home, home / "token", home / "tokens.json"):
        os.chown(path, NOBODY.pw_uid, NOBODY.pw_gid)
        os.chmod(path, 0o700 if path.is_dir() else 0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTER"))}
    env["HOME"] = str(home)
    log = open(base / "serve.log", "w")
    proc = subprocess.Popen(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                             sys.executable, "-m", "hived.cli.main", "serve", "--spec", str(SPEC),
                             "--data-dir", str(home / "data"), "--port", "0", "--token-file", str(home / "token"),
                             "--user-tokens", str(home / "tokens.json")],
                            env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(home))
    info = home / "data" / "server.json"
    deadline = time.monotonic() + 90
    while not info.exists():
        assert proc.poll() is None and time.monotonic() < deadline, (base / "serve.log").read_text()[-3000:]
        time.sleep(0.1)
    yield json.loads(info.read_text())["url"], base / "serve.log"
    proc.terminate()
    proc.wait(20)
    log.close()
    shutil.rmtree(base, ignore_errors=True)


def test_a_non_root_serve_with_several_vcs_says_its_jobs_share_one_account(nonroot_serve):
    url, log = nonroot_serve
    said = f"the jobs of all 2 VCs (vca, vcb) run as one account (uid {NOBODY.pw_uid})"
    start = [line for line in log.read_text().splitlines() if line.startswith("warning: ")]
    assert any(said in line and "hived does not run as root" in line for line in start), log.read_text()[-2000:]

    def summary(token):
        return requests.get(url + "hived/api/summary", headers={"Authorization": f"token {token}"}, timeout=30).json()
    assert said in summary("tok-root")["shared_account"]
    assert "shared_account" not in summary("tok-alice")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVED_")}
    out = subprocess.run([sys.executable, "-m", "hived.cli.main", "status"], capture_output=True, text=True,
                         timeout=60, env={**env, "HIVED_URL": url, "HIVED_TOKEN": "tok-root"})
    assert out.returncode == 0 and f"  warning: hived does not run as root: {said}" in out.stdout, out
