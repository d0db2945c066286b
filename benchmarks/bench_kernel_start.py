"""Kernel start on an idle VC: a hived kernel (a TE job) against Jupyter's local provisioner, same run.

Two kernelspecs that differ only in their provisioner (the same Python and ipykernel):
`hived kernelspec install --vc research --gpus 2` and a plain copy of it. Each start is
`KernelManager.start_kernel()` until the kernel answers `kernel_info` (`wait_for_ready`),
then a shutdown outside the timing; the two kinds alternate so drift hits both alike.
The hived side uses a real `hived serve` started here (demo spec, local launcher,
`--tick` seconds between scheduling rounds). Prints medians, the extra seconds and the
ratio; the target is <= 1.5 s extra.

    .venv/bin/python benchmarks/bench_kernel_start.py [--quick] [--reps N] [--tick 0.5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_EXTRA_S = 1.5
REPO = Path(__file__).resolve().parents[1]


def start_once(kernel_name: str) -> float:
    from jupyter_client.manager import KernelManager
    km = KernelManager(kernel_name=kernel_name)
    t0 = time.perf_counter()
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=120)
    took = time.perf_counter() - t0
    kc.stop_channels()
    km.shutdown_kernel()
    return took


def install_specs(prefix: Path) -> None:
    subprocess.run([sys.executable, "-m", "hived.cli.main", "kernelspec", "install", "--vc", "research",
                    "--gpus", "2", "--name", "bench-hived", "--prefix", str(prefix)], check=True,
                   capture_output=True)
    hived_dir = prefix / "share" / "jupyter" / "kernels" / "bench-hived"
    spec = json.loads((hived_dir / "kernel.json").read_text())
    spec["metadata"].pop("kernel_provisioner")
    local_dir = hived_dir.with_name("bench-local")
    local_dir.mkdir()
    (local_dir / "kernel.json").write_text(json.dumps(spec))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 starts of each kind")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--tick", type=float, default=0.5, help="the service's scheduling tick (hived serve's default)")
    args = ap.parse_args(argv)
    reps = 3 if args.quick else args.reps
    sys.path.insert(0, str(REPO))
    from hived.testing.mlflow_server import start_server, stop_server
    spec = (REPO / "examples" / "demo" / "demo_cluster.yaml").read_text()
    with tempfile.TemporaryDirectory(prefix="hived-bench-kernel-") as tmp:
        proc, info = start_server(Path(tmp), tick=args.tick, spec_text=spec,
                                  extra_env={"HIVED_JOB_ACCOUNT": "server"})
        try:
            prefix = Path(tmp) / "prefix"
            install_specs(prefix)
            os.environ.update(HIVED_URL=info["url"], HIVED_TOKEN=info["token"],
                              JUPYTER_PATH=str(prefix / "share" / "jupyter"))
            for var in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "HIVED_USER"):
                os.environ.pop(var, None)
            start_once("bench-local"), start_once("bench-hived")     # warm-up: imports, page cache
            local, hived = [], []
            for _ in range(reps):
                local.append(start_once("bench-local"))
                hived.append(start_once("bench-hived"))
        finally:
            stop_server(proc)
    ml, mh = statistics.median(local), statistics.median(hived)
    extra = mh - ml
    print(f"kernel start n={reps}: local provisioner median {ml:6.3f} s   hived median {mh:6.3f} s   "
          f"extra {extra:+6.3f} s   ratio {mh / ml:5.2f}x   (target: <= {TARGET_EXTRA_S} s extra)")
    print(f"  local: {' '.join(f'{t:.2f}' for t in local)}")
    print(f"  hived: {' '.join(f'{t:.2f}' for t in hived)}")
    print(f"server tick {args.tick} s, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at end")
    return 0 if extra <= TARGET_EXTRA_S else 1


if __name__ == "__main__":
    sys.exit(main())
