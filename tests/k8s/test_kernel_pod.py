"""Jupyter kernels on Kubernetes: a real `hived serve --launcher kubernetes` on the shared test API
server, the kernel pod's spec and Secret, the report route and its refusals, and a kernel started
through jupyter_client that is reached at what its "pod" reported.

No kubelet runs pods here: the test plays it. It marks the pod Running, runs the pod's container
command as a local process with the pod's environment (the values the kubelet would resolve: the
Secret's key, the pod's name, 127.0.0.1 as its IP), and on deletion stops that process and confirms.
"""
from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests
import yaml
from k8s_helpers import spec_for, vc_ns, vc_prefix

from hived.k8s import kernel_pod as kp
from hived.k8s import pod_builder as pb
from hived.kernels.report import SECRET_HEADER, ReportRefused, report
from hived.testing.mlflow_server import current_user, start_server, stop_server

HIVED = [sys.executable, "-m", "hived.cli.main"]
USER = current_user()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(kube, core, ns, uid, nodes, tmp: Path):
    """`hived serve --launcher kubernetes` for VC vca (its namespace beside ``ns``), the caller its user."""
    for i in range(2):
        nodes.add(f"{uid}-n{i}")
    vca = vc_ns(core, ns, "vca")
    own = vc_ns(core, ns, "sys")      # hived's own namespace (its signing key, its job records)
    (tmp / "policy.yaml").write_text(f"namespacePrefix: {vc_prefix(ns)}\nschedulerNamespace: {own}\n")
    (tmp / "template.yaml").write_text("image: registry.example/kernel:1\n")
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {"HIVED_K8S_KUBECONFIG": kube.kubeconfig, "HIVED_K8S_NAMESPACE": own, "HIVED_K8S_INSTANCE": uid,
           "HIVED_K8S_TEMPLATE": str(tmp / "template.yaml"), "HIVED_K8S_POLICY": str(tmp / "policy.yaml"),
           "HIVED_KERNEL_REPORT_URL": url, "HIVED_K8S_KERNEL_PYTHON": sys.executable}
    spec = spec_for(uid, users={"vca": [USER], "vcb": ["bob"]})
    proc, info = start_server(tmp, tick=0.1, port=port, spec_text=yaml.safe_dump(spec), extra_env=env,
                              args=("--launcher", "kubernetes", "--trust-user-header"))
    try:
        yield {**info, "url": url, "vca": vca, "proc": proc, "tmp": tmp}
    finally:
        stop_server(proc)


