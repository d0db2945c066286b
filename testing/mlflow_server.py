"""A throw-away local `hived serve` for tests, benchmarks and trying the backend out.

Starts ``hived serve`` in its own session with a one-node spec (one VC
owning 4 GPUs, the current user its member) and waits for its
``server.json``. Not used by the backend itself.

    python -m hived.testing.mlflow_server [DIR]   # serves until Ctrl-C or SIGTERM, prints what to export
"""
from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

VC = "ml"
VC_GPUS = 4


def current_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry (containers): jupyter-server's fallback name
        return "jupyter"


def spec_yaml(user: str, vc: str = VC, gpus: int = VC_GPUS) -> str:
    return f"""
physicalCluster:
  cellTypes:
    ML-NODE: {{childCellType: GPU, childCellNumber: {gpus}, isNodeLevel: true, cpus: 32, memoryGB: 256}}
    ML-RACK: {{childCellType: ML-NODE, childCellNumber: 1}}
  physicalCells:
    - cellType: ML-RACK
      cellChildren: [{{cellAddress: mlnode0}}]
virtualClusters:
  {vc}:
    virtualCells: [{{cellType: ML-RACK.ML-NODE, cellNumber: 1}}]
    users: [{user}]
"""


def start_server(tmp: Path, tick: float = 0.5, timeout: float = 60.0, port: int = 0,
                 job_account: str | None = None, spec_text: str | None = None,
                 extra_env: dict | None = None, args: tuple[str, ...] = ()):
    """(process, {"url","token","pid","data_dir"}) of a fresh `hived serve` under ``tmp``.

    ``port``: 0 picks a free one. ``job_account``: ``$HIVED_JOB_ACCOUNT`` for the server
    (None: the caller's environment decides; as root the default runs jobs under a uid
    of their own, which must reach the python, the project and the tracking store).
    ``spec_text``: another cluster spec than the one-node one; ``extra_env``: more of the
    server's environment; ``args``: more `hived serve` options."""
    tmp = Path(tmp)
    spec = tmp / "cluster.yaml"
    spec.write_text(spec_text if spec_text is not None else spec_yaml(current_user()))
    data = tmp / "hived-data"
    bindir = os.path.dirname(sys.executable)
    # jobs run `python ...`: the one of this environment, which has mlflow
    env = {**os.environ, "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
           "HIVED_TOKEN": "hived-dev-" + os.urandom(8).hex(), **(extra_env or {})}
    env.pop("HIVED_URL", None)
    if job_account is not None:
        env["HIVED_JOB_ACCOUNT"] = job_account
    log_path = tmp / "serve.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen([os.path.join(bindir, "hived"), "serve", "--spec", str(spec),
                                 "--data-dir", str(data), "--port", str(port), "--tick", str(tick), *args]
                                + (["--allow-root"] if os.geteuid() == 0 else []),
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    info_path = data / "server.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"hived serve exited {proc.returncode}: {log_path.read_text()[-2000:]}")
        if info_path.exists():
            try:
                info = json.loads(info_path.read_text())
                info["data_dir"] = str(data)
                return proc, info
            except ValueError:
                pass  # being written
        time.sleep(0.1)
    stop_server(proc)
    raise RuntimeError(f"hived serve did not write {info_path} in {timeout:g} s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's session (it ends its jobs), SIGKILL after 15 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main(argv=None) -> int:
    import argparse
    import tempfile
    ap = argparse.ArgumentParser(prog="python -m hived.testing.mlflow_server",
                                 description=f"A throw-away one-node hived service (VC '{VC}', "
                                             f"{VC_GPUS} GPUs, you as its user) to try the MLflow backend.")
    ap.add_argument("dir", nargs="?", default=None, help="where spec, data and log go (default: a temp dir)")
    ap.add_argument("--tick", type=float, default=0.5, help="seconds between scheduling rounds")
    ap.add_argument("--port", type=int, default=0, help="port to serve on (default: a free one)")
    ap.add_argument("--job-account", choices=["vc", "server"], default=None,
                    help="as root: run jobs under a uid per VC (vc, the default) or as root (server: "
                         "for a box only you use, when your python or project sit under /root)")
    args = ap.parse_args(argv)
    if not 0 <= args.port <= 65535:
        ap.error(f"--port: must be between 0 and 65535, got {args.port}")
    tmp = Path(args.dir or tempfile.mkdtemp(prefix="hived-dev-"))
    tmp.mkdir(parents=True, exist_ok=True)
    # SIGTERM (kill, a service manager, a terminal closing) stops the child server as
    # Ctrl-C does: it runs in its own session, so nothing else would reach it
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    proc = None
    try:     # from the start: a signal during the prints must still stop the child
        proc, info = start_server(tmp, tick=args.tick, port=args.port, job_account=args.job_account)
        print(f"export HIVED_URL={info['url']} HIVED_TOKEN={info['token']} HIVED_VC={VC}", flush=True)
        print(f"# log: {tmp / 'serve.log'}; Ctrl-C or SIGTERM (kill {os.getpid()}) stops it",
              file=sys.stderr, flush=True)
        if os.geteuid() == 0 and (args.job_account or os.environ.get("HIVED_JOB_ACCOUNT") or "vc") == "vc":
            print("# running as root: jobs run under a uid of their own, which must reach your python, "
                  "project, tracking store and checkpoints (docs/mlflow.md, 'As root'); a submission "
                  "they cannot reach is refused, naming the path", file=sys.stderr, flush=True)
        proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if proc is not None:
            stop_server(proc)
    return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
