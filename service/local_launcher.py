"""LocalLauncher: each pod of a gang is a process group on this machine.

Layout under the launcher's root directory (``<data_dir>/jobs``)::

    <job>/attempt-<n>/launched.json     written BEFORE any process starts
    <job>/attempt-<n>/rank-<r>.spec.json what pod_runner runs
    <job>/attempt-<n>/rank-<r>.pod.json pid, process group, start time (by pod_runner)
    <job>/attempt-<n>/rank-<r>.exit.json exit code (by pod_runner when the command ends)
    <job>/logs/rank-<r>/<offset>.log    the pod's output, all attempts, rotated
    <job>/work/                         $HIVED_JOB_DIR: checkpoints survive preemption

These files are what lets a restarted service adopt pods it did not start
(it is no longer their parent) and still learn their exit codes.

What a job gets (docs/security.md, "Local mode"): an environment built from
an allow-list (never the server's own), its own account when the service runs
as root (local_accounts.py), its own cgroup or a process-tree sweep
(local_cgroups.py, pod_runner.py), and folders no other job can read:
``work`` is 0700 and owned by the job's account; the log folders (0700, files
0600) and the ``attempt-*`` folders (0700; the spec files hold the job's env)
are the service's own, since a privileged runner writes there; ``<job>`` and
the jobs folder are 0711, so a job can reach its own folder without listing
anyone else's.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from hived.core.jobs import JobRequest, Placement

from . import local_cgroups, local_reach
from .launcher import LauncherEvent
from .local_accounts import Account, AccountError, JobAccounts, shared_account_note
from .local_exits import ExitWatcher
from .pod_runner import SegmentLog, proc_start_ticks, seg_path, segments

log = logging.getLogger("hived.local_launcher")

RUNNER = str(Path(__file__).with_name("pod_runner.py"))
LOG_TAIL_BYTES = 4096
GANG_KILL_GRACE = 5.0   # when one pod of a gang fails, the others get this long
RUNNER_KILL_GRACE = 3.0  # a runner told to kill its pod that is still there this much later is killed
# what a job keeps of the server's environment: nothing that could be a secret
ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR")
ENV_ALLOWED_PREFIXES = ("LC_",)


def job_environment(server_env: dict, account: Account | None, work: Path) -> dict:
    """The allow-listed part of the server's environment plus the account's identity."""
    env = {k: v for k, v in server_env.items()
           if k in ENV_ALLOWED or k.startswith(ENV_ALLOWED_PREFIXES)}
    env.setdefault("PATH", os.defpath)
    if account is None:     # the server's own account
        try:
            pw = pwd.getpwuid(os.geteuid())
            name, home = pw.pw_name, pw.pw_dir
        except KeyError:
            name, home = str(os.geteuid()), str(work)
    else:
        name, home = account.name, account.home or str(work)
    env.update({"HOME": home, "USER": name, "LOGNAME": name})
    return env


def _pod_resources(request: JobRequest) -> list[tuple]:
    """(cpus, memory_gb) of each rank, groups in order."""
    return [(g.cpus, g.memory_gb) for g in request.groups for _ in range(g.pods)]


def _searchable_by(path: Path, account: Account) -> str | None:
    """The first folder on the way to ``path`` that ``account`` cannot pass, or None."""
    for d in [*reversed(path.parents), path]:
        st = d.stat()
        if st.st_uid == account.uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == account.gid or st.st_gid in account.groups:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return f"{d} (mode {st.st_mode & 0o777:04o})"
    return None


@dataclass
class _Pod:
    rank: int
    pid: int | None = None
    start_ticks: int | None = None
    proc: subprocess.Popen | _ForkedRunner | None = None   # None when adopted after a restart
    cgroup: str | None = None
    mark: str = ""                             # HIVED_POD value in its processes' environment
    legacy: bool = False                       # adopted from a runner that predates SIGTERM forwarding
    exit_code: int | None = None
    done: bool = False
    lost: bool = False


@dataclass
class _Job:
    job_id: str
    attempt: int
    dir: Path
    pods: list[_Pod] = field(default_factory=list)
    kill_at: float | None = None     # SIGKILL the pods at this monotonic time
    killed: bool = False
    hard_kill_at: float | None = None  # runners still alive then are killed themselves
    terminating: bool = False
    cause: _Pod | None = None        # the pod whose failure stopped the gang


def _pid_alive(pid: int, start_ticks: int | None) -> bool:
    """Alive, not a zombie, and the same process (pid not reused)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
    except OSError:
        return False
    if fields[0] in ("Z", "X"):
        return False
    return start_ticks is None or int(fields[19]) == start_ticks