class Api:
    def __init__(self, srv):
        self.base = srv["url"] + "hived/api/"
        self.headers = {"Authorization": f"token {srv['token']}"}

    def __call__(self, method, path, user=USER, body=None, **kw):
        headers = {**self.headers, "X-Hived-User": user, **kw.pop("headers", {})}
        return requests.request(method, self.base + path, json=body, headers=headers, timeout=30, **kw)

    def report(self, job_id, secret, body=None, raw=None):
        headers = {SECRET_HEADER: secret} if secret is not None else {}
        if raw is not None:
            return requests.post(f"{self.base}jobs/{job_id}/kernel-connection", data=raw, timeout=30,
                                 headers={**headers, "Content-Type": "application/json"})
        return requests.post(f"{self.base}jobs/{job_id}/kernel-connection", json=body, headers=headers, timeout=30)

    def wait(self, job_id, pred, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            job = self("GET", f"jobs/{job_id}").json()
            if pred(job):
                return job
            assert time.monotonic() < deadline, job
            time.sleep(0.05)


def wait_for(pred, timeout=30.0, what=""):
    deadline = time.monotonic() + timeout
    while not (value := pred()):
        assert time.monotonic() < deadline, f"not seen in {timeout} s: {what}"
        time.sleep(0.05)
    return value


def job_pods(core, ns, job_id):
    return core.list_namespaced_pod(ns, label_selector=f"{pb.L_JOB}={job_id}").items


def kernel_secret(core, ns, job_id) -> str:
    s = core.read_namespaced_secret(kp.secret_name(job_id), ns)
    return base64.b64decode(s.data[kp.SECRET_KEY]).decode()


def conn(pod: str, **kw) -> dict:
    info = {"ip": "127.0.0.1", "transport": "tcp", "key": "k" * 64, "signature_scheme": "hmac-sha256",
            "shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003, "control_port": 50004,
            "hb_port": 50005, "hived_host_port": 50006}
    info.update(kw)
    return {"pod": pod, "connection": {k: v for k, v in info.items() if v is not None}}


def submit_kernel(api, name="k", gpus=2, kernel=True):
    body = {"vc": "vca", "gpus": gpus, "job_class": "te", "name": name, "grace_period": 5,
            "command": [sys.executable, "-m", "hived.kernels.host", "--", sys.executable, "-m", "ipykernel_launcher",
                        "-f", "{connection_file}"], "max_retries": 0}
    if kernel:
        body["labels"] = {"kernel": name}
    r = api("POST", "jobs", body=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def run_pods(api, core, kubelet, ns, job_id):
    """The job's pods exist; the test's kubelet runs them; hived sees the job running."""
    pods = wait_for(lambda: job_pods(core, ns, job_id), what=f"pods of {job_id}")
    for p in pods:
        kubelet.run(ns, p.metadata.name)
    api.wait(job_id, lambda j: j["state"] == "running")
    return [p.metadata.name for p in pods]


# -- the pod, the Secret, the route ---------------------------------------------------------
def test_kernel_pod_gets_its_own_secret_and_the_route_takes_only_its_report(kube, core, ns, uid, nodes, kubelet,
                                                                           tmp_path):
    with served(kube, core, ns, uid, nodes, tmp_path) as srv:
        api, vca = Api(srv), srv["vca"]
        j1 = submit_kernel(api, "k1")
        j2 = submit_kernel(api, "k2")
        (pod1,) = run_pods(api, core, kubelet, vca, j1)
        (pod2,) = run_pods(api, core, kubelet, vca, j2)
        s1, s2 = kernel_secret(core, vca, j1), kernel_secret(core, vca, j2)
        assert len(s1) == 64 and s1 != s2

        # the pod spec: the secret from the job's own Secret (no literal), the pod's name and IP,
        # its GPUs, the image's python; nothing of the provisioner's local connection
        (p1,) = job_pods(core, vca, j1)
        c = p1.spec.containers[0]
        env = {e.name: e for e in c.env}
        ref = env["HIVED_KERNEL_SECRET"].value_from.secret_key_ref
        assert (ref.name, ref.key) == (kp.secret_name(j1), "secret") and env["HIVED_KERNEL_SECRET"].value is None
        assert env["HIVED_POD_NAME"].value_from.field_ref.field_path == "metadata.name"
        assert env["HIVED_POD_IP"].value_from.field_ref.field_path == "status.podIP"
        assert env["HIVED_KERNEL_REPORT_URL"].value == srv["url"]
        assert len(p1.metadata.annotations[pb.A_GPUS].split(",")) == 2
        assert "JUPYTER_KERNEL_CONNECTION" not in env
        assert c.command[:4] == [sys.executable, "-m", "hived.kernels.host", "--"]
        text = json.dumps(p1.to_dict(), default=str)
        assert s1 not in text and s2 not in text
        (p2,) = job_pods(core, vca, j2)
        assert {e.name: e for e in p2.spec.containers[0].env}["HIVED_KERNEL_SECRET"] \
            .value_from.secret_key_ref.name == kp.secret_name(j2)

        # nothing shows the secret: job views, the job list, `hived jobs`
        for path in (f"jobs/{j1}", "jobs"):
            assert s1 not in api("GET", path).text
        out = subprocess.run([*HIVED, "jobs"], capture_output=True,
                             text=True, env={**os.environ, "HIVED_URL": srv["url"], "HIVED_TOKEN": srv["token"]})
        assert s1 not in out.stdout + out.stderr

        # refused, nothing stored: a wrong secret answers as a job that does not exist does
        wrong = api.report(j1, "0" * 64, conn(pod1))
        missing = api.report("j999", "0" * 64, conn(pod1))
        assert wrong.status_code == missing.status_code == 403
        assert wrong.json()["error"].replace(j1, "J") == missing.json()["error"].replace("j999", "J")
        assert api.report(j1, s2, conn(pod1)).status_code == 403          # another job's secret
        assert api.report(j1, None, conn(pod1)).status_code == 403        # none
        other = api.report(j1, s1, conn(pod2))                             # another job's pod
        assert other.status_code == 403 and pod2 in other.json()["error"] and pod1 in other.json()["error"]
        assert api.report(j1, s1, conn(pod1, ip="0.0.0.0")).status_code == 400
        assert api.report(j1, s1, conn(pod1, shell_port=70000)).status_code == 400
        assert api.report(j1, s1, conn(pod1, key=None)).status_code == 400
        assert api.report(j1, s1, {**conn(pod1), "extra": 1}).status_code == 400
        assert api.report(j1, s1, raw=b"{not json").status_code == 400
        big = api.report(j1, s1, raw=json.dumps({**conn(pod1), "pad": "x" * 5000}).encode())
        assert big.status_code == 413, big.text
        assert api("GET", f"jobs/{j1}/kernel-connection").json()["connection"] is None

        # the right secret from the job's pod: stored, readable by the owner only
        ok = api.report(j1, s1, conn(pod1))
        assert ok.status_code == 200 and ok.json() == {"id": j1, "pod": pod1, "stored": True}, ok.text
        got = api("GET", f"jobs/{j1}/kernel-connection").json()
        assert got["launcher"] == "kubernetes" and got["pod"] == pod1
        assert got["connection"]["key"] == "k" * 64 and got["connection"]["ip"] == "127.0.0.1"
        hidden = api("GET", f"jobs/{j1}/kernel-connection", user="bob")
        nowhere = api("GET", "jobs/j999/kernel-connection", user="bob")
        assert hidden.status_code == nowhere.status_code == 404
        assert hidden.json()["error"].replace(j1, "J") == nowhere.json()["error"].replace("j999", "J")
        assert api("GET", f"jobs/{j2}/kernel-connection").json()["connection"] is None

        # the job ends: the info is gone, a later report is refused, the Secret is deleted
        assert api("POST", f"jobs/{j1}/cancel", body={}).status_code == 200
        wait_for(lambda: all(p.metadata.deletion_timestamp for p in job_pods(core, vca, j1)))
        kubelet.confirm_deletion(vca, pod1)
        api.wait(j1, lambda j: j["state"] == "cancelled")
        assert api("GET", f"jobs/{j1}/kernel-connection").json()["connection"] is None
        late = api.report(j1, s1, conn(pod1))
        assert late.status_code == 409 and "cancelled" in late.json()["error"], late.text

        def secret_gone():
            from kubernetes.client.rest import ApiException
            try:
                core.read_namespaced_secret(kp.secret_name(j1), vca)
            except ApiException as e:
                return e.status == 404
            return False
        wait_for(secret_gone, what="the kernel Secret deleted with its job")
        assert kernel_secret(core, vca, j2) == s2       # the other kernel's stays

        # an ordinary job gets no secret and no Secret
        j3 = submit_kernel(api, "plain", gpus=1, kernel=False)
        (p3,) = wait_for(lambda: job_pods(core, vca, j3))
        assert not {"HIVED_KERNEL_SECRET", "HIVED_KERNEL_REPORT_URL"} & {e.name for e in p3.spec.containers[0].env}


def test_the_reporter_gets_hiveds_line_and_gives_up_on_no_service(kube, core, ns, uid, nodes, kubelet, tmp_path):
    with served(kube, core, ns, uid, nodes, tmp_path) as srv:
        api, vca = Api(srv), srv["vca"]
        j1 = submit_kernel(api, "k1")
        (pod1,) = run_pods(api, core, kubelet, vca, j1)
        secret = kernel_secret(core, vca, j1)
        with pytest.raises(ReportRefused, match=rf"refused .* job {j1} \(403\): kernel secret not accepted"):
            report(srv["url"], j1, "f" * 64, conn(pod1))
        # the module's command line, with the pod's environment
        info = conn(pod1)["connection"]
        path = tmp_path / "kernel.json"
        path.write_text(json.dumps({**info, "ip": "0.0.0.0"}))
        env = {**os.environ, "HIVED_KERNEL_REPORT_URL": srv["url"], "HIVED_KERNEL_SECRET": secret,
               "HIVED_JOB_ID": j1, "HIVED_POD_NAME": pod1, "HIVED_POD_IP": "10.1.2.3"}
        done = subprocess.run([sys.executable, "-m", "hived.kernels.report", str(path)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        got = api("GET", f"jobs/{j1}/kernel-connection").json()
        assert got["connection"]["ip"] == "10.1.2.3" and got["connection"]["shell_port"] == info["shell_port"]
        bad = subprocess.run([sys.executable, "-m", "hived.kernels.report", str(path)],
                             env={**env, "HIVED_POD_NAME": "hived-j9-a0-r0"}, capture_output=True, text=True,
                             timeout=60)
        assert bad.returncode == 1 and "is not one of job" in bad.stderr and len(bad.stderr.splitlines()) == 1
    with pytest.raises(ReportRefused, match="did not take the kernel connection report"):
        report(f"http://127.0.0.1:{_free_port()}/", "j1", "x", conn("p"), retry_for=0.3)


# -- a kernel started through jupyter_client -------------------------------------------------
class PodRunner:
    """The kubelet's part for one kernel pod: run its container as a local process."""

    def __init__(self, core, kubelet, ns):
        self.core, self.kubelet, self.ns = core, kubelet, ns
        self.proc: subprocess.Popen | None = None
        self.name = ""

    def start(self, pod) -> None:
        self.name = pod.metadata.name
        c = pod.spec.containers[0]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HIVED_", "JUPYTER_", "JPY_"))}
        for e in c.env:
            if e.value is not None:
                env[e.name] = e.value
        job_id = pod.metadata.annotations[pb.A_JOB]
        env.update(HIVED_KERNEL_SECRET=kernel_secret(self.core, self.ns, job_id), HIVED_POD_NAME=self.name,
                   HIVED_POD_IP="127.0.0.1", NVIDIA_VISIBLE_DEVICES=pod.metadata.annotations[pb.A_GPUS])
        self.kubelet.run(self.ns, self.name)
        self.proc = subprocess.Popen(c.command, env=env, start_new_session=True)

    def stop_when_deleted(self) -> None:
        def deleting():
            p = self.core.read_namespaced_pod(self.name, self.ns)
            return p.metadata.deletion_timestamp is not None
        wait_for(deleting, what="the kernel pod deleted")
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)
        self.kubelet.confirm_deletion(self.ns, self.name)


def kernelspec_for(srv, tmp_path, monkeypatch, start_timeout: int) -> None:
    """`hived kernelspec install` for VC vca (2 GPUs), found by jupyter_client, and the user's
    service identity in the environment (no Hub)."""
    prefix = tmp_path / "prefix"
    subprocess.run([*HIVED, "kernelspec", "install", "--vc", "vca", "--gpus", "2", "--prefix", str(prefix),
                    "--start-timeout", str(start_timeout)], check=True, capture_output=True)
    monkeypatch.setenv("HIVED_URL", srv["url"])
    monkeypatch.setenv("HIVED_TOKEN", srv["token"])
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    for var in ("JUPYTERHUB_API_URL", "JUPYTERHUB_API_TOKEN", "HIVED_USER"):
        monkeypatch.delenv(var, raising=False)


def test_a_kernel_runs_in_its_pod_and_is_reached_at_what_the_pod_reported(kube, core, ns, uid, nodes, kubelet,
                                                                          tmp_path, monkeypatch):
    from jupyter_client import KernelManager
    with served(kube, core, ns, uid, nodes, tmp_path) as srv:
        api, vca = Api(srv), srv["vca"]
        kernelspec_for(srv, tmp_path, monkeypatch, start_timeout=120)
        km = KernelManager(kernel_name="hived-vca-2gpu")
        started: list = []
        starter = threading.Thread(target=lambda: started.append(km.start_kernel() or True), daemon=True)
        starter.start()
        pod = wait_for(lambda: next(iter(core.list_namespaced_pod(
            vca, label_selector=f"{pb.L_INSTANCE}={uid}").items), None), what="the kernel pod")
        runner = PodRunner(core, kubelet, vca)
        runner.start(pod)
        starter.join(120)
        assert started, "the kernel did not start"
        job_id = km.provisioner.job_id
        assert km.ip == "127.0.0.1"      # the pod's IP, as the pod reported it
        got = api("GET", f"jobs/{job_id}/kernel-connection").json()
        assert got["pod"] == runner.name and km.shell_port == got["connection"]["shell_port"]
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            out = []
            code = "import os; print(os.environ['HIVED_JOB_ID'], os.environ['HIVED_POD_NAME'], " \
                   "os.environ['NVIDIA_VISIBLE_DEVICES'], os.getpid())"
            reply = kc.execute_interactive(code, timeout=60, output_hook=lambda m: out.append(
                m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
            assert reply["content"]["status"] == "ok"
            job_seen, pod_seen, gpus, pid = "".join(out).split()
            assert (job_seen, pod_seen) == (job_id, runner.name) and len(gpus.split(",")) == 2
            # interrupt: a SIGINT to the kernel in the pod, through the pod's host; the job stays
            msg_id = kc.execute("import time; time.sleep(60)")
            wait_for(lambda: any(m["content"].get("execution_state") == "busy"
                                 for m in [kc.get_iopub_msg(timeout=5)]), what="the cell running")
            km.interrupt_kernel()
            reply = kc.get_shell_msg(timeout=30)
            assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["ename"] == "KeyboardInterrupt"
            assert api("GET", f"jobs/{job_id}").json()["state"] == "running"
            # restart: a new kernel in the same pod (same job, same GPUs), at the same ports
            km.restart_kernel()
            kc.wait_for_ready(timeout=60)
            out.clear()
            reply = kc.execute_interactive("import os; print(os.getpid(), os.environ['HIVED_POD_NAME'])",
                                           timeout=60, output_hook=lambda m: out.append(
                                               m["content"].get("text", "")) if m["msg_type"] == "stream" else None)
            new_pid, pod_after = "".join(out).split()
            assert reply["content"]["status"] == "ok" and new_pid != pid and pod_after == runner.name
            job = api("GET", f"jobs/{job_id}").json()
            assert job["state"] == "running" and job["attempts"] == 1
        finally:
            kc.stop_channels()
        stopper = threading.Thread(target=runner.stop_when_deleted, daemon=True)
        stopper.start()
        km.shutdown_kernel()
        stopper.join(60)
        assert api("GET", f"jobs/{job_id}").json()["state"] == "cancelled"
        assert runner.proc is not None and runner.proc.poll() is not None
        assert api("GET", f"jobs/{job_id}/kernel-connection").json()["connection"] is None
        wait_for(lambda: not job_pods(core, vca, job_id), what="the kernel pod gone")


def test_a_pod_that_never_reports_fails_the_start_at_start_timeout(kube, core, ns, uid, nodes, kubelet, tmp_path,
                                                                    monkeypatch):
    from jupyter_client import KernelManager
    with served(kube, core, ns, uid, nodes, tmp_path) as srv:
        api, vca = Api(srv), srv["vca"]
        kernelspec_for(srv, tmp_path, monkeypatch, start_timeout=8)
        km = KernelManager(kernel_name="hived-vca-2gpu")
        failed: list = []

        def start():
            try:
                km.start_kernel()
            except Exception as exc:   # noqa: BLE001 - the start's error is what is checked
                failed.append(exc)
        starter = threading.Thread(target=start, daemon=True)
        starter.start()
        pod = wait_for(lambda: next(iter(core.list_namespaced_pod(
            vca, label_selector=f"{pb.L_INSTANCE}={uid}").items), None), what="the kernel pod")
        kubelet.run(vca, pod.metadata.name)      # it runs, but nothing in it reports
        job_id = pod.metadata.annotations[pb.A_JOB]
        wait_for(lambda: not starter.is_alive() or None, timeout=60, what="the start to end")
        assert failed and "did not report the kernel's connection within 8 s (start_timeout)" in str(failed[0])
        assert api("GET", f"jobs/{job_id}").json()["state"] in ("preempting", "cancelled")


def test_without_a_report_url_a_kernel_job_is_refused_at_submission(hv):
    """Its pod could not tell anyone how to reach the kernel: refused before it queues, naming the fix."""
    from hived.core.engine import RequestError
    svc = hv.service()
    body = {"vc": "vca", "gpus": 2, "job_class": "te", "labels": {"kernel": "k"},
            "command": ["python", "-m", "hived.kernels.host", "--", "python", "-m", "ipykernel_launcher"]}
    with pytest.raises(RequestError, match=r"HIVED_KERNEL_REPORT_URL") as err:
        svc.submit("alice", body)
    assert err.value.field == "labels.kernel"
    assert svc.list_jobs() == []
    assert svc.submit("alice", {**body, "labels": {}})["state"] == "queued"     # an ordinary job is taken
