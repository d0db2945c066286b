"""`make demo` runs end to end: TE preempts BE, BE resumes, clean stop."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
