"""`make demo`: hived end to end on this machine, narrated, in about a minute.

1. Why cells: examples/demo/fragmentation.py (the cell core on its own, no
   processes) shows the fragmentation a plain GPU quota causes and how hived's
   cells avoid it. Skipped with a note when that script is not in the build.
2. Pick the cluster: this machine's GPUs when NVML finds some (split between
   two VCs), else the demo cluster examples/demo/demo_cluster.yaml.
   Print its summary and the VC views.
3. Start the scheduler service in this process (the embedded default: SQLite
   store, local launcher: real processes with CUDA_VISIBLE_DEVICES) and run a
   mix of jobs as two users of two VCs: best-effort training runs that fill
   one VC, then a trial-and-error job that preempts one of them (FitGpp); the
   preempted run checkpoints, waits, and resumes where it stopped.
4. Idle cells: a job of the second VC runs opportunistically on the first
   VC's idle cells, beyond its own VC's share, and is preempted when the
   owner comes back.
5. Cell exchange: the first VC lends a cell to the second for a while; the
   borrower runs a guaranteed job that its own cells could never hold.
6. Show the VC views along the way, stop cleanly, and say what to try next.

Usage: python examples/demo/run_demo.py [--spec FILE | --gpus N] [--data-dir DIR] [--keep]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from hived.core.jobs import STARTED, TERMINAL, JobState, state_values

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PY = sys.executable
# what the demo waits for, in the job states' wire names (core/jobs.py defines the groups)
RAN = state_values(STARTED | {JobState.SUCCEEDED})   # it started (and may have ended well)
ENDED = state_values(TERMINAL)


def say(text: str = "") -> None:
    print(text, flush=True)


def banner(text: str) -> None:
    say()
    say("=" * 78)
    say(text)
    say("=" * 78)


# ---------------------------------------------------------------- the cluster

def pick_spec(given: str | None, gpus: int | None = None):
    """-> (spec source, where it came from)."""
    if given:
        return given, f"the spec you gave ({given})"
    from hived.service.discovery import NoGpuError, discover, virtual_node
    if gpus is not None:
        try:
            spec = virtual_node(gpus, host="virtual0", vcs=["team-a", "team-b"]).spec
        except ValueError as exc:
            raise SystemExit(f"demo: --gpus {gpus}: {exc}") from None
        # GPUs only: the node's CPU and memory are this host's, and would cap the demo's
        # (tiny) jobs by CPU share rather than by the cells the demo is about
        for cell_type in spec["physicalCluster"]["cellTypes"].values():
            cell_type.pop("cpus", None)
            cell_type.pop("memoryGB", None)
        spec.setdefault("admins", ["admin"])   # someone may post the exchange of part 5
        _demo_members(spec)
        return spec, f"a virtual node of {gpus} GPUs (--gpus {gpus}; no GPU used)"
    try:
        d = discover(vcs=["team-a", "team-b"])
        for note in d.notes:
            say(f"  discovery note: {note}")
        d.spec.setdefault("admins", ["admin"])   # someone may post the exchange of part 5
        _demo_members(d.spec)
        return d.spec, f"this machine's {len(d.gpus)} GPUs ({', '.join(sorted({g.model for g in d.gpus}))})"
    except NoGpuError as exc:
        # discovery's advice names `hived discover`; the demo takes --gpus N too
        say(f"  {exc} (the demo takes --gpus N as well)")
    except ValueError as exc:   # e.g. one GPU cannot be split between two teams
        say(f"  discovered GPUs cannot hold the demo's two VCs ({exc})")
    return str(HERE / "demo_cluster.yaml"), "the demo cluster examples/demo/demo_cluster.yaml"


def _demo_members(spec: dict) -> None:
    """Discovery names no users; a VC's members are only those its spec lists."""
    for vc, users in (("team-a", ["alice", "anna"]), ("team-b", ["bob"])):
        spec["virtualClusters"][vc].setdefault("users", users)


