"""``hived status``: one job in detail (state, placement, history), or the service's summary."""
from __future__ import annotations

import time

from hived.jupyter_ext.service import cli_support as cs


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


def run(args, backend) -> int:
    if not args.job:
        st = backend.status()
        if args.json:
            cs.print_json(st)
        else:
            mode = "embedded (no service running)" if getattr(backend, "embedded", False) else "service up"
            print(f"hived: {mode}")
            for k, v in sorted(st.items()):
                if k != "ok":
                    print(f"  {k}: {v}")
        return cs.OK
    j = backend.job(args.job)
    if args.json:
        cs.print_json(j)
        return cs.OK
    print(f"{j['id']}  {j['name'] or ''}")
    print(f"  user {j['user']}  VC {j['vc']}  class {j['job_class'].upper()}  state {j['state']}")
    print(f"  GPUs {j['gpus']} in {j['pods']} pod(s)  placement {cs.placement_text(j['placement'])}")
    print(f"  command {j['command']}")
    print(f"  attempts {j['attempts']}  preemptions {j['preemptions']}  exit {j['exit_code']}  "
          f"failure {j['failure_class'] or '-'}")
    if j.get("queue_position") is not None:
        print(f"  queue position {j['queue_position']}")
    print("  history:")
    for h in j["history"]:
        print(f"    {_t(h['time'])}  {h['state']:<10} {h['reason']}")
    return cs.OK
