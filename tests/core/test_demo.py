"""The fragmentation demo (``make demo`` part): Figure 2's anomaly under quota, none under hived."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "demo" / "fragmentation.py"


def _load():
    spec = importlib.util.spec_from_file_location("hived_fragmentation_demo", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_demo_shows_anomaly_and_its_absence(capsys):
    mod = _load()
    assert mod.main() == 0
    out = capsys.readouterr().out
    assert "VC vision:" in out and "VC interns:" in out          # the demo cluster's VC views
    quota, hived = out.split("--- quota")[1].split("--- hived")
    assert "a5 (A, 2 GPUs)  -> GPUs 5,6" in quota and "b1 (B, 4 GPUs)  -> CANNOT RUN" in quota
    assert "runs opportunistically (low priority) on GPUs 5,6" in hived
    assert "b1 (B, 4 GPUs)  -> GPUs 5,6,7,8, preempting a5" in hived
    assert "result: b1 runs under quota: no; under hived: yes" in out
