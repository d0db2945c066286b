"""`hived kernelspec install/list/remove` as an admin runs them: what they write, and bad input
refused in one line naming the option, with nothing written."""
from __future__ import annotations

import json
import subprocess

from .conftest import HIVED


def hived(*args, prefix):
    return subprocess.run([*HIVED, "kernelspec", *args, "--prefix", str(prefix)], capture_output=True, text=True,
                          env={"JUPYTER_PLATFORM_DIRS": "1", "PATH": "/usr/bin:/bin", "HOME": str(prefix)})


def test_install_writes_a_kernelspec_naming_the_provisioner_vc_and_gpus(tmp_path):
    r = hived("install", "--vc", "research", "--gpus", "2", prefix=tmp_path)
    assert r.returncode == 0, r.stderr
    spec = json.loads((tmp_path / "share/jupyter/kernels/hived-research-2gpu/kernel.json").read_text())
    assert spec["display_name"] == "Python 3 (hived: research, 2 GPUs)"
    assert spec["metadata"]["kernel_provisioner"] == {"provisioner_name": "hived-provisioner",
                                                      "config": {"vc": "research", "gpus": 2}}
    assert spec["argv"][1:] == ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
    listed = json.loads(hived("list", "--json", prefix=tmp_path).stdout)["kernelspecs"]
    assert [(s["name"], s["vc"], s["gpus"]) for s in listed] == [("hived-research-2gpu", "research", 2)]
    r = hived("remove", "hived-research-2gpu", prefix=tmp_path)
    assert r.returncode == 0 and not (tmp_path / "share/jupyter/kernels/hived-research-2gpu").exists()


def test_bad_input_is_one_line_naming_the_option_and_writes_nothing(tmp_path):
    for args, line in [
        (["--vc", "research", "--gpus", "0"], "--gpus: must be between 1 and 1024, got 0"),
        (["--vc", "", "--gpus", "1"], "--vc: must be a VC name (1 to 128 characters, no spaces or '/'), got ''"),
        (["--vc", "research", "--gpus", "1", "--name", "a/b"],
         "--name: must use only letters, digits, '.', '_' and '-', got 'a/b'"),
        (["--vc", "research", "--gpus", "1", "--start-timeout", "0"],
         "--start-timeout: must be between 1 and 86400 seconds, got 0"),
    ]:
        r = hived("install", *args, prefix=tmp_path)
        assert r.returncode == 2 and r.stderr == f"hived kernelspec install: {line}\n"
    assert not (tmp_path / "share").exists()


def test_remove_touches_only_hived_kernelspecs(tmp_path):
    other = tmp_path / "share/jupyter/kernels/plain"
    other.mkdir(parents=True)
    (other / "kernel.json").write_text(json.dumps({"argv": ["python"], "display_name": "plain", "language": "python"}))
    r = hived("remove", "plain", prefix=tmp_path)
    assert r.returncode == 4 and "is not a hived kernel" in r.stderr and other.exists()
    r = hived("remove", "nothing-here", prefix=tmp_path)
    assert r.returncode == 4 and "no kernelspec named 'nothing-here'" in r.stderr
