"""What tests/gpu/on_device.sh runs: capture NVML on a real GPU and check hived on it.

Steps (each result lands in $OUT/summary.json; docs/gpu.md reads them):
1. ``hived discover`` with every NVML call recorded (capture-discover.jsonl);
2. a facts probe: driver, CUDA, compute capability, ECC, MIG, NVLink, PCIe,
   power... each answer or exact error recorded (capture-facts.jsonl);
3. the health watcher polled every 2 s for ``--watch`` seconds on the idle
   GPU(s) (capture-health.jsonl): any unhealthy verdict is a failure;
4. ``hived serve`` on the discovered spec with the local launcher, as root with
   the default job account (capture-serve.jsonl, serve.log); one 1-GPU job per
   GPU and one more than fit, each initialising CUDA through libcuda
   (tests/gpu/cuda_probe.py): each must see exactly one device, whose UUID is
   the one discovery gave for the GPU position hived bound it to.

``--dry-run`` is for this machine without a GPU: the FAKE pynvml of
tests/gpu/fake_nvml and ``CUDA_PROBE_FAKE=1`` stand in, and every output says so.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SUMMARY: dict[str, Any] = {"checks": {}}


def say(msg: str) -> None:
    print(f"[on_device {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(name: str, ok: bool, detail: Any = None) -> None:
    SUMMARY["checks"][name] = {"ok": bool(ok), "detail": detail}
    say(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail is not None and not ok else ""))


def hived(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hived.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def step_discover(out: Path) -> dict:
    cap = out / "capture-discover.jsonl"
    r = hived("discover", "--json", env={"HIVED_NVML_RECORD": str(cap)})
    check("discover exits 0", r.returncode == 0, r.stderr[-2000:])
    if r.returncode != 0:
        raise SystemExit(1)
    d = json.loads(r.stdout)
    (out / "discover.json").write_text(json.dumps(d, indent=1, sort_keys=True))
    SUMMARY["discover"] = {"gpus": d["gpus"], "notes": d["notes"]}
    say(f"discovered {len(d['gpus'])} GPU(s): " + ", ".join(f"{g['model']} {g['memory_mib']} MiB"
                                                          for g in d["gpus"]))
    return d


FACTS = [   # (label, function, per-GPU?, extra args given as NVML constant names or ints)
    ("driver version", "nvmlSystemGetDriverVersion", False, ()),
    ("NVML version", "nvmlSystemGetNVMLVersion", False, ()),
    ("CUDA driver version", "nvmlSystemGetCudaDriverVersion", False, ()),
    ("name", "nvmlDeviceGetName", True, ()),
    ("UUID", "nvmlDeviceGetUUID", True, ()),
    ("compute capability", "nvmlDeviceGetCudaComputeCapability", True, ()),
    ("memory", "nvmlDeviceGetMemoryInfo", True, ()),
    ("BAR1 memory", "nvmlDeviceGetBAR1MemoryInfo", True, ()),
    ("PCI info", "nvmlDeviceGetPciInfo", True, ()),
    ("PCIe link generation", "nvmlDeviceGetCurrPcieLinkGeneration", True, ()),
    ("PCIe link width", "nvmlDeviceGetCurrPcieLinkWidth", True, ()),
    ("MIG mode", "nvmlDeviceGetMigMode", True, ()),
    ("ECC mode", "nvmlDeviceGetEccMode", True, ()),
    ("uncorrected ECC (volatile)", "nvmlDeviceGetTotalEccErrors", True,
     ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC")),
    ("uncorrected ECC (aggregate)", "nvmlDeviceGetTotalEccErrors", True,
     ("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC")),
    ("corrected ECC (volatile)", "nvmlDeviceGetTotalEccErrors", True,
     ("NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC")),
    ("retired pages pending", "nvmlDeviceGetRetiredPagesPendingStatus", True, ()),
    ("remapped rows", "nvmlDeviceGetRemappedRows", True, ()),
    ("NUMA node", "nvmlDeviceGetNumaNodeId", True, ()),
    ("NVLink 0 state", "nvmlDeviceGetNvLinkState", True, (0,)),
    ("persistence mode", "nvmlDeviceGetPersistenceMode", True, ()),
    ("compute mode", "nvmlDeviceGetComputeMode", True, ()),
    ("virtualization mode", "nvmlDeviceGetVirtualizationMode", True, ()),
    ("power usage (mW)", "nvmlDeviceGetPowerUsage", True, ()),
    ("enforced power limit (mW)", "nvmlDeviceGetEnforcedPowerLimit", True, ()),
    ("temperature (C)", "nvmlDeviceGetTemperature", True, ("NVML_TEMPERATURE_GPU",)),
    ("SM clock (MHz)", "nvmlDeviceGetClockInfo", True, ("NVML_CLOCK_SM",)),
    ("memory clock (MHz)", "nvmlDeviceGetClockInfo", True, ("NVML_CLOCK_MEM",)),
    ("VBIOS version", "nvmlDeviceGetVbiosVersion", True, ()),
    ("serial", "nvmlDeviceGetSerial", True, ()),
]


def _plain(v: Any) -> Any:
    from hived.service.nvml_capture import _Handles, encode
    return encode(v, _Handles())


def step_facts(out: Path, n_gpus: int) -> None:
    """Ask NVML what docs/gpu.md reports; NotSupported/NoPermission are facts too."""
    import pynvml

    from hived.service.nvml_capture import NvmlRecorder
    nv = NvmlRecorder(pynvml, out / "capture-facts.jsonl")
    facts: dict[str, Any] = {}
    nv.nvmlInit()
    handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n_gpus)]
    for label, fn, per_gpu, extra in FACTS:
        try:
            f = getattr(nv, fn)
            args = [getattr(nv, a) if isinstance(a, str) else a for a in extra]
        except AttributeError as exc:
            facts[label] = {"missing": f"{fn} not in this nvidia-ml-py ({exc})"}
            continue
        for i, h in enumerate(handles if per_gpu else [None]):
            key = f"{label} [GPU {i}]" if per_gpu else label
            try:
                facts[key] = {"ok": _plain(f(h, *args) if per_gpu else f(*args))}
            except nv.NVMLError as exc:
                facts[key] = {"error": f"{type(exc).__name__}: {exc}"}
    nv.nvmlShutdown()
    SUMMARY["facts"] = facts
    refused = sorted(k for k, v in facts.items() if "error" in v)
    say(f"facts: {len(facts)} asked, refused: {', '.join(refused) or 'none'}")


def step_health(out: Path, nodes: dict, seconds: float, box: dict) -> None:
    import pynvml

    from hived.service.health import HealthMonitor
    from hived.service.nvml_capture import NvmlRecorder
    mon = HealthMonitor(nodes, nvml=NvmlRecorder(pynvml, out / "capture-health.jsonl"))
    mon.start()
    polls: list[list] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        polls.append([list(v) for v in mon.poll()])
        time.sleep(2)
    box.update(polls=len(polls), verdicts=[v for p in polls for v in p], notes=list(mon.notes))


def _serve(out: Path, spec_path: Path, data: Path, tokens: Path, account: str | None) -> subprocess.Popen:
    log = open(out / ("serve.log" if account is None else f"serve-{account}-account.log"), "w")
    env = {**os.environ, "HIVED_NVML_RECORD": str(out / "capture-serve.jsonl"), "PYTHONUNBUFFERED": "1"}
    env.pop("HIVED_JOB_ACCOUNT", None)   # what a root-run box gets by default
    if account is not None:
        env["HIVED_JOB_ACCOUNT"] = account
    return subprocess.Popen([sys.executable, "-m", "hived.cli.main", "serve", "--spec", str(spec_path),
                             "--data-dir", str(data), "--port", "0", "--allow-root",
                             "--user-tokens", str(tokens)], stdout=log, stderr=subprocess.STDOUT, env=env)


def _wait_server(data: Path, proc: subprocess.Popen, timeout: float = 90) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        f = data / "server.json"
        if f.exists():
            try:
                return json.loads(f.read_text())
            except ValueError:
                pass
        if proc.poll() is not None:
            raise RuntimeError(f"hived serve exited {proc.returncode} before listening (see serve.log)")
        time.sleep(0.2)
    raise RuntimeError("hived serve did not write server.json in 90 s")


def _spec_with_user(d: dict, path: Path) -> None:
    import yaml
    spec = d["spec"]
    for vc in spec["virtualClusters"].values():
        vc["users"] = ["gpuuser"]
    spec["admins"] = ["root"]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))


def step_serve_and_jobs(out: Path, d: dict, work: Path, account: str | None = None) -> bool:
    """Jobs under the default job account (``account`` None) or HIVED_JOB_ACCOUNT=account; True if all saw
    their GPU."""
    from hived.service.client import HivedClient
    work = work / (account or "default")
    work.mkdir(mode=0o755)
    spec_path, data, tokens = work / "spec.yaml", work / "data", work / "tokens.json"
    _spec_with_user(d, spec_path)
    tokens.write_text(json.dumps({"gpu-user-token": "gpuuser"}))
    probe_dir = Path(tempfile.mkdtemp(prefix="hived-gpu-probe-"))
    probe_dir.chmod(0o755)
    probe = probe_dir / "cuda_probe.py"
    shutil.copy(HERE / "cuda_probe.py", probe)
    probe.chmod(0o644)
    proc = _serve(out, spec_path, data, tokens, account)
    try:
        info = _wait_server(data, proc)
        c = HivedClient(url=info["url"], token="gpu-user-token")
        vc = next(iter(d["spec"]["virtualClusters"]))
        n = len(d["gpus"])
        env = {"CUDA_PROBE_FAKE": "1"} if os.environ.get("CUDA_PROBE_FAKE") == "1" else {}
        # the probe needs only the standard library: a system Python the job's own account can run
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        ids = [c.submit({"vc": vc, "gpus": 1, "command": [python, str(probe), "--hold", "3"], "env": env,
                         "name": f"cuda-probe-{k}"})["id"] for k in range(n + 1)]
        say(f"submitted {ids} to VC {vc} ({n} GPU(s): the last one must queue)")
        placements, jobs = {}, {}
        end = time.monotonic() + 120
        while time.monotonic() < end and len(jobs) < len(ids):
            for j in ids:
                if j in jobs:
                    continue
                v = c.job(j)
                if v.get("placement"):
                    placements[j] = v["placement"]
                if v["state"] in ("succeeded", "failed", "cancelled"):
                    jobs[j] = v
            time.sleep(0.3)
        suffix = "" if account is None else f" (HIVED_JOB_ACCOUNT={account})"
        ok = _judge_jobs(c, d, ids, jobs, placements, suffix)
        SUMMARY["cluster_after" + suffix] = c.cluster()
        return ok
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _judge_jobs(c: Any, d: dict, ids: list, jobs: dict, placements: dict, suffix: str) -> bool:
    gpu_ids = {(node, pos): d["gpus"][idx]["uuid"] for node, idxs in d["nodes"].items()
               for pos, idx in enumerate(idxs)}
    results = []
    for j in ids:
        v = jobs.get(j)
        text = c.logs(j).get("text", "") if v else ""
        line = next((ln for ln in text.splitlines() if ln.startswith("CUDA_PROBE ")), None)
        seen = json.loads(line[len("CUDA_PROBE "):]) if line else None
        p = placements.get(j)
        bound = [gpu_ids.get((q["node"], g)) for q in (p or {}).get("pods", []) for g in q["gpus"]]
        results.append({"job": j, "state": v and v["state"], "reason": v and v.get("reason"),
                        "placement": p, "bound_uuids": bound, "seen": seen, "log_tail": text[-1500:]})
        ok = bool(v and v["state"] == "succeeded" and seen and seen.get("count") == 1 and bound
                  and [x["uuid"] for x in seen["devices"]] == bound)
        check(f"job {j} sees exactly its bound GPU{suffix}", ok, {"bound": bound, "seen": seen,
                                                                  "state": v and v["state"],
                                                                  "reason": v and v.get("reason")})
    SUMMARY["jobs" + suffix] = results
    return all(SUMMARY["checks"][f"job {r['job']} sees exactly its bound GPU{suffix}"]["ok"] for r in results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--watch", type=float, default=60, help="seconds of health watching")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    SUMMARY["dry_run"] = os.environ.get("CUDA_PROBE_FAKE") == "1"
    SUMMARY["nvidia_smi"] = _nvidia_smi()
    t0 = time.monotonic()
    try:
        d = step_discover(out)
        step_facts(out, len(d["gpus"]))
        box: dict = {}
        watcher = threading.Thread(target=step_health, args=(out, d["nodes"], a.watch, box), daemon=True)
        watcher.start()
        with tempfile.TemporaryDirectory(prefix="hived-gpu-") as work:
            Path(work).chmod(0o755)
            if not step_serve_and_jobs(out, d, Path(work)):
                say("jobs under the default per-VC account failed: once more as the server's account, "
                    "to tell the account's reach from the GPU binding")
                step_serve_and_jobs(out, d, Path(work), account="server")
        watcher.join(a.watch + 30)
        SUMMARY["health"] = box
        check("health: no GPU marked unhealthy while idle", box.get("polls", 0) > 0 and not box.get("verdicts"),
              box)
    except Exception as exc:   # the summary must come back whatever broke
        check("script ran to the end", False, f"{type(exc).__name__}: {exc}")
    SUMMARY["seconds"] = round(time.monotonic() - t0, 1)
    (out / "summary.json").write_text(json.dumps(SUMMARY, indent=1, sort_keys=True, default=str))
    bad = [k for k, v in SUMMARY["checks"].items() if not v["ok"]]
    say(f"{len(SUMMARY['checks']) - len(bad)} passed, {len(bad)} failed in {SUMMARY['seconds']} s")
    return 1 if bad else 0


def _nvidia_smi() -> dict:
    if not shutil.which("nvidia-smi"):
        return {"missing": "nvidia-smi not on PATH"}
    out = {}
    for key, args in (("L", ["-L"]), ("q", ["-q"]), ("topo", ["topo", "-m"])):
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
        out[key] = (r.stdout + r.stderr)[-20000:]
    return out


if __name__ == "__main__":
    sys.exit(main())