def processes_with_env(name: str, value: str) -> list[int]:
    """Processes whose environment carries ``name=value`` (a pod's ``HIVED_POD`` mark, wherever
    its processes went)."""
    needle = f"\0{name}={value}\0".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in b"\0" + f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _atomic_write(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


class _Spawner:
    """The fork server (``pod_runner.py --standby``): runners are forks of one ready
    interpreter. A reader thread takes its answers: runner pids, and the exit
    status of each runner when it ends (a runner is the server's child, not ours)."""

    def __init__(self, python: str, path: str, cgroup_base: Path | None) -> None:
        self.path, self.cgroup_base = path, cgroup_base   # what it was started with
        base = [str(cgroup_base)] if cgroup_base is not None else []
        self.proc = subprocess.Popen([python, "-I", "-S", RUNNER, "--standby", *base], env={"PATH": path},
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        self.ended: dict[int, int] = {}
        self._pids: queue.Queue[tuple[int, str | None] | None] = queue.Queue()
        self.reading = True
        threading.Thread(target=self._read, name="hived-runner-spawner", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                parts = line.split()
                if parts[:1] == [b"x"] and len(parts) == 3:
                    self.ended[int(parts[1])] = int(parts[2])
                elif len(parts) == 2:   # a runner: its pid and the cgroup it waited in
                    self._pids.put((int(parts[0]), None if parts[1] == b"-" else parts[1].decode()))
        finally:
            self.reading = False
            self._pids.put(None)

    def spawn(self, spec_path: Path) -> tuple[int, str | None]:
        """A runner for ``spec_path``: its pid, and the cgroup it joined ahead (the pod's
        when the spec asks for one). OSError when the server is gone."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{spec_path}\n".encode())
        self.proc.stdin.flush()
        try:
            answer = self._pids.get(timeout=30)
        except queue.Empty:
            answer = None
        if answer is None:
            raise OSError("the pod runner fork server did not answer")
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.close()   # end of input: it exits, its runners go on
            except OSError:
                pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class _ForkedRunner:
    """A runner forked by the spawner; its exit status comes from the spawner's reports."""

    def __init__(self, spawner: _Spawner, pid: int) -> None:
        self.spawner, self.pid = spawner, pid

    def status(self, start_ticks: int | None) -> tuple[bool, int | None]:
        """(still running, exit status); the status is None when nobody can tell (the spawner gone)."""
        rc = self.spawner.ended.pop(self.pid, None)
        if rc is None and _pid_alive(self.pid, start_ticks):
            return True, None
        # it ended: the spawner reaps it, then reports, a moment later
        deadline = time.monotonic() + 1.0
        while rc is None and self.spawner.reading and time.monotonic() < deadline:
            time.sleep(0.002)
            rc = self.spawner.ended.pop(self.pid, None)
        return False, rc


class LocalLauncher:
    """Runs gangs as local processes; see the module docstring for the files.

    ``max_log_bytes``/``keep_logs``: each pod's log is rotated when a segment
    reaches ``max_log_bytes``; the newest ``keep_logs`` segments are kept.
    ``gpu_ids``: optional map (node, gpu index) -> the id to put in
    CUDA_VISIBLE_DEVICES (a UUID from discovery); default the index itself.
    ``accounts``: (user, vc) -> the spec's unix account or None
    (``local_accounts.spec_account``); ``job_account``: what unmapped jobs run
    as when the service is root (``vc``, ``server`` or ``refuse``; default
    ``$HIVED_JOB_ACCOUNT`` or ``vc``); ``cgroups``: ``auto`` or ``off``
    (default ``$HIVED_CGROUPS`` or ``auto``).
    """

    kind = "local"   # what people are told runs the jobs (service/launcher.py)

    def __init__(self, root: str | os.PathLike, *, max_log_bytes: int = 10 << 20, keep_logs: int = 5,
                 gpu_ids: dict | None = None, python: str = sys.executable,
                 accounts=None, job_account: str | None = None, cgroups: str | None = None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o711)
        self.accounts = JobAccounts(self.root, accounts, job_account)
        self._warn_if_unreachable()
        self._cgroups = cgroups
        self.cgroup_base = local_cgroups.cgroup_base(self.root, cgroups)   # None: process-tree sweep
        if self.cgroup_base is not None:   # made again at the next launch (it holds the spare runner's)
            local_cgroups.remove(str(self.cgroup_base), wait=0)
        self.tag = hashlib.sha256(self.root.resolve().as_posix().encode()).hexdigest()[:12]   # HIVED_POD
        self.max_log_bytes, self.keep_logs = max_log_bytes, keep_logs
        self.gpu_ids = gpu_ids or {}
        self.python = python
        self._jobs: dict[str, _Job] = {}
        self._events: list[LauncherEvent] = []
        self._lock = threading.RLock()
        self._exits: ExitWatcher | None = None
        self._spawner: _Spawner | None = None   # the fork server the runners come from

    def on_change(self, notify) -> None:
        """Have ``notify()`` called (from another thread) as soon as a pod's runner ends,
        so that the next ``poll`` reports the exit without waiting for a timer."""
        if self._exits is not None:
            self._exits.close()
        self._exits = ExitWatcher(notify)

    def close(self) -> None:
        """Stop watching for exits and end the runners' fork server (the pods run on; a
        restarted service adopts them)."""
        if self._exits is not None:
            self._exits.close()
            self._exits = None
        with self._lock:
            self._drop_spawner()

    def warm(self) -> None:
        """Start the runners' fork server now rather than at the first launch."""
        with self._lock:
            if self._spawner is None:
                self._make_spawner(job_environment(dict(os.environ), None, self.root)["PATH"])

    def _runner(self, spec_path: Path, path: str) -> tuple[subprocess.Popen | _ForkedRunner, str | None]:
        """The pod's runner: a fork of the fork server (started with the same PATH), else
        a new interpreter. -I -S: the runner needs the standard library only; skipping
        site and user paths saves a third of its start-up. Its own environment is
        minimal: the job's goes through the spec file, so nothing of it (LD_PRELOAD ...)
        reaches the runner, root or not."""
        if self._spawner is not None and (self._spawner.path != path or self._spawner.cgroup_base != self.cgroup_base
                                          or self._spawner.proc.poll() is not None):
            self._drop_spawner()
        if self._spawner is None:
            self._make_spawner(path)
        if self._spawner is not None:
            try:
                pid, cgroup = self._spawner.spawn(spec_path)
                return _ForkedRunner(self._spawner, pid), cgroup
            except OSError as exc:
                log.warning("pod runner fork server failed (%s): starting the runner on its own", exc)
                self._drop_spawner()
        return subprocess.Popen([self.python, "-I", "-S", RUNNER, str(spec_path)], env={"PATH": path},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True), None

    def _make_spawner(self, path: str) -> None:
        try:
            self._spawner = _Spawner(self.python, path, self.cgroup_base)
        except OSError as exc:   # launches start their runners themselves
            log.warning("no pod runner fork server: %s", exc)

    def _drop_spawner(self) -> None:
        spawner, self._spawner = self._spawner, None
        if spawner is not None:
            spawner.close()

    def _watch(self, pid: int | None) -> None:
        if self._exits is not None and pid:
            self._exits.watch(pid)

    # -- paths -------------------------------------------------------------

    def job_dir(self, job_id: str) -> Path:
        if not job_id or "/" in job_id or job_id in (".", ".."):
            raise ValueError(f"job_id: not usable as a directory name: {job_id!r}")
        return self.root / job_id

    def _attempt_dir(self, job_id: str, attempt: int) -> Path:
        return self.job_dir(job_id) / f"attempt-{attempt}"

    def _log_dir(self, job_id: str, rank: int) -> Path:
        return self.job_dir(job_id) / "logs" / f"rank-{rank}"

    # -- protocol ----------------------------------------------------------

    def launch(self, job_id: str, request: JobRequest, placement: Placement, attempt: int) -> None:
        argv = self._argv(request.command)
        try:
            account = self.accounts.for_job(request.user, request.vc)
        except AccountError as exc:
            # the service fails the job; its log says why
            self._job_dirs(job_id, None)
            log = SegmentLog(str(self._log_dir(job_id, 0)), self.max_log_bytes, self.keep_logs)
            log.write(f"hived: attempt {attempt} not started: {exc}\n".encode())
            log.f.close()
            raise
        with self._lock:
            if job_id in self._jobs and not self._all_done(self._jobs[job_id]):
                raise RuntimeError(f"launch: job {job_id} still has running pods")
            jdir, work = self._job_dirs(job_id, account)
            adir = self._attempt_dir(job_id, attempt)
            adir.mkdir(mode=0o700, exist_ok=True)
            world = len(placement.pods)
            # the marker first: a restart that finds it knows processes may exist
            _atomic_write(adir / "launched.json", {"attempt": attempt, "world_size": world,
                                                    "time": time.time()})
            job = _Job(job_id, attempt, adir)
            base_env = job_environment(dict(os.environ), account, work)
            resources = _pod_resources(request)
            for pod in placement.pods:
                gpus = [str(self.gpu_ids.get((pod.node, g), g)) for g in pod.gpus]
                mark = f"{self.tag}:{job_id}:{attempt}:{pod.rank}"
                env = dict(base_env)
                env.update({str(k): str(v) for k, v in (request.env or {}).items()})
                env.update({
                    "CUDA_VISIBLE_DEVICES": ",".join(gpus),
                    "NVIDIA_VISIBLE_DEVICES": ",".join(gpus) if gpus else "void",
                    "HIVED_JOB_ID": job_id, "HIVED_VC": request.vc, "HIVED_USER": request.user,
                    "HIVED_RANK": str(pod.rank), "HIVED_WORLD_SIZE": str(world),
                    "HIVED_ATTEMPT": str(attempt), "HIVED_NODE": pod.node,
                    "HIVED_JOB_DIR": str(work), "HIVED_POD": mark, "PYTHONUNBUFFERED": "1",
                })
                cgroup: dict[str, object] | None = None
                cgroup_path: str | None = None
                if self.cgroup_base is not None and not self.cgroup_base.exists():
                    # removed when the last job ended (nothing is left behind on the host)
                    self.cgroup_base = local_cgroups.cgroup_base(self.root, self._cgroups)
                if self.cgroup_base is not None:
                    cpus, mem = resources[pod.rank] if pod.rank < len(resources) else (None, None)
                    cgroup_path = str(self.cgroup_base / f"{job_id}.a{attempt}.r{pod.rank}")
                    cgroup = {"path": cgroup_path, **local_cgroups.pod_limits(cpus, mem)}
                spec = {
                    "argv": argv, "env": env, "rank": pod.rank, "attempt": attempt,
                    "workdir": request.workdir or str(work),
                    "account": account.as_runner() if account else None, "cgroup": cgroup,
                    "log_dir": str(self._log_dir(job_id, pod.rank)),
                    "max_bytes": self.max_log_bytes, "keep": self.keep_logs,
                    "pod_file": str(adir / f"rank-{pod.rank}.pod.json"),
                    "exit_file": str(adir / f"rank-{pod.rank}.exit.json"),
                    "header": f"[hived] job {job_id} rank {pod.rank}/{world} attempt {attempt} "
                              f"on {pod.node} GPUs {','.join(gpus) or '-'}"
                              f"{f' as uid {account.uid}' if account else ''}: {shlex.join(argv)}",
                }
                spec_path = adir / f"rank-{pod.rank}.spec.json"
                _atomic_write(spec_path, spec)
                proc, ready = self._runner(spec_path, base_env["PATH"])
                if cgroup_path is not None and ready is not None:
                    cgroup_path = ready   # the runner's own, joined ahead: the pod is born in it
                job.pods.append(_Pod(pod.rank, proc.pid, proc_start_ticks(proc.pid), proc,
                                     cgroup=cgroup_path, mark=mark))
                self._watch(proc.pid)
            self._jobs[job_id] = job
            self._events.append(LauncherEvent(job_id, "started", attempt=attempt))

    def _job_dirs(self, job_id: str, account: Account | None) -> tuple[Path, Path]:
        """``<job>`` (0711) and ``<job>/logs`` (0700), ours; ``<job>/work`` (0700), the job's account's."""
        jdir = self.job_dir(job_id)
        for d, mode in ((jdir, 0o711), (jdir / "logs", 0o700)):
            d.mkdir(mode=mode, exist_ok=True)
            os.chmod(d, mode)
        work = jdir / "work"
        work.mkdir(mode=0o700, exist_ok=True)
        os.chmod(work, 0o700)
        if account is not None:
            os.chown(work, account.uid, account.gid)
            self._open_path_for(work, account)
        return jdir, work

    def _open_path_for(self, work: Path, account: Account) -> None:
        """The job's account must be able to reach its own folder: the data folder
        (the jobs folder's parent, ours) gets search permission for others (0711,
        no listing); a folder above it that denies search is the operator's to fix."""
        data = self.root.parent
        st = data.stat()
        if st.st_uid == os.geteuid() and st.st_mode & 0o011 != 0o011:
            os.chmod(data, (st.st_mode & 0o7700) | 0o011)
        blocked = _searchable_by(work, account)
        if blocked:
            raise AccountError(f"jobs run as uid {account.uid} cannot reach their folder {work}: {blocked} "
                               "denies search to others; allow it (chmod o+x) or put the data directory "
                               "elsewhere")

    def _warn_if_unreachable(self) -> None:
        """Say at start, not at each job's launch, when jobs under their own uids could never
        reach the data directory (it sits in a folder that denies search to others)."""
        if os.geteuid() != 0 or self.accounts.mode == "server":
            return
        blocked = next((d for d in self.root.parent.resolve().parents
                        if d.stat().st_mode & 0o001 == 0), None)
        if blocked is not None:
            log.warning("jobs run under their own unix accounts, but %s (mode %04o) denies search to "
                        "others, so none of them can reach its folder under %s: allow it (chmod o+x), "
                        "put the data directory elsewhere, or map VCs to accounts that may (docs/security.md)",
                        blocked, blocked.stat().st_mode & 0o777, self.root.parent)

    def shared_account(self, vcs: list[str]) -> str | None:
        """Set when the jobs of several VCs run as one account (local_accounts.shared_account_note)."""
        return shared_account_note(self.accounts, vcs)

    def check_account(self, request: JobRequest) -> None:
        """Raises AccountError when the job could not be given an account (see local_accounts)."""
        self.accounts.for_job(request.user, request.vc, allocate=False)

    def check_reach(self, request: JobRequest, needs: dict | None = None) -> None:
        """Raises ``local_reach.ReachError`` when the job's account cannot reach its workdir,
        its program or a folder in ``needs`` (tested as that account; see local_reach).
        Call it once the VC is known to exist: it gives the VC its uid."""
        account = self.accounts.for_job(request.user, request.vc)
        path = (request.env or {}).get("PATH") or job_environment(dict(os.environ), account, self.root)["PATH"]
        local_reach.check(account, request, path, needs)

    @staticmethod
    def _argv(command) -> list[str]:
        if isinstance(command, str):
            if not command.strip():
                raise ValueError("command: empty")
            return ["/bin/sh", "-c", command]
        argv = [str(a) for a in (command or [])]
        if not argv or not argv[0]:
            raise ValueError("command: empty")
        return argv

    def terminate(self, job_id: str, grace_period: float) -> None:
        """SIGTERM every process of every pod now; kill what is left after ``grace_period`` s.

        The pod runner passes SIGTERM on to all its pod's processes and stays
        until they are gone, so the grace period holds whatever the command
        form (a ``sh -c`` string whose shell dies at once included).
        """
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or self._all_done(job):
                return
            deadline = time.monotonic() + max(0.0, grace_period)
            if job.terminating:
                job.kill_at = min(job.kill_at or deadline, deadline)
            else:
                job.terminating, job.kill_at = True, deadline
                self._signal(job, signal.SIGTERM)
            if grace_period <= 0:
                self._kill(job)

    def _signal(self, job: _Job, sig: int) -> None:
        for pod in job.pods:
            if pod.pid and not pod.done and _pid_alive(pod.pid, pod.start_ticks):
                try:
                    if pod.legacy:   # a runner of an older hived: it expects its group signalled
                        os.killpg(pod.pid, signal.SIGKILL if sig == signal.SIGUSR1 else sig)
                    else:
                        os.kill(pod.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass

    def _kill(self, job: _Job) -> None:
        """The grace is over: the runners kill their pods (and we kill the cgroups ourselves)."""
        if not job.killed:
            job.killed = True
            job.hard_kill_at = time.monotonic() + RUNNER_KILL_GRACE
        self._signal(job, signal.SIGUSR1)
        for pod in job.pods:
            if not pod.done:
                local_cgroups.kill(pod.cgroup)

    def _hard_kill(self, job: _Job) -> None:
        """A runner that did not finish its pod in time: kill it and everything it had."""
        for pod in job.pods:
            if not pod.done:
                self._sweep(pod, runner_too=True)

    def _sweep(self, pod: _Pod, runner_too: bool = False) -> None:
        """Kill a pod whose runner cannot: its cgroup, its runner's group, and every
        process carrying its HIVED_POD mark (daemons re-parented to init)."""
        local_cgroups.kill(pod.cgroup)
        if pod.pid and (runner_too or not _pid_alive(pod.pid, pod.start_ticks)):
            try:   # the runner's group: the command unless it moved out
                os.killpg(pod.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if pod.mark:
            for pid in processes_with_env("HIVED_POD", pod.mark):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def poll(self) -> list[LauncherEvent]:
        with self._lock:
            now = time.monotonic()
            for job in list(self._jobs.values()):
                if self._all_done(job):
                    continue
                if job.kill_at is not None and now >= job.kill_at and not job.killed:
                    self._kill(job)
                if job.hard_kill_at is not None and now >= job.hard_kill_at:
                    self._hard_kill(job)
                    job.hard_kill_at = None
                for pod in job.pods:
                    if not pod.done:
                        self._check_pod(job, pod)
                if self._all_done(job):
                    self._finish(job)
                elif not job.terminating:
                    failed = [p for p in job.pods if p.done and (p.exit_code != 0 or p.lost)]
                    if failed:
                        # one member of a gang failed: the gang cannot go on
                        job.cause = failed[0]
                        self.terminate(job.job_id, GANG_KILL_GRACE)
            events, self._events = self._events, []
            return events

    def _check_pod(self, job: _Job, pod: _Pod) -> None:
        if isinstance(pod.proc, _ForkedRunner):
            running, rc = pod.proc.status(pod.start_ticks)
            if running:
                return
        elif pod.proc is not None:
            rc = pod.proc.poll()
            if rc is None:
                return
        elif pod.pid is not None and _pid_alive(pod.pid, pod.start_ticks):
            return
        else:
            rc = None
        pod.done = True
        info = _read_json(job.dir / f"rank-{pod.rank}.exit.json")
        if info is not None:
            pod.exit_code = int(info["exit_code"])
            return
        # the runner died before its pod ended (killed): what it ran may live on
        self._sweep(pod)
        if job.killed:
            pod.exit_code = -signal.SIGKILL
        elif rc is not None:
            pod.exit_code = rc if rc <= 0 or rc < 128 else -(rc - 128)
        else:
            pod.lost = True                     # gone without a word while we were away

    def _finish(self, job: _Job) -> None:
        bad = job.cause or next((p for p in job.pods if p.lost or p.exit_code != 0), None)
        rank = bad.rank if bad else 0
        if bad is not None and bad.lost:
            code, tail = None, "hived: the pod's processes vanished while the service was down"
        else:
            code, tail = (bad.exit_code if bad else 0), self.tail(job.job_id, rank)
        self._events.append(LauncherEvent(job.job_id, "exited", code, tail, job.attempt))
        del self._jobs[job.job_id]
        for pod in job.pods:
            local_cgroups.remove(pod.cgroup)
        if not self._jobs:   # not waiting: the spare runner's cgroup keeps it while the spawner lives
            local_cgroups.remove(None if self.cgroup_base is None else str(self.cgroup_base), wait=0)

    @staticmethod
    def _all_done(job: _Job) -> bool:
        return all(p.done for p in job.pods)

    def adopt(self, job_id: str, placement: Placement) -> bool:
        """After a restart: track the pods of the job's latest attempt.

        True when they are alive, or ended leaving their exit codes (poll()
        then reports them); False when there is nothing to adopt: never
        launched, or vanished without a trace.
        """
        jdir = self.job_dir(job_id)
        attempts = sorted((int(p.name.split("-")[1]) for p in jdir.glob("attempt-*")
                           if p.name.split("-")[1].isdigit()), reverse=True)
        if not attempts:
            return False
        attempt = attempts[0]
        adir = jdir / f"attempt-{attempt}"
        marker = _read_json(adir / "launched.json")
        if marker is None:
            return False
        job = _Job(job_id, attempt, adir)
        for pod in placement.pods:
            pod_file, exit_file = adir / f"rank-{pod.rank}.pod.json", adir / f"rank-{pod.rank}.exit.json"
            mark = f"{self.tag}:{job_id}:{attempt}:{pod.rank}"
            info = _read_json(pod_file)
            # the runner writes its pod file first thing; give a just-started one a moment
            deadline = time.monotonic() + 2.0
            while info is None and (adir / f"rank-{pod.rank}.spec.json").exists() \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
                info = _read_json(pod_file)
            if info is None:
                ended = _read_json(exit_file)
                if ended is None:   # absent, or damaged (a torn write): nothing says how it ended
                    self._kill_known(job)
                    return False
                job.pods.append(_Pod(pod.rank, None, None, None, done=True, exit_code=int(ended["exit_code"])))
                continue
            pid = int(info["pid"])
            p = _Pod(pod.rank, pid, info.get("start_ticks"), cgroup=info.get("cgroup"), mark=mark,
                     legacy="cgroup" not in info)
            alive = _pid_alive(pid, p.start_ticks)
            if not alive and not exit_file.exists():
                job.pods.append(p)
                self._kill_known(job)   # a gang with a lost member is not worth keeping
                return False
            job.pods.append(p)
        with self._lock:
            self._jobs[job_id] = job
        for p in job.pods:
            self._watch(p.pid)
        return True

    def _kill_known(self, job: _Job) -> None:
        for pod in job.pods:
            if pod.pid:
                self._sweep(pod, runner_too=True)
                local_cgroups.remove(pod.cgroup)

    def running(self) -> list[str]:
        with self._lock:
            return [j for j, job in self._jobs.items() if not self._all_done(job)]

    # -- logs --------------------------------------------------------------

    def logs(self, job_id: str, rank: int = 0, offset: int = 0, limit: int = 1 << 20) -> tuple[str, int]:
        """Text from byte ``offset`` of the pod's log stream, and the offset after it.

        Offsets run across rotations; text older than the kept segments is gone,
        and reading restarts at the oldest kept byte.
        """
        d = str(self._log_dir(job_id, rank))
        segs = segments(d)
        if not segs:
            return "", offset
        offset = max(offset, segs[0])
        out, pos = bytearray(), offset
        for i, start in enumerate(segs):
            end = segs[i + 1] if i + 1 < len(segs) else None
            if end is not None and pos >= end:
                continue
            try:
                with open(seg_path(d, start), "rb") as f:
                    f.seek(pos - start)
                    data = f.read(limit - len(out))
            except FileNotFoundError:
                continue   # rotated away under us
            out += data
            pos += len(data)
            if len(out) >= limit or (end is not None and pos < end):
                break
        return bytes(out).decode(errors="replace"), pos

    def log_size(self, job_id: str, rank: int = 0) -> int:
        d = str(self._log_dir(job_id, rank))
        segs = segments(d)
        return segs[-1] + os.path.getsize(seg_path(d, segs[-1])) if segs else 0

    def tail(self, job_id: str, rank: int = 0, nbytes: int = LOG_TAIL_BYTES) -> str:
        end = self.log_size(job_id, rank)
        return self.logs(job_id, rank, max(0, end - nbytes))[0]
