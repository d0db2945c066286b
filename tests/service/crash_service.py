"""A real service process for the crash tests: recover, dump, submit, run.

Usage: crash_service.py SPEC DATA_DIR N_JOBS

On start it writes what it recovered to DATA_DIR/recovered-<pid>.json (before
scheduling anything), then submits job-0000 .. job-N-1 that are not stored yet
(each acknowledged id is appended to DATA_DIR/acked.log after submit returns),
and exits 0 once every job has ended. The test kills it with SIGKILL at
random instants and restarts it.
"""
import json
import os
import sys
import threading
import time

import yaml

from hived.service.scheduler import SchedulerService


def payload(i: int) -> dict:
    vc, user = ("vca", "alice") if i % 2 else ("vcb", "bob")
    p = {"vc": vc, "name": f"job-{i:04d}", "command": f"sleep {0.1 + (i % 4) * 0.05}",
         "job_class": "te" if i % 5 == 0 else "be", "gpus": 2 if i % 3 == 0 else 1,
         "grace_period": 0.2}
    if i % 7 == 0:   # a gang of two 1-GPU pods (two 2-GPU pods cannot share a 4-GPU socket cell)
        p["pods"], p["gpus"] = 2, 1
    return p, user


def main() -> int:
    spec_path, data_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    spec = yaml.safe_load(open(spec_path))
    for vc in spec["virtualClusters"].values():   # submits as fast as it can: past the default rate limits
        vc["admission"] = {"submitsPerSecond": 100000, "submitsPerSecondPerUser": 100000}
    svc = SchedulerService(spec, data_dir, tick_seconds=0.05,
                           scheme=os.environ.get("HIVED_TEST_SCHEME", "hived"),
                           synchronous=os.environ.get("HIVED_TEST_SYNC", "FULL"))
    jobs = {j["id"]: {"name": j["name"], "state": j["state"], "placement": j["placement"]}
            for j in svc.list_jobs()}
    with open(os.path.join(data_dir, f"recovered-{os.getpid()}.json"), "w") as f:
        json.dump({"jobs": jobs, "summary": svc.recovered}, f)
    svc.start()
    names = {j["name"] for j in jobs.values()}
    # HIVED_TEST_SUBMITTERS threads submit at once (their commits share fsyncs: group commit)
    threads = int(os.environ.get("HIVED_TEST_SUBMITTERS", "1"))
    lock = threading.Lock()
    with open(os.path.join(data_dir, "acked.log"), "a") as acked:
        def submit_every(k: int) -> None:
            for i in range(k, n, threads):
                p, user = payload(i)
                if p["name"] in names:
                    continue
                job = svc.submit(user, p)
                with lock:   # acknowledged = submit returned: only then is it written here
                    acked.write(f"{job['id']} {p['name']}\n")
                    acked.flush()
                time.sleep(0.004)
        workers = [threading.Thread(target=submit_every, args=(k,)) for k in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    while any(j["state"] not in ("succeeded", "failed", "cancelled") for j in svc.list_jobs()):
        time.sleep(0.05)
    svc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
