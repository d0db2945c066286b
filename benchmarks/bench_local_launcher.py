"""Benchmark: what the local launcher's supervision costs per job.

Same run, same command (``/bin/true``), jobs one after another:

- baseline: the least a Python supervisor costs: ``python -I -S`` starting
  the command with ``subprocess.run`` and waiting for it;
- launcher: ``LocalLauncher.launch`` until ``poll()`` reports the job exited
  (the pod runner starts, sets up the pod, runs the command under it, sweeps
  what is left, writes the exit code), with a cgroup per pod (where this
  host offers a writable cgroup v2) and with the process-tree sweep only;
  as root, also with a uid per VC.

Reported: median milliseconds per job and the ratio to the baseline.

Run: .venv/bin/python benchmarks/bench_local_launcher.py [--quick] [--jobs N]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from hived.core.jobs import JobRequest, Placement, PodPlacement
from hived.service.local_launcher import LocalLauncher

PLACEMENT = Placement("A", (PodPlacement(0, "n0", ()),))


def run_job(la: LocalLauncher, job_id: str) -> float:
    t0 = time.perf_counter()
    la.launch(job_id, JobRequest(user="u", vc="v", command=["/bin/true"]), PLACEMENT, 1)
    while not any(e.kind == "exited" for e in la.poll()):
        time.sleep(0.002)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10 jobs per variant")
    ap.add_argument("--jobs", type=int, default=40)
    args = ap.parse_args()
    n = 10 if args.quick else args.jobs
    base = tempfile.mkdtemp(prefix="hived-bench-")
    os.chmod(base, 0o711)   # a uid per VC must be able to reach its job folder
    try:
        variants = {"cgroup": ("auto", "server"), "sweep": ("off", "server")}
        if os.geteuid() == 0:
            variants["cgroup, uid per VC"] = ("auto", "vc")
        launchers = {name: LocalLauncher(os.path.join(base, name.replace(" ", "_").replace(",", ""), "jobs"),
                                         cgroups=cg, job_account=acct)
                     for name, (cg, acct) in variants.items()}
        times: dict[str, list[float]] = {"baseline": [], **{k: [] for k in variants}}
        for i in range(n):   # interleaved, so a busy moment hits every variant alike
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-I", "-S", "-c",
                            "import subprocess; subprocess.run(['/bin/true'])"], check=True)
            times["baseline"].append(time.perf_counter() - t0)
            for name, la in launchers.items():
                times[name].append(run_job(la, f"j{i}"))
        ref = statistics.median(times["baseline"])
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"{name:20s} median {m * 1000:7.1f} ms per job   x{m / ref:5.1f} baseline")
        print(f"({n} jobs each; cgroup in use: {next(iter(launchers.values())).cgroup_base is not None})")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
