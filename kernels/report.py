"""A kernel pod tells hived how its kernel is reached (``POST jobs/{id}/kernel-connection``).

``python -m hived.kernels.report CONNECTION_FILE`` reports that file's ports, key and transport,
with the pod's IP (``$HIVED_POD_IP``) as the address; hived.kernels.host calls ``report`` itself
once its kernel is started. The pod's environment gives the rest (k8s/kernel_pod.py):
``HIVED_KERNEL_REPORT_URL`` (hived's URL), ``HIVED_KERNEL_SECRET``, ``HIVED_JOB_ID``,
``HIVED_POD_NAME``. Standard library only: it runs in the job's image.

A hived that cannot be reached, or answers 5xx, is asked again for ``RETRY_FOR`` seconds; a
refusal (4xx) is final, and its one line is what the job's log shows.
"""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import quote

SECRET_HEADER = "X-Hived-Kernel-Secret"
FIELDS = ("transport", "key", "signature_scheme", "shell_port", "iopub_port", "stdin_port", "control_port",
          "hb_port", "hived_host_port", "kernel_name")
RETRY_FOR = 60.0
TIMEOUT = 10.0
ENV = ("HIVED_KERNEL_REPORT_URL", "HIVED_KERNEL_SECRET", "HIVED_JOB_ID", "HIVED_POD_NAME", "HIVED_POD_IP")


class ReportRefused(RuntimeError):
    """hived refused the report (4xx), or could not be reached in time: the message is the one line."""


def route(base_url: str, job_id: str) -> str:
    base = base_url.rstrip("/")
    if not base.endswith("/hived/api"):
        base += "/hived/api"
    return f"{base}/jobs/{quote(job_id, safe='')}/kernel-connection"


def body_of(info: dict, pod: str, pod_ip: str) -> dict:
    """What is reported: the connection file's fields, reached at the pod's IP."""
    conn = {k: info[k] for k in FIELDS if k in info and info[k] is not None}
    if isinstance(conn.get("key"), bytes):
        conn["key"] = conn["key"].decode()
    conn["ip"] = pod_ip
    return {"pod": pod, "connection": conn}


def report(url: str, job_id: str, secret: str, body: dict, retry_for: float = RETRY_FOR) -> dict:
    """POST ``body`` to the job's route; hived's answer, or ReportRefused with its line."""
    target = route(url, job_id)
    data = json.dumps(body).encode()
    deadline = time.monotonic() + retry_for
    pause = 0.2
    while True:
        req = urllib.request.Request(target, data=data, method="POST",
                                     headers={"Content-Type": "application/json", SECRET_HEADER: secret})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            line = _error_line(e)
            if e.code < 500:
                raise ReportRefused(f"hived refused the kernel connection report of job {job_id} "
                                    f"({e.code}): {line}") from None
            why = f"{e.code}: {line}"
        except (urllib.error.URLError, OSError) as e:
            why = str(getattr(e, "reason", e))
        if time.monotonic() + pause > deadline:
            raise ReportRefused(f"hived at {url} did not take the kernel connection report of job {job_id} "
                                f"within {retry_for:g} s: {why}")
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def _error_line(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read() or b"{}").get("error") or e.reason)
    except ValueError:
        return str(e.reason)


def from_env(info: dict) -> dict:
    """Report ``info`` as the pod's environment says (see the module's doc)."""
    missing = [k for k in ENV if not os.environ.get(k)]
    if missing:
        raise ReportRefused(f"cannot report the kernel connection: {', '.join(missing)} not set "
                            "(hived sets them in a kernel job's pod)")
    env = os.environ
    return report(env["HIVED_KERNEL_REPORT_URL"], env["HIVED_JOB_ID"], env["HIVED_KERNEL_SECRET"],
                  body_of(info, env["HIVED_POD_NAME"], env["HIVED_POD_IP"]))


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print("usage: python -m hived.kernels.report CONNECTION_FILE", file=sys.stderr)
        return 2
    try:
        answer = from_env(json.loads(Path(args[0]).read_text()))
    except (ReportRefused, OSError, ValueError) as exc:
        print(f"hived: {exc}", file=sys.stderr)
        return 1
    print(f"hived: kernel connection of job {answer.get('id')} reported (pod {answer.get('pod')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
