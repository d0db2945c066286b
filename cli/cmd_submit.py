"""``hived submit``: queue a job (TE or BE, a gang of pods, GPUs, VC, affinity, grace period)."""
from __future__ import annotations

import argparse
import os
import sys
import time

from hived.cli import support as cs
from hived.service.submit_flags import add_submit_flags, body_from_args


def register(subparsers, summary: str) -> None:
    p = subparsers.add_parser(
        "submit", help=summary,
        description="Submit a job to a VC. The command follows '--'; one argument is run by the "
                    "shell, several are run as they are. Each pod sees its GPUs in CUDA_VISIBLE_DEVICES "
                    "and HIVED_JOB_ID, HIVED_VC, HIVED_RANK, HIVED_WORLD_SIZE, HIVED_JOB_DIR.",
        epilog="example: hived submit --vc research --be --gpus 2 --grace 60 -- python train.py\n"
               + cs.EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_submit_flags(p, vc_help="VC to run in (default $HIVED_VC)")
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
    if not cmd:
        raise ValueError("command: missing; give it after '--', e.g. hived submit --vc VC -- python train.py")
    args.vc = args.vc or os.environ.get("HIVED_VC")
    if not args.vc:
        raise ValueError("--vc: required (or set $HIVED_VC)")
    payload = body_from_args(args, cmd[0] if len(cmd) == 1 else cmd)
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
        if getattr(backend, "embedded", False):
            raise ValueError("--wait needs a running service (hived serve); the job is stored")
        job = _follow(backend, job)
    if args.json:
        cs.print_json(job)
    elif args.wait:
        print(f"{job['id']} {cs.outcome(job)}")
    else:
        print(f"submitted {job['id']} to VC {cs.visible(job['vc'])} as {cs.visible(job['user'])}: "
              f"{cs.state_text(job)}")
        if getattr(backend, "embedded", False):
            print("no service runs on this data directory: the job starts when 'hived serve' does",
                  file=sys.stderr)
    return cs.OK if not args.wait or job["state"] == "succeeded" else cs.JOB_FAILED


def _follow(backend, job: dict) -> dict:
    """Poll until the job ends; on a terminal, a live line says where it stands and why.
    Polls start fast and slow down to one a second: a short job is reported as soon as it ends."""
    from tqdm import tqdm
    pause = 0.05
    with tqdm(total=None, file=sys.stderr, disable=None, bar_format="{desc} [{elapsed}]",
              desc=f"{job['id']}: {cs.state_text(job)}") as bar:
        while job["state"] not in cs.TERMINAL:
            time.sleep(pause)
            pause = min(1.0, pause * 2)
            job = backend.job(job["id"])
            bar.set_description_str(f"{job['id']}: {cs.state_text(job)}", refresh=False)
            bar.update(0)
    return job
