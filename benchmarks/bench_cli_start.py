"""Benchmark: how long quick CLI commands take from process start to exit.

Times, in the same run and interleaved (so a busy machine slows all alike):
  baseline   python -c pass                      (the interpreter's own start)
  import     python -c "import hived.core.spec"  (what every command that reads a spec pays)
  help       hived --help
  check      hived spec check examples/cluster.yaml
Reports the median and p90 wall time of each, and each median over the
baseline's. The product target is 0.3 s for `hived --help` and `hived spec check`.

Run: .venv/bin/python benchmarks/bench_cli_start.py [--runs N] [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.3


def commands() -> dict[str, list[str]]:
    hived = shutil.which("hived", path=str(Path(sys.executable).parent)) or shutil.which("hived")
    if hived is None:
        sys.exit("bench_cli_start: no 'hived' script beside this Python or on PATH (run `make install`)")
    return {
        "baseline": [sys.executable, "-c", "pass"],
        "import": [sys.executable, "-c", "import hived.core.spec"],
        "help": [hived, "--help"],
        "check": [hived, "spec", "check", str(ROOT / "examples" / "cluster.yaml")],
    }


def time_once(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True, cwd=ROOT)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    ap.add_argument("--quick", action="store_true", help="5 runs of each")
    args = ap.parse_args()
    runs = 5 if args.quick else args.runs
    cmds = commands()
    for argv in cmds.values():      # warm the file cache; not timed
        time_once(argv)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    for _ in range(runs):
        for name, argv in cmds.items():
            times[name].append(time_once(argv))
    base = statistics.median(times["baseline"])
    print(f"CLI start ({runs} runs each, interleaved; cpus={os.cpu_count()})")
    print(f"{'command':<10} {'median s':>9} {'p90 s':>7} {'x baseline':>11}  target")
    ok = True
    for name, ts in times.items():
        med = statistics.median(ts)
        p90 = sorted(ts)[max(0, int(len(ts) * 0.9) - 1)]
        target = ""
        if name in ("help", "check"):
            hit = med < TARGET_S
            ok &= hit
            target = f"< {TARGET_S} s {'ok' if hit else 'MISSED'}"
        print(f"{name:<10} {med:9.3f} {p90:7.3f} {med / base:11.2f}  {target}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