def spec_summary(spec) -> None:
    for name, ch in spec.chains.items():
        nodes = ch.gpus // ch.gpus_per_level[ch.node_level - 1] if hasattr(ch, "gpus") else "?"
        say(f"  chain {name}: levels {' < '.join(ch.levels)} (node = level {ch.node_level}), "
            f"GPUs per cell {ch.gpus_per_level}, {nodes} nodes")
    for vc, v in spec.vcs.items():
        cells = ", ".join(f"{n} x {spec.chains[c].levels[lvl - 1]} ({spec.chains[c].gpus_per_level[lvl - 1]} GPUs)"
                          for (c, lvl), n in sorted(v.cells.items()))
        say(f"  VC {vc}: {cells or 'no cells'}; users: {', '.join(v.users or []) or 'its admins only'}")


def vc_views(svc, title: str) -> None:
    say(f"\n  -- VC views: {title}")
    vcs = svc.vcs()["vcs"]
    say(f"  {'VC':<12} {'GPUs used':>10}  {'cells lent/borrowed':<20} {'running':<28} queue")
    for name, v in vcs.items():
        running = " ".join(f"{j}({CLASS[svc.get_job(j)['job_class']]})" for j in v["running"]) or "-"
        levels = (v.get("view") or {}).get("levels", {}).values()
        loans = f"{sum(lv.get('lent', 0) for lv in levels)}/{sum(lv.get('borrowed', 0) for lv in levels)}"
        say(f"  {name:<12} {str(v['gpus_used']) + '/' + str(v['gpus_total']):>10}  {loans:<20} {running:<28} "
            f"{' '.join(v['queue']) or '-'}")


CLASS = {"te": "TE", "be": "BE", "opportunistic": "OPP"}


# ---------------------------------------------------------------- the cell core

FRAGMENTATION = HERE / "fragmentation.py"
FRAGMENTATION_TIMEOUT = 120.0


