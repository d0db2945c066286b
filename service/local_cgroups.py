"""cgroup v2 for local pods: one cgroup per pod, so every descendant is found and killed.

The pods' cgroups live under ``<cgroup2 mount>/hived/<id of the jobs folder>/``.
``/sys/fs/cgroup`` is used when it is a cgroup v2 mount, otherwise the first
other cgroup v2 mount (``/sys/fs/cgroup/unified`` on hybrid hosts). Memory and
CPU limits apply when the mount offers those controllers; on a host where the
cgroup cannot be created (no cgroup v2, not writable, ``$HIVED_CGROUPS=off``)
the pod runner falls back to sweeping its process tree.
"""
from __future__ import annotations

import errno
import hashlib
import os
import time
from pathlib import Path

CPU_PERIOD = 100_000


def cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"]]
    except OSError:
        return None
    if "/sys/fs/cgroup" in mounts:
        return Path("/sys/fs/cgroup")
    return Path(mounts[0]) if mounts else None


def cgroup_base(jobs_root: Path, setting: str | None = None) -> Path | None:
    """The folder for this service's pod cgroups, or None (then: process-tree sweep)."""
    setting = (setting or os.environ.get("HIVED_CGROUPS") or "auto").lower()
    if setting not in ("auto", "off"):
        raise ValueError(f"$HIVED_CGROUPS: must be auto or off, got {setting!r}")
    mount = cgroup2_mount() if setting == "auto" else None
    if mount is None:
        return None
    # one folder per jobs directory: two services on one host may both have a job j1
    tag = hashlib.sha256(str(Path(jobs_root).resolve()).encode()).hexdigest()[:12]
    base = mount / "hived" / tag
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(base / "cgroup.procs", os.W_OK):
        return None
    for parent in (mount, mount / "hived", base):
        # best effort: a parent that holds processes cannot hand controllers down
        for ctl in ("memory", "cpu", "pids"):
            try:
                (parent / "cgroup.subtree_control").write_text(f"+{ctl}")
            except OSError:
                pass
    return base


def pod_limits(cpus: float | None, memory_gb: float | None) -> dict:
    """cgroup files for a pod's own ``cpus``/``memory_gb`` (none when unset)."""
    out: dict[str, int | str] = {}
    if memory_gb:
        out["memory.max"] = int(memory_gb * (1 << 30))
    if cpus:
        out["cpu.max"] = f"{max(1000, int(cpus * CPU_PERIOD))} {CPU_PERIOD}"
    return out


def kill(path: str | None) -> None:
    """SIGKILL everything in the cgroup (kernel 5.14+); used when the pod's runner is gone."""
    if not path:
        return
    try:
        with open(os.path.join(path, "cgroup.kill"), "w") as f:
            f.write("1")
    except OSError:
        pass


def remove(path: str | None, wait: float = 1.0) -> None:
    """Remove an emptied cgroup; processes just killed may take a moment to leave it."""
    if not path:
        return
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return   # gone already, not ours, or a live process still holds it
        time.sleep(0.05)
