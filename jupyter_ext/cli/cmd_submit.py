"""``hived submit``: queue a job (TE or BE, a gang of pods, GPUs, VC, affinity, grace period)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from hived.jupyter_ext.service import cli_support as cs


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "submit", help=summary,
        description="Submit a job to a VC. The command follows '--'; one argument is run by the "
                    "shell, several are run as they are. Each pod sees its GPUs in CUDA_VISIBLE_DEVICES "
                    "and HIVED_JOB_ID, HIVED_VC, HIVED_RANK, HIVED_WORLD_SIZE, HIVED_JOB_DIR.",
        epilog="example: hived submit --vc research --be --gpus 2 --grace 60 -- python train.py\n"
               + cs.EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--vc", default=os.environ.get("HIVED_VC"), help="VC to run in (default $HIVED_VC)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--te", dest="job_class", action="store_const", const="te",
                      help="trial-and-error job (default): may preempt BE jobs of the VC")
    kind.add_argument("--be", dest="job_class", action="store_const", const="be",
                      help="best-effort batch job: may be preempted by TE jobs, then resumes")
    kind.add_argument("--opportunistic", dest="job_class", action="store_const", const="opportunistic",
                      help="run on idle cells of any VC at low priority")
    p.add_argument("--gpus", type=int, default=None, help="GPUs per pod (default 1)")
    p.add_argument("--pods", type=int, default=None, help="pods in the gang (default 1)")
    p.add_argument("--cell-type", default=None, help="one cell of this type per pod, e.g. CHAIN.SOCKET")
    p.add_argument("--chain", default=None, help="GPU pool (cell chain) to use")
    p.add_argument("--affinity", choices=["hard", "soft"], default=None,
                   help="hard: wait for the gang to fit one cell; soft: relax after a while")
    p.add_argument("--grace", dest="grace_period", type=float, default=None,
                   help="seconds between SIGTERM and SIGKILL when preempted (default 0)")
    p.add_argument("--name", default=None, help="a name to recognise the job by")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="environment (repeatable)")
    p.add_argument("--workdir", default=None, help="working directory (default: the current one)")
    p.add_argument("--allow-opportunistic", action="store_true",
                   help="may run at low priority when the VC is full")
    p.add_argument("--estimate", type=float, default=None, help="expected run time, seconds")
    p.add_argument("--k8s-template", metavar="FILE", default=None,
                   help="this job's own Kubernetes job template fields (JSON or YAML: image, resources, "
                        "volumes, ...; docs/kubernetes.md), merged over the service's default template; "
                        "only for a service running the Kubernetes launcher")
    p.add_argument("--wait", action="store_true", help="wait for the job to end; exit 1 unless it succeeded")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command, after '--'")
    cs.add_common(p)
    p.set_defaults(func=cs.guarded("hived submit", run))


def payload_of(args) -> dict:
    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    env = {}
    for item in args.env:
        if "=" not in item:
            raise ValueError(f"--env: want NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        env[k] = v
    if not cmd:
        raise ValueError("command: missing; give it after '--', e.g. hived submit --vc VC -- python train.py")
    if not args.vc:
        raise ValueError("--vc: required (or set $HIVED_VC)")
    payload = {"vc": args.vc, "command": cmd[0] if len(cmd) == 1 else cmd,
               "workdir": args.workdir or os.getcwd()}
    for key in ("job_class", "gpus", "pods", "cell_type", "chain", "affinity", "grace_period", "name",
                "estimate"):
        v = getattr(args, key)
        if v is not None:
            payload[key] = v
    if env:
        payload["env"] = env
    if args.allow_opportunistic:
        payload["allow_opportunistic"] = True
    if args.k8s_template:
        payload["k8s_template"] = _read_template(args.k8s_template)
    return payload


def _read_template(path: str) -> dict:
    import yaml
    try:
        with open(path) as f:
            data = yaml.safe_load(f)        # JSON is YAML too
    except OSError as e:
        raise ValueError(f"--k8s-template: cannot read {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ValueError(f"--k8s-template: {path} is not JSON or YAML: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--k8s-template: {path} must hold a mapping of template fields, got {type(data).__name__}")
    return data


def run(args, backend) -> int:
    job = backend.submit(payload_of(args))
    if args.wait:
        while job["state"] not in cs.TERMINAL:
            if getattr(backend, "embedded", False):
                raise ValueError("--wait needs a running service (hived serve); the job is stored")
            time.sleep(1.0)
            job = backend.job(job["id"])
    if args.json:
        cs.print_json(job)
    elif args.wait:
        print(f"{job['id']} {job['state']} (exit code {job['exit_code']}, {job['failure_class']})")
    else:
        where = f", position {job['queue_position']} in the queue" if job.get("queue_position") is not None else ""
        print(f"submitted {job['id']} to VC {job['vc']} as {job['user']}: {job['state']}{where}")
        if getattr(backend, "embedded", False):
            print("no service runs on this data directory: the job starts when 'hived serve' does",
                  file=sys.stderr)
    return cs.OK if not args.wait or job["state"] == "succeeded" else cs.JOB_FAILED