def fragmentation() -> None:
    """Run fragmentation.py as its own process and relay its output, indented.

    A separate process: that script is the cell core's part of the demo and
    owns its output; a failure there fails the demo (never shown as a pass).
    """
    if not FRAGMENTATION.exists():
        say(f"  (skipped: {FRAGMENTATION.relative_to(ROOT)} is not in this build)")
        return
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([PY, str(FRAGMENTATION)], cwd=str(ROOT), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    # a silent, hung script must not hang the demo: a timer kills it
    timer = threading.Timer(FRAGMENTATION_TIMEOUT, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            say(f"  {line.rstrip()}")
        rc = proc.wait()
    finally:
        timed_out = not timer.is_alive() and proc.returncode is not None and proc.returncode < 0
        timer.cancel()
    if timed_out:
        raise SystemExit(f"demo: {FRAGMENTATION.name} ran past {FRAGMENTATION_TIMEOUT:g} s and was killed")
    if rc != 0:
        raise SystemExit(f"demo: {FRAGMENTATION.name} exited with code {rc}")


# ---------------------------------------------------------------- the jobs

def plan(spec):
    """Two VCs, their users, and job sizes that fill the first VC exactly."""
    vcs = [v for v in spec.vcs if spec.vcs[v].cells][:2]
    if len(vcs) < 2:
        raise SystemExit("the demo needs a spec with at least two VCs holding cells")
    v1, v2 = vcs
    users1 = list(spec.vcs[v1].users or []) or ["alice", "anna"]
    users2 = list(spec.vcs[v2].users or []) or ["bob"]
    # the chain where VC 1 holds most GPUs, and its biggest cell no larger than a node
    per_chain: dict = {}
    for (c, lvl), n in spec.vcs[v1].cells.items():
        per_chain[c] = per_chain.get(c, 0) + n * spec.chains[c].gpus_per_level[lvl - 1]
    chain = max(per_chain, key=per_chain.get)
    ch = spec.chains[chain]
    node = ch.gpus_per_level[ch.node_level - 1]
    # the VC's smallest cell: every cell of the VC splits into cells of that size (buddies)
    size = min(node, min(ch.gpus_per_level[lvl - 1] for (c, lvl) in spec.vcs[v1].cells if c == chain))
    count = per_chain[chain] // size
    while count > 8 and size * 2 <= node:   # keep the number of processes small
        size, count = size * 2, count // 2
    if count == 1 and size // 2 in ch.gpus_per_level:   # two runs, so that FitGpp has a choice
        size, count = size // 2, 2
    c2 = next(iter(c for (c, _l) in spec.vcs[v2].cells))
    return {"vc1": v1, "vc2": v2, "u1": users1[0], "u1b": users1[min(1, len(users1) - 1)],
            "u2": users2[0], "chain": chain, "be_gpus": size, "be_count": count, "chain2": c2}


_SERVICE: list = []   # the demo's service, for wait_for to say what failed


def wait_for(pred, timeout: float, what: str):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        if _SERVICE:
            failed_job(_SERVICE[0], what)
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out waiting for {what}")


def failed_job(svc, what: str) -> None:
    """None of the demo's jobs should fail: when one did, stop and say why (not "timed out")."""
    failed = svc.list_jobs(state="failed")
    if failed:
        j = failed[0]
        last = [line for line in svc.logs(j["id"])[0].splitlines() if line.strip()][-1:]
        raise SystemExit(f"demo: job {j['id']} ({j['name']}) failed while waiting for {what}: "
                         f"{j['reason']}" + (f"; its log ends: {last[0]}" if last else ""))


def preflight(svc, p, data_dir: Path) -> None:
    """Before any job: can the jobs' unix accounts run this python in this folder and reach
    their job folders? A root-run hived runs them under a uid per VC (docs/security.md)."""
    check = getattr(svc.launcher, "check_reach", None)
    if check is None:
        return
    from hived.core.jobs import JobRequest
    for user, vc in ((p["u1"], p["vc1"]), (p["u2"], p["vc2"])):
        for req in (JobRequest(user=user, vc=vc, command=[PY], workdir=str(HERE)),
                    JobRequest(user=user, vc=vc, command="true", workdir=str(data_dir / "jobs"))):
            try:
                check(req)
            except ValueError as exc:
                raise SystemExit(f"demo: the jobs of VC {vc} cannot run here: "
                                 f"{getattr(exc, 'field', 'job')}: {exc}") from None


def log_lines(svc, job_id: str, prefix: str) -> list[str]:
    return [line for line in svc.logs(job_id)[0].splitlines() if line.startswith(prefix)]


def run_jobs(svc, p) -> list[str]:
    banner(f"3. Jobs: {p['u1']} and {p['u1b']} in VC {p['vc1']}, {p['u2']} in VC {p['vc2']}")
    be = []
    for i in range(p["be_count"]):
        job = svc.submit(p["u1"], {"vc": p["vc1"], "name": f"train-{i}", "job_class": "be",
                                   "command": [PY, str(HERE / "train.py"), "16", "0.5"],
                                   "gpus": p["be_gpus"], "chain": p["chain"], "grace_period": 3,
                                   "workdir": str(HERE)})
        be.append(job["id"])
    say(f"  {p['u1']} submits {len(be)} best-effort training run{'s' if len(be) > 1 else ''} "
        f"of {p['be_gpus']} GPUs each "
        f"({', '.join(be)}): together they fill VC {p['vc1']}")
    other = [
        svc.submit(p["u2"], {"vc": p["vc2"], "name": "sweep", "job_class": "be", "chain": p["chain2"],
                             "command": [PY, str(HERE / "train.py"), "10", "0.5"], "workdir": str(HERE)})["id"],
        svc.submit(p["u2"], {"vc": p["vc2"], "name": "explore", "job_class": "te", "chain": p["chain2"],
                             "command": [PY, str(HERE / "notebook_task.py"), "6"], "workdir": str(HERE)})["id"],
    ]
    say(f"  {p['u2']} submits a BE sweep and a TE trial in VC {p['vc2']} ({', '.join(other)})")
    wait_for(lambda: all(svc.get_job(j)["state"] == "running" for j in be), 30, "the BE runs to start")
    for j in be:
        job = svc.get_job(j)
        pods = "; ".join(f"{q['node']} GPUs {q['gpus']}" for q in job["placement"]["pods"])
        say(f"  {j} running on {pods}")
    time.sleep(2.0)
    vc_views(svc, f"VC {p['vc1']} is full of BE work")

    say(f"\n  {p['u1b']} opens a notebook and submits a trial-and-error job of {p['be_gpus']} GPUs "
        f"to VC {p['vc1']}: TE jobs preempt BE jobs (FitGpp)")
    te = svc.submit(p["u1b"], {"vc": p["vc1"], "name": "notebook-trial", "job_class": "te",
                               "command": [PY, str(HERE / "notebook_task.py"), "6"],
                               "gpus": p["be_gpus"], "chain": p["chain"], "workdir": str(HERE)})["id"]
    victim = wait_for(lambda: next((j for j in be if svc.get_job(j)["preemptions"] > 0), None), 20,
                      "FitGpp to pick a victim")
    vjob = svc.get_job(victim)
    reason = next((h["reason"] for h in reversed(vjob["history"]) if h["state"] == "preempting"), "")
    say(f"  FitGpp picked {victim}: {reason}")
    wait_for(lambda: svc.get_job(te)["state"] in RAN, 30, "the TE job to start")
    say(f"  {victim} got SIGTERM, then its grace period: " +
        (log_lines(svc, victim, "train: SIGTERM") or ["(it did not say)"])[-1])
    say(f"  {te} (TE) now runs on {svc.get_job(te)['placement']['pods'][0]['node']} "
        f"GPUs {svc.get_job(te)['placement']['pods'][0]['gpus']}; {victim} waits at the head of the queue")
    vc_views(svc, "the TE job took the preempted cells")

    wait_for(lambda: svc.get_job(te)["state"] == "succeeded", 30, "the TE job to finish")
    say(f"\n  {te} finished; {victim} goes back on its cells and resumes:")
    wait_for(lambda: len(log_lines(svc, victim, "train: rank")) >= 2, 30, "the BE job to resume")
    say("    " + log_lines(svc, victim, "train: rank")[-1])
    vc_views(svc, "the preempted run resumed")
    everything = be + other + [te]
    wait_for(lambda: all(svc.get_job(j)["state"] in ENDED for j in everything),
             90, "the jobs of this part to finish")
    return everything


def _cells_of(spec, vc: str, chain: str):
    """(GPUs of the VC in the chain, its smallest cell no larger than a node, its largest cell level)."""
    ch = spec.chains[chain]
    node = ch.gpus_per_level[ch.node_level - 1]
    mine = [(lvl, n) for (c, lvl), n in spec.vcs[vc].cells.items() if c == chain]
    gpus = sum(n * ch.gpus_per_level[lvl - 1] for lvl, n in mine)
    size = min(node, min(ch.gpus_per_level[lvl - 1] for lvl, _ in mine))
    return gpus, size, max(lvl for lvl, _ in mine)


def idle_cells(svc, p, spec) -> list[str]:
    """A job of VC 2 runs on VC 1's idle cells beyond VC 2's share; VC 1's owner takes them back."""
    banner(f"4. Idle cells: {p['u2']} runs beyond VC {p['vc2']}'s share while VC {p['vc1']} is idle")
    gpus2, size2, _ = _cells_of(spec, p["vc2"], p["chain2"])
    count2 = gpus2 // size2
    while count2 > 4:
        size2, count2 = size2 * 2, count2 // 2
    own = [svc.submit(p["u2"], {"vc": p["vc2"], "name": f"product-{i}", "job_class": "be",
                                "chain": p["chain2"], "gpus": size2, "grace_period": 3,
                                "command": [PY, str(HERE / "train.py"), "12", "0.5"], "workdir": str(HERE)})["id"]
           for i in range(count2)]
    wait_for(lambda: all(svc.get_job(j)["state"] == "running" for j in own), 30, f"VC {p['vc2']}'s runs to start")
    say(f"  {p['u2']} fills VC {p['vc2']}'s own {gpus2} GPUs with {', '.join(own)}, then submits an "
        f"opportunistic job: low priority, on any VC's idle cells")
    opp = svc.submit(p["u2"], {"vc": p["vc2"], "name": "opportunistic", "job_class": "opportunistic",
                               "chain": p["chain"], "gpus": p["be_gpus"], "grace_period": 3,
                               "command": [PY, str(HERE / "train.py"), "12", "0.5"], "workdir": str(HERE)})["id"]
    job = wait_for(lambda: (lambda j: j if j["state"] == "running" else None)(svc.get_job(opp)), 30,
                   "the opportunistic job to start")
    pod = job["placement"]["pods"][0]
    say(f"  {opp} runs on {pod['node']} GPUs {pod['gpus']}: cells of VC {p['vc1']}, which nobody there uses "
        f"now (opportunistic: {job['placement']['opportunistic']})")
    vc_views(svc, f"VC {p['vc2']} uses more than its share")
    say(f"\n  {p['u1']} comes back and submits {p['be_count']} TE job(s) of {p['be_gpus']} GPUs to VC {p['vc1']}: "
        f"its guarantee holds whatever runs on its cells")
    back = [svc.submit(p["u1"], {"vc": p["vc1"], "name": f"owner-back-{i}", "job_class": "te",
                                 "chain": p["chain"], "gpus": p["be_gpus"],
                                 "command": [PY, str(HERE / "notebook_task.py"), "3"], "workdir": str(HERE)})["id"]
            for i in range(p["be_count"])]
    wait_for(lambda: svc.get_job(opp)["preemptions"] > 0, 20, "the opportunistic job to be preempted")
    reason = next((h["reason"] for h in reversed(svc.get_job(opp)["history"]) if h["state"] == "preempting"), "")
    say(f"  {opp} is preempted: {reason}")
    wait_for(lambda: all(svc.get_job(j)["state"] in RAN for j in back), 30,
             "the owner's jobs to start")
    vc_views(svc, f"VC {p['vc1']} has its cells back; {opp} waits for idle cells again")
    wait_for(lambda: all(svc.get_job(j)["state"] == "succeeded" for j in back), 30, "the owner's jobs to end")
    return own + [opp] + back


def exchange_loan(svc, p, spec) -> list[str]:
    """VC 1 lends a cell to VC 2 for a while; VC 2 runs a guaranteed job on it."""
    banner(f"5. Cell exchange: VC {p['vc1']} lends a cell to VC {p['vc2']} for a while")
    admin = next(iter(spec.admins or ()), None)
    if admin is None:
        say("  (skipped: this spec names no cluster admin to post the offer and the request)")
        return []
    ch = spec.chains[p["chain"]]
    _, _, lvl = _cells_of(spec, p["vc1"], p["chain"])
    cell_type, cell_gpus = f"{p['chain']}.{ch.levels[lvl - 1]}", ch.gpus_per_level[lvl - 1]
    try:
        offer = svc.exchange.post_offer(admin, {"vc": p["vc1"], "cell_type": cell_type, "count": 1,
                                                "duration": 60})
        made = svc.exchange.post_request(admin, {"vc": p["vc2"], "cell_type": cell_type, "count": 1,
                                                 "duration": 30})
    except (LookupError, ValueError) as exc:     # e.g. the quota scheme has no cells to trade
        say(f"  (skipped: {exc})")
        return []
    say(f"  {admin} (cluster admin) offers one {cell_type} cell of VC {p['vc1']} for 60 s ({offer['id']}) "
        f"and asks one for VC {p['vc2']} for 30 s ({made['id']})")
    for x in made["matched"]:
        legs = "; ".join(f"{g['lender']} -> {g['borrower']}: {g['count']} cell(s)" for g in x["legs"])
        say(f"  matched: exchange {x['id']} ({x['state']}{': ' + x['reason'] if x['reason'] else ''}): "
            f"{legs}; the cells go back when the window ends")
    if not any(x["state"] == "active" for x in made["matched"]):
        say("  no loan is active now (see 'hived exchange board')")
        return []
    vc_views(svc, "the loan is active")
    node = ch.gpus_per_level[ch.node_level - 1]
    pods, gpus = (cell_gpus // node, node) if cell_gpus > node else (1, cell_gpus)
    say(f"\n  {p['u2']} submits a TE job of {pods} x {gpus} GPUs to VC {p['vc2']}, guaranteed on the "
        f"borrowed cell")
    loan = svc.submit(p["u2"], {"vc": p["vc2"], "name": "on-loan", "job_class": "te", "chain": p["chain"],
                                "pods": pods, "gpus": gpus,
                                "command": [PY, str(HERE / "notebook_task.py"), "3"], "workdir": str(HERE)})["id"]
    job = wait_for(lambda: (lambda j: j if j["state"] in RAN else None)(svc.get_job(loan)),
                   30, "the job on the borrowed cell to start")
    pods_text = "; ".join(f"{q['node']} GPUs {q['gpus']}" for q in (job["placement"] or {}).get("pods", []))
    say(f"  {loan} runs on {pods_text or 'its cells'} (opportunistic: "
        f"{bool((job['placement'] or {}).get('opportunistic'))})")
    return [loan]


def all_jobs(svc, jobs: list[str]) -> None:
    wait_for(lambda: all(svc.get_job(j)["state"] in ENDED for j in jobs),
             90, "every job to finish")
    say("\n  -- all jobs")
    say(f"  {'id':<5} {'name':<15} {'user':<7} {'VC':<10} {'class':<5} {'state':<10} attempts  preempted")
    for j in jobs:
        job = svc.get_job(j)
        say(f"  {j:<5} {job['name']:<15} {job['user']:<7} {job['vc']:<10} {CLASS[job['job_class']]:<5} "
            f"{job['state']:<10} {job['attempts']:>8}  {job['preemptions']:>9}")
    bad = [j for j in jobs if svc.get_job(j)["state"] != "succeeded"]
    if bad:
        raise SystemExit(f"demo: jobs did not succeed: {bad}")


NEXT = """  Try next (docs/cli.md, docs/jupyter.md, docs/mlflow.md):
    hived spec check examples/demo/demo_cluster.yaml       # the cells and VCs of a spec
    hived serve --spec examples/demo/demo_cluster.yaml --data-dir /tmp/hived-try --trust-user-header
        # in a second terminal. As root add --allow-root: jobs then run under a uid per VC, which
        # must be able to run your python (docs/security.md); HIVED_JOB_ACCOUNT=server opts out
    hived submit --data-dir /tmp/hived-try --user alice --vc research --be --gpus 4 --grace 10 \\
        --name first -- python examples/demo/train.py 40 0.5
    hived jobs --data-dir /tmp/hived-try ; hived status --data-dir /tmp/hived-try
    hived vc research --data-dir /tmp/hived-try              # cells per level: used, free, lent
    hived logs -f j1 --data-dir /tmp/hived-try --user alice
    hived simulate --trace table1 --out /tmp/hived-sim        # the papers' experiments
    python examples/demo/run_demo.py --gpus 8 --keep         # a virtual 8-GPU node; keep the store"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spec", default=None, help="cluster spec to use instead of discovery / the demo cluster")
    ap.add_argument("--gpus", type=int, default=None, metavar="N",
                    help="use a virtual node of N GPUs split between two VCs (no GPU needed)")
    ap.add_argument("--data-dir", default=None, help="where the store and logs go (default: a temporary "
                                                     "dir, removed at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data dir")
    args = ap.parse_args()
    if args.spec and args.gpus is not None:
        ap.error("give --spec or --gpus, not both")
    t0 = time.time()
    from hived.core.spec import load_spec
    from hived.service.scheduler import SchedulerService

    banner("1. Why cells: fragmentation under a GPU quota vs hived's cells (the cell core alone)")
    fragmentation()

    banner("2. The cluster")
    source, where = pick_spec(args.spec, args.gpus)
    spec = load_spec(source)
    say(f"  using {where}")
    spec_summary(spec)

    # The demo's jobs run this very interpreter, which may live where only its owner can
    # reach (a root-owned pyenv): run them as the demo's own account, not a uid per VC.
    os.environ.setdefault("HIVED_JOB_ACCOUNT", "server")
    data_dir = Path(args.data_dir) if args.data_dir else Path(tempfile.mkdtemp(prefix="hived-demo-"))
    removed = not args.data_dir and not args.keep
    svc = SchedulerService(source, data_dir, tick_seconds=0.2)
    say(f"\n  scheduler service started in this process: store {data_dir / 'hived.db'}, "
        f"logs under {data_dir / 'jobs'}" + (" (a temporary folder, removed at the end; --keep or "
                                             "--data-dir DIR keeps it)" if removed else ""))
    svc.start()
    try:
        vc_views(svc, "before any job")
        p = plan(spec)
        preflight(svc, p, data_dir)
        _SERVICE.append(svc)
        jobs = run_jobs(svc, p)
        jobs += idle_cells(svc, p, spec)
        jobs += exchange_loan(svc, p, spec)
        all_jobs(svc, jobs)
    finally:
        banner("6. Stopping")
        svc.stop(cancel_jobs=True, timeout=15)
        svc.close()
        if removed:
            shutil.rmtree(data_dir, ignore_errors=True)
            say(f"  service stopped cleanly; its temporary folder {data_dir} is removed "
                f"(run with --keep to look at hived.db and the job logs afterwards)")
        else:
            say(f"  service stopped cleanly; every state change is in {data_dir / 'hived.db'}, "
                f"the job logs under {data_dir / 'jobs'}")
    say(f"\ndemo finished in {time.time() - t0:.0f} s")
    say(NEXT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
