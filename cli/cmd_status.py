"""``hived status``: one job in detail (state, placement, history), or the service's summary."""
from __future__ import annotations

import shlex
import time

from hived.cli import support as cs
from hived.core.jobs import JobState


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser("status", help=summary,
                              description="Without JOB: is the service up, and how many jobs are in "
                                          "each state. With JOB: its state, placement and history.",
                              epilog=cs.EXIT_CODES_HELP)
    p.add_argument("job", nargs="?", help="job id")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived status", run))


def _t(t) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "-"


STATE_ORDER = tuple(s.value for s in JobState)   # the engine's order: waiting, holding, ended


def run(args, backend) -> int:
    if not args.job:
        return _summary(args, backend)
    j = backend.job(args.job)
    if args.json:
        cs.print_json(j)
        return cs.OK
    v = cs.visible
    print(f"{j['id']}  {v(j['name']) if j['name'] else ''}".rstrip())
    print(f"  user {v(j['user'])}  VC {v(j['vc'])}  class {j['job_class'].upper()}  state {cs.state_text(j)}")
    print(f"  GPUs {j['gpus']} in {j['pods']} pod(s)  placement {cs.placement_text(j['placement'])}")
    command = j["command"] if isinstance(j["command"], str) else shlex.join(j["command"])
    print(f"  command {v(command)}")
    est = j.get("estimated")
    if j.get("estimate") is not None or est:
        given = f"{j['estimate']:g} s given" if j.get("estimate") is not None else "none given"
        now = f"; estimated {est['value']:g} s ({v(est['source'])}, confidence {est['confidence']:.2f})" if est else ""
        print(f"  run time {given}{now}")
    ended = "" if j["state"] not in cs.TERMINAL else f"  {cs.outcome(j)}"
    print(f"  attempts {j['attempts']}  preemptions {j['preemptions']}{ended}")
    print("  history:")
    for h in j["history"]:
        print(f"    {_t(h['time'])}  {h['state']:<10} {v(h['reason'])}")
    return cs.OK


def _summary(args, backend) -> int:
    st = backend.status()
    if args.json:
        cs.print_json(st)
        return cs.OK
    if getattr(backend, "embedded", False):
        print(f"hived: embedded on {st.get('data_dir')} (no service running)")
    else:
        me = backend.whoami()
        vcs = ", ".join(me.get("vcs") or []) or "none"
        admin = "; cluster admin: sees and may cancel every job" if me.get("admin") else ""
        print(f"hived: service up at {backend.c.url} (version {me.get('version', '?')}); "
              f"you are {cs.visible(me.get('user'))} (VCs: {cs.visible(vcs)}{admin})")
    counts = st.get("jobs") or {}
    states = [s for s in STATE_ORDER if s in counts] + sorted(set(counts) - set(STATE_ORDER))
    total = sum(counts.values())
    print(f"  jobs: {total}" + (" (" + ", ".join(f"{counts[s]} {s}" for s in states) + ")" if total else ""))
    rec = st.get("recovered") or {}
    if rec:
        print(f"  recovery at start: {rec.get('jobs', 0)} job(s) read back, {rec.get('adopted', 0)} still "
              f"running adopted, {rec.get('relaunch', 0)} to relaunch, {rec.get('lost', 0)} lost, "
              f"{rec.get('unrestorable', 0)} unrestorable" + (f", in {rec['seconds']:g} s" if "seconds" in rec else ""))
    bad = st.get("unhealthy") or []
    print(f"  unhealthy GPUs: {len(bad)}" + "".join(
        f"\n    {cs.visible(u.get('node'))} GPU {u.get('gpu')}: {cs.visible(u.get('reason'))}" for u in bad))
    for note in st.get("health_checks") or []:
        print(f"  health check: {cs.visible(note)}")
    if st.get("shared_account"):
        print(f"  warning: {cs.visible(st['shared_account'])}")
    if st.get("last_error"):
        print(f"  last error: {cs.visible(st['last_error'])}")
    return cs.OK
