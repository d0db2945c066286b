"""The Philly trace ships inside the package: ``--trace philly`` needs no shared folder.

The end-to-end test copies the repository's files (what git tracks or would
track) into a temporary folder with no ``shared/`` beside it, builds a wheel
from the copy, installs it into a folder of its own and runs the CLI from
there with ``HIVED_SHARED`` unset: a normal (non-editable) install.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hived.core.allox import workload
from hived.core.sim.traces import PHILLY_DIR, read_philly

REPO = Path(__file__).resolve().parents[2]


def test_packaged_files_carry_the_attribution():
    d = Path(PHILLY_DIR)
    assert d.is_relative_to(REPO / "core")          # the editable install reads the package folder
    assert {"philly_jobs.csv.gz", "machines.csv", "vc_nodes.csv", "README.md"} <= {p.name for p in d.iterdir()}
    notice = (d / "README.md").read_text(encoding="utf-8")
    assert "CC-BY-4.0" in notice and "Jeon" in notice
    assert Path(workload.PHILLY).parent == d
    assert len(read_philly(PHILLY_DIR).jobs) == 82229


def _copy_repo(dst: Path) -> None:
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dst / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / name)


def test_simulate_philly_from_an_installed_copy_without_shared(tmp_path):
    repo, wheels, site, work = (tmp_path / n for n in ("repo", "wheels", "site", "work"))
    for d in (repo, work):
        d.mkdir()
    _copy_repo(repo)
    assert not (repo.parent / "shared").exists()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", str(repo), "--no-deps", "--no-build-isolation", "-w", str(wheels)],
                   check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = wheels.glob("hived-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, cwd=tmp_path)

    env = {k: v for k, v in os.environ.items() if k != "HIVED_SHARED"}
    env["PYTHONPATH"] = str(site)   # ahead of the editable install of this worktree
    where = subprocess.run([sys.executable, "-c", "import hived.core.sim.traces as t; print(t.PHILLY_DIR)"],
                           env=env, cwd=work, check=True, capture_output=True, text=True).stdout.strip()
    assert Path(where) == site / "hived" / "core" / "sim" / "data" / "philly"

    p = subprocess.run([sys.executable, "-m", "hived.cli.main", "simulate", "--trace", "philly",
                        "--tenants", "e13805", "--from-day", "85", "--days", "3", "--scheme", "quota",
                        "--out", "out", "--no-progress"],
                       env=env, cwd=work, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    summary = json.loads((work / "out" / "summary.json").read_text())
    run = summary["runs"]["quota"]
    assert run["jobs"] == 12 and run["started"] == 12 and run["quotas_gpus"] == {"e13805": 8}
