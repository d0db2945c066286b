"""Benchmark: submits of the largest accepted size do not stall the server.

A real ``hived serve`` (the same set-up as bench_rest.py: SQLite store with
durable commits, a launcher that runs nothing). In one run, one after the
other:

- small:   POST /hived/api/jobs with a one-line command (the baseline);
- max:     a valid submit just under the 1 MiB body limit (1,000 argv items
           of 1,000 characters), answered 201;
- invalid: a body just under the limit that fails the schema in the worst
           way found (a list of 300,000 numbers as ``command``: it froze the
           IOLoop for seconds when every element was reported), answered 400;

each sent sequentially from one client, while a second client keeps asking
GET /hived/api/status: its latency during the large submits, against its
latency during the small ones, says whether other requests kept flowing.

Target: a max-size submit answers in under 50 ms (median), and status p99
during large submits stays within 50 ms.

Run: .venv/bin/python benchmarks/bench_rest_limits.py [--requests N]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rest import pct, start_server  # noqa: E402

TARGET_MS = 50.0
LIMIT = 1 << 20


def bodies() -> dict[str, bytes]:
    small = {"vc": "vca", "command": "true", "job_class": "be"}
    big = {"vc": "vca", "command": ["x" * 1000] * 1000, "job_class": "be"}
    bad = {"vc": "vca", "command": [1] * 300_000}
    out = {name: json.dumps(doc).encode() for name, doc in (("small", small), ("max", big), ("invalid", bad))}
    for name in ("max", "invalid"):
        assert len(out[name]) <= LIMIT, (name, len(out[name]))
    return out


async def phase(api: str, body: bytes, n: int, want: int) -> tuple[list[float], list[float]]:
    """(submit latencies, status latencies meanwhile), in seconds."""
    import aiohttp
    submit_lat, status_lat = [], []
    done = asyncio.Event()
    headers = {"Authorization": "token tok-alice", "Content-Type": "application/json"}

    async def submitter(session):
        for _ in range(n):
            t0 = time.perf_counter()
            async with session.post(api + "jobs", data=body, headers=headers) as r:
                await r.read()
                assert r.status == want, (r.status, await r.text())
            submit_lat.append(time.perf_counter() - t0)
        done.set()

    async def watcher(session):
        while not done.is_set():
            t0 = time.perf_counter()
            async with session.get(api + "status", headers=headers) as r:
                await r.read()
            status_lat.append(time.perf_counter() - t0)
            await asyncio.sleep(0.002)

    async with aiohttp.ClientSession() as a, aiohttp.ClientSession() as b:
        await asyncio.gather(submitter(a), watcher(b))
    return submit_lat, status_lat


def row(name: str, lat: list[float]) -> dict:
    ms = [x * 1000 for x in lat]
    out = {"median": statistics.median(ms), "p99": pct(ms, 99), "n": len(ms)}
    print(f"  {name:<26} n={out['n']:>5}  median {out['median']:7.2f} ms  p99 {out['p99']:7.2f} ms")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100, help="submits per phase")
    args = ap.parse_args()
    docs = bodies()
    with tempfile.TemporaryDirectory(prefix="bench-rest-limits-") as tmp:
        proc, api = start_server(Path(tmp))
        try:
            print(f"hived serve at {api}; {args.requests} submits per phase; bodies: "
                  + ", ".join(f"{k} {len(v):,} B" for k, v in docs.items())
                  + f"; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
            asyncio.run(phase(api, docs["small"], 20, 201))  # warm-up
            rows = {}
            for name, want in (("small", 201), ("max", 201), ("invalid", 400)):
                sub, status = asyncio.run(phase(api, docs[name], args.requests, want))
                rows[name] = (row(f"submit {name}", sub), row(f"  status during {name}", status))
        finally:
            proc.terminate()
            proc.wait(20)
    small, big, bad = rows["small"][0], rows["max"][0], rows["invalid"][0]
    print(f"max/small submit: median x{big['median'] / small['median']:.1f}, p99 x{big['p99'] / small['p99']:.1f}; "
          f"invalid/small: median x{bad['median'] / small['median']:.1f}")
    flowing = max(rows["max"][1]["p99"], rows["invalid"][1]["p99"])
    ok = big["median"] < TARGET_MS and bad["median"] < TARGET_MS and flowing < TARGET_MS
    print(f"target: max-size submit median < {TARGET_MS:g} ms and status p99 during them < {TARGET_MS:g} ms: "
          f"{'MET' if ok else 'NOT MET'} (max {big['median']:.1f} ms, invalid {bad['median']:.1f} ms, "
          f"status p99 {flowing:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
