"""Overhead of `mlflow run --backend hived` over `--backend local`, same run.

A trivial MLproject (one `python -c` that fails unless it got its run id) is run both
ways against the same sqlite tracking store: in-process through
mlflow.projects.run(synchronous=True), and through the `mlflow run` CLI.
The hived side uses a real `hived serve` started here (local launcher,
default 0.5 s scheduling tick). Prints medians, the extra seconds and the
ratio; the target is <= 1.5 s extra.

    .venv/bin/python benchmarks/bench_mlflow.py [--quick] [--tick 0.5]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_EXTRA_S = 1.5
MLPROJECT = """name: trivial
entry_points:
  main:
    command: "python -c 'import os; os.environ[\\"MLFLOW_RUN_ID\\"]'"
"""


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_api(project: str, cfg: dict, reps: int) -> dict:
    import mlflow
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("hived").setLevel(logging.WARNING)
    def run(backend, config):
        # synchronous runs echo the job's output (and the launcher's lines) to stdout
        with contextlib.redirect_stdout(io.StringIO()):
            mlflow.projects.run(project, backend=backend, backend_config=config,
                                env_manager="local", synchronous=True)
    run("local", None), run("hived", dict(cfg))  # warm-up: imports, first store writes
    local, hived = [], []
    for _ in range(reps):  # interleaved, so drift hits both sides alike
        local.append(_time(lambda: run("local", None)))
        hived.append(_time(lambda: run("hived", dict(cfg))))
    return {"local": local, "hived": hived}


def bench_cli(project: str, cfg: dict, reps: int, env: dict, cwd: str) -> dict:
    mlflow_bin = os.path.join(os.path.dirname(sys.executable), "mlflow")

    def cli(backend: str, config) -> None:
        cmd = [mlflow_bin, "run", project, "--backend", backend, "--env-manager", "local"]
        if config:
            cmd += ["--backend-config", json.dumps(config)]
        proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"mlflow run --backend {backend} failed: {proc.stderr[-1000:]}")
    local, hived = [], []
    for _ in range(reps):
        local.append(_time(lambda: cli("local", None)))
        hived.append(_time(lambda: cli("hived", cfg)))
    return {"local": local, "hived": hived}


def report(name: str, res: dict) -> float:
    ml, mh = statistics.median(res["local"]), statistics.median(res["hived"])
    extra = mh - ml
    print(f"{name:<22} n={len(res['local']):<3} local median {ml:7.3f} s   hived median {mh:7.3f} s"
          f"   extra {extra:+.3f} s   ratio {mh / ml:5.2f}x   "
          f"[{'ok' if extra <= TARGET_EXTRA_S else 'OVER'} vs target {TARGET_EXTRA_S} s]"
          # minima: on a loaded machine the least disturbed run of each side
          f"   (min local {min(res['local']):.3f} s, hived {min(res['hived']):.3f} s)")
    return extra


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="few repetitions (< 60 s)")
    ap.add_argument("--tick", type=float, default=0.5, help="scheduling tick of the server")
    args = ap.parse_args(argv)
    api_reps, cli_reps = (3, 1) if args.quick else (15, 7)

    from hived.testing.mlflow_server import VC, start_server, stop_server
    tmp = Path(tempfile.mkdtemp(prefix="bench_mlflow_"))
    project = tmp / "project"
    project.mkdir()
    (project / "MLproject").write_text(MLPROJECT)
    uri = f"sqlite:///{tmp}/mlflow.db"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ["HIVED_DATA_DIR"] = str(tmp)  # checkpoint dirs land here
    # the store and checkpoints sit in a private temp folder: jobs run as this account
    proc, info = start_server(tmp, tick=args.tick, job_account="server")
    cfg = {"vc": VC, "gpus": 1, "service_url": info["url"], "token": info["token"]}
    try:
        print(f"server tick {args.tick} s, tracking store {uri}, {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f} at start")
        extra_api = report("mlflow.projects.run", bench_api(str(project), cfg, api_reps))
        extra_cli = report("mlflow run (CLI)", bench_cli(str(project), cfg, cli_reps,
                                                         dict(os.environ), str(tmp)))
        print(f"load average {os.getloadavg()[0]:.1f} at end")
    finally:
        stop_server(proc)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if max(extra_api, extra_cli) <= TARGET_EXTRA_S else 1


if __name__ == "__main__":
    sys.exit(main())
