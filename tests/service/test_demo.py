"""`make demo` runs end to end: TE preempts BE, BE resumes, clean stop."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.default_job_account   # the demo as users run it (it picks its own account)


def test_demo_runs_end_to_end(tmp_path):
    env = dict(os.environ, HIVED_SCHEME=os.environ.get("HIVED_TEST_SCHEME", "hived"))
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "demo" / "run_demo.py"),
                        "--data-dir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=150, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    # the cell-core section ran (or says plainly that its script is missing)
    assert "1. Why cells" in out
    frag = ROOT / "examples" / "demo" / "fragmentation.py"
    assert ("(skipped: examples/demo/fragmentation.py is not in this build)" in out) != frag.exists()
    assert "FitGpp picked" in out and "SIGTERM at step" in out
    assert "resuming from checkpoint at step" in out
    assert "service stopped cleanly" in out and "demo finished" in out
    assert "Traceback" not in out
    # idle cells: a job beyond its VC's share, preempted when the owner comes back
    idle = out.split("4. Idle cells")[1].split("5. Cell exchange")[0]
    assert "(opportunistic: True)" in idle and "is preempted: cells taken back by guaranteed job" in idle
    # a cell exchange loan, and a guaranteed job on the borrowed cell
    loan = out.split("5. Cell exchange")[1].split("6. Stopping")[0]
    assert "matched: exchange x1 (active): research -> product: 1 cell(s)" in loan
    # the views count the loan: research holds none of its 8 GPUs now, product 16
    assert "research            0/0  1/0" in loan and "product            8/16  0/1" in loan
    assert "(opportunistic: False)" in loan
    # no promise about a folder it deletes: --data-dir keeps it, and it says where
    assert f"every state change is in {tmp_path / 'demo' / 'hived.db'}" in out
    assert "Try next" in out and "hived submit" in out.split("Try next")[1]


def test_demo_takes_the_gpus_it_suggests(tmp_path):
    """Without a GPU the demo's advice is --gpus N: it takes it, and the temporary store it removes
    is called temporary."""
    env = dict(os.environ, HIVED_SCHEME=os.environ.get("HIVED_TEST_SCHEME", "hived"))
    demo = [sys.executable, str(ROOT / "examples" / "demo" / "run_demo.py")]
    p = subprocess.run(demo + ["--gpus", "0"], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode != 0 and "demo: --gpus 0:" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(demo + ["--gpus", "8"], capture_output=True, text=True, timeout=150, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "using a virtual node of 8 GPUs" in out and "FitGpp picked" in out
    assert "a temporary folder, removed at the end" in out and "is removed (run with --keep" in out
    assert "every state change is in" not in out


def load_run_demo():
    import importlib.util
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "examples" / "demo" / "run_demo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cell_core_section_relays_output_and_fails_loudly(tmp_path, capsys, monkeypatch):
    import pytest
    demo = load_run_demo()
    script = tmp_path / "fragmentation.py"
    monkeypatch.setattr(demo, "ROOT", tmp_path)
    monkeypatch.setattr(demo, "FRAGMENTATION", script)
    demo.fragmentation()
    assert "(skipped: fragmentation.py is not in this build)" in capsys.readouterr().out
    script.write_text("print('quota: b1 cannot run'); print('hived: b1 runs')\n")
    demo.fragmentation()
    assert capsys.readouterr().out == "  quota: b1 cannot run\n  hived: b1 runs\n"
    script.write_text("import sys; print('half way'); sys.exit(3)\n")
    with pytest.raises(SystemExit, match="fragmentation.py exited with code 3"):
        demo.fragmentation()
    script.write_text("import time; time.sleep(30)\n")
    monkeypatch.setattr(demo, "FRAGMENTATION_TIMEOUT", 0.5)
    with pytest.raises(SystemExit, match="ran past 0.5 s and was killed"):
        demo.fragmentation()


@pytest.mark.skipif(os.geteuid() != 0, reason="switching job accounts needs root")
def test_demo_as_root_with_per_vc_accounts_says_what_fails_before_any_job(tmp_path):
    """HIVED_JOB_ACCOUNT= (empty: the default, a uid per VC): this suite's python sits under
    /root, which those uids cannot enter. The demo says so before its first job, not after
    waiting for jobs that failed at once."""
    env = dict(os.environ, HIVED_SCHEME=os.environ.get("HIVED_TEST_SCHEME", "hived"), HIVED_JOB_ACCOUNT="")
    p = subprocess.run([sys.executable, str(ROOT / "examples" / "demo" / "run_demo.py"),
                        "--data-dir", str(tmp_path / "demo")],
                       capture_output=True, text=True, timeout=150, env=env)
    assert p.returncode != 0
    assert "timed out" not in p.stderr and "Traceback" not in p.stderr
    assert "demo: the jobs of VC " in p.stderr and "cannot run here: " in p.stderr
    assert "unix account hived-" in p.stderr and "HIVED_JOB_ACCOUNT=server" in p.stderr
    assert "3. Jobs" not in p.stdout       # no job was submitted
