"""``python -m hived.mlflow_plugin follow RUN_ID``: follow a detached run to its end.

Writes the run's hived tags, preemption notes and terminal status, printing
the job's output; exit code 0 when the job succeeded.
"""
from __future__ import annotations

import argparse
import sys

from hived.mlflow_plugin.submitted_run import HivedSubmittedRun, print_sink
from hived.service.client import HivedError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hived.mlflow_plugin",
                                 description="Follow an MLflow run submitted with --backend hived.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("follow", help="wait for the run's job; set the run's tags and final status")
    f.add_argument("run_id")
    f.add_argument("--tracking-uri", default=None, help="default: $MLFLOW_TRACKING_URI")
    f.add_argument("--token", default=None, help="service token (default: $HIVED_TOKEN / server.json)")
    f.add_argument("--quiet", action="store_true", help="do not print the job's output")
    args = ap.parse_args(argv)
    try:
        run = HivedSubmittedRun.from_run(args.run_id, args.tracking_uri, token=args.token)
        run.log_sink = None if args.quiet else print_sink
        ok = run.wait()
    except (HivedError, ValueError) as exc:
        print(f"hived follow: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # e.g. unknown run id in the tracking store
        print(f"hived follow: {type(exc).__name__}: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    print(f"run {args.run_id}: job {run.job_id} {run.job.get('state')}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
