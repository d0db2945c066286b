"""Benchmark: REST submissions authenticated by JupyterHub against the
standalone per-user token path, on the same ``hived serve`` in the same run.

A real JupyterHub (loopback, SQLite, the npm proxy; tests/hub/conftest.py)
runs hived as its managed service with ``--user-tokens`` as well, so one
server answers both kinds of token:

- standalone: ``Authorization: token <per-user token>`` (a file lookup);
- hub:        ``Authorization: token <alice's Hub token>``: the Hub's answer
              (owner, groups, scopes) is asked once and kept for --hub-cache
              seconds, so later requests cost no Hub round trip.

Both go straight to the service (not through the proxy), so the difference
is the identity path alone. Submissions alternate between the two paths in
rounds, so that the queue's growth and the machine's load fall on both
alike. The launcher runs nothing (InstantLauncher). Target: Hub-path p50 and
p99 within 20% of the standalone path's.

A second run does the same with --hub-cache 0 (a second Hub), where every
Hub-path request asks the Hub: what the cache saves. Skipped with --quick.

Run: .venv/bin/python benchmarks/bench_hub_auth.py [--quick] [--requests N]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.hub.conftest import Hub  # noqa: E402  (the same Hub the tests run)

LAUNCHER = "hived.testing.launcher_noop.InstantLauncher"
TARGET = 1.20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def submit_times(session: requests.Session, url: str, token: str, n: int) -> list[float]:
    out = []
    body = {"vc": "vca", "command": "true", "gpus": 1}
    headers = {"Authorization": f"token {token}"}
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.post(url + "hived/api/jobs", json=body, headers=headers, timeout=30)
        out.append(time.perf_counter() - t0)
        if r.status_code not in (200, 201):
            raise SystemExit(f"submit refused: {r.status_code} {r.text}")
    return out


def start(tmp: Path, cache: int) -> tuple[Hub, str]:
    # "solo" is a member of vca by name (a token file), alice by her Hub group
    import yaml

    from tests.hub.conftest import SPEC
    doc = yaml.safe_load(SPEC.read_text())
    doc["virtualClusters"]["vca"]["users"] = ["solo"]
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    tokens = tmp / "tokens.json"
    tokens.write_text(json.dumps({"tok-solo-standalone": "solo"}))
    hub = Hub(tmp, extra=("--launcher", LAUNCHER, "--tick", "0.5", "--user-tokens", str(tokens)),
              cache=cache, spec=spec)
    return hub, hub.token_for("alice")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--requests", type=int, default=None, help="submissions per path")
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    n = args.requests or (200 if args.quick else 1000)
    runs = [("hub (cache 60 s)", 60)] + ([] if args.quick else [("hub (no cache)", 0)])
    ok = True
    for label, cache in runs:
        series = measure(cache, n, args.rounds)
        base, hub = series["standalone"], series["hub"]
        r50, r99 = pct(hub, .5) / pct(base, .5), pct(hub, .99) / pct(base, .99)
        print(f"REST submit latency, {len(base)} per path, one client, one server, --hub-cache {cache} (ms)")
        print(f"{'path':<18}{'p50':>8}{'p99':>8}{'mean':>8}")
        for name, values, in (("standalone token", base), (label, hub)):
            print(f"{name:<18}{pct(values, .5) * 1e3:8.2f}{pct(values, .99) * 1e3:8.2f}"
                  f"{statistics.mean(values) * 1e3:8.2f}")
        print(f"ratio hub/standalone: p50 {r50:.2f}, p99 {r99:.2f}\n")
        if cache:
            ok = r50 <= TARGET and r99 <= TARGET
    print(f"target: with the cache, hub p50 and p99 within {TARGET:.2f}x of standalone: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


def measure(cache: int, n: int, rounds: int) -> dict[str, list[float]]:
    """Both paths on one Hub-managed server, alternating in rounds."""
    per_round = max(1, n // rounds)
    series: dict[str, list[float]] = {"standalone": [], "hub": []}
    with tempfile.TemporaryDirectory() as tmp:
        hub, hub_token = start(Path(tmp), cache=cache)
        try:
            with requests.Session() as s:
                submit_times(s, hub.hived_direct, "tok-solo-standalone", 20)  # warm-up, both paths
                submit_times(s, hub.hived_direct, hub_token, 20)
                for _ in range(rounds):
                    series["standalone"] += submit_times(s, hub.hived_direct, "tok-solo-standalone", per_round)
                    series["hub"] += submit_times(s, hub.hived_direct, hub_token, per_round)
        finally:
            hub.stop()
    return series


if __name__ == "__main__":
    raise SystemExit(main())
