"""Kernelspecs whose kernel is a hived TE job: written, listed and removed
(``hived kernelspec install/list/remove``, docs/kernels.md).

A hived kernelspec is an ordinary ``kernel.json`` running ``ipykernel`` with this
Python, whose ``metadata.kernel_provisioner`` names ``hived-provisioner`` and
carries the VC and the GPU count; JupyterLab's launcher shows it like any other.
"""
from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

PROVISIONER = "hived-provisioner"
MAX_GPUS = 1024
NAME = re.compile(r"^[a-z0-9._-]+$", re.IGNORECASE)   # what jupyter_client accepts as a kernel name


class KernelspecError(ValueError):
    """Bad input: ``str(e)`` is one line naming the field, the value and the limit."""


def default_name(vc: str, gpus: int) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", f"hived-{vc}-{gpus}gpu".lower())


def default_display_name(vc: str, gpus: int) -> str:
    return f"Python 3 (hived: {vc}, {gpus} GPU{'' if gpus == 1 else 's'})"


def kernel_json(vc: str, gpus: int, display_name: str, start_timeout: float | None = None) -> dict:
    config: dict = {"vc": vc, "gpus": gpus}
    if start_timeout is not None:
        config["start_timeout"] = start_timeout
    return {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": display_name, "language": "python", "interrupt_mode": "signal",
        "metadata": {"debugger": True, "kernel_provisioner": {"provisioner_name": PROVISIONER, "config": config}},
    }


def check(vc: str, gpus: int, name: str, start_timeout: float | None) -> None:
    if not vc or len(vc) > 128 or any(c.isspace() or c == "/" for c in vc):
        raise KernelspecError(f"--vc: must be a VC name (1 to 128 characters, no spaces or '/'), got {vc!r}")
    if not 1 <= gpus <= MAX_GPUS:
        raise KernelspecError(f"--gpus: must be between 1 and {MAX_GPUS}, got {gpus}")
    if not NAME.match(name):
        raise KernelspecError(f"--name: must use only letters, digits, '.', '_' and '-', got {name!r}")
    if start_timeout is not None and not 1 <= start_timeout <= 86400:
        raise KernelspecError(f"--start-timeout: must be between 1 and 86400 seconds, got {start_timeout:g}")


def install(vc: str, gpus: int, name: str | None = None, display_name: str | None = None, *,
            prefix: str | None = None, user: bool = False, start_timeout: float | None = None) -> Path:
    """Write the kernelspec; returns its folder. ``prefix`` None and ``user`` False: the system's."""
    name = name if name is not None else default_name(vc, gpus)
    check(vc, gpus, name, start_timeout)
    with tempfile.TemporaryDirectory() as tmp:
        spec = kernel_json(vc, gpus, display_name or default_display_name(vc, gpus), start_timeout)
        (Path(tmp) / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
        where = KernelSpecManager().install_kernel_spec(tmp, name, user=user, prefix=prefix)
    return Path(where)


def _manager(prefix: str | None) -> KernelSpecManager:
    ksm = KernelSpecManager()
    if prefix:
        ksm.kernel_dirs = [str(Path(prefix) / "share" / "jupyter" / "kernels"), *ksm.kernel_dirs]
    return ksm


def installed(prefix: str | None = None) -> list[dict]:
    """The hived kernelspecs Jupyter finds (plus those under ``prefix``): name, folder, VC, GPUs."""
    out = []
    for name, found in sorted(_manager(prefix).get_all_specs().items()):
        prov = (found["spec"].get("metadata") or {}).get("kernel_provisioner") or {}
        if prov.get("provisioner_name") != PROVISIONER:
            continue
        config = prov.get("config") or {}
        out.append({"name": name, "path": found["resource_dir"], "vc": config.get("vc"),
                    "gpus": config.get("gpus"), "display_name": found["spec"].get("display_name")})
    return out


def remove(name: str, prefix: str | None = None) -> Path:
    """Remove a hived kernelspec; one that is not hived's is refused (KernelspecError)."""
    ksm = _manager(prefix)
    try:
        spec = ksm.get_kernel_spec(name)
    except NoSuchKernel:
        raise KernelspecError(f"name: no kernelspec named {name!r}") from None
    prov = (spec.metadata or {}).get("kernel_provisioner") or {}
    if prov.get("provisioner_name") != PROVISIONER:
        raise KernelspecError(f"name: kernelspec {name!r} is not a hived kernel ({spec.resource_dir}); "
                              "remove it with 'jupyter kernelspec remove'")
    return Path(ksm.remove_kernel_spec(name))
