"""Runs one pod's command and keeps its log; executed as a script by LocalLauncher.

Why a wrapper process instead of starting the command directly:
- the log is rotated at a size limit, which needs a process reading the
  command's output (a plain file redirect cannot be rotated);
- the exit code is written to a file, so that a service restarted after a
  crash (no longer the parent, so it cannot ``wait()``) still learns how the
  pod ended;
- the wrapper is the one that knows every process of the pod: it puts the
  command in the pod's cgroup when there is one, and it is a child subreaper,
  so daemonised (``setsid`` double-forked) descendants are re-parented to it
  rather than to init. SIGTERM to the wrapper is passed on to every process of
  the pod, which then has its grace period (the wrapper waits for them all);
  SIGUSR1 kills them all; when the command ends on its own, whatever it left
  running is killed with it;
- when the service runs as root, the wrapper stays root (the job cannot signal
  or tamper with it) and the command runs under the job's account; the
  command's environment comes from the spec file, never the wrapper's own, so
  a job's ``LD_PRELOAD`` cannot reach a privileged process.

Usage: ``python pod_runner.py SPEC.json``; SPEC holds argv, env, workdir,
account, cgroup, log_dir, max_bytes, keep, pod_file, exit_file and a header
line. Standard library only, so it starts fast and does not depend on the
service's imports. ``python pod_runner.py --standby`` is a fork server: it
starts once, imports what a runner needs, and keeps one runner forked ahead
(in its own session) reading its standard input; that spare takes the next
SPEC path, answers its pid on the server's standard output and runs the pod,
while the server forks the next spare. When a runner ends, the server
answers ``x PID STATUS`` (its status as ``Popen.returncode`` gives it). A
job's runner is thus a fork of a ready interpreter, already waiting: no
interpreter start-up (about 25 ms of CPU) per pod, on the start path or
competing with it. An end of input (the launcher gone) ends the server; the
runners it forked go on.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

_hard_exit = os._exit   # ends a forked child at once: no atexit handlers, no flush of inherited buffers


def _atomic_write(path: str, obj: dict, durable: bool = True) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.replace(tmp, path)


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (guards against pid reuse)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except OSError:
        return None
    return int(data.rsplit(")", 1)[1].split()[19])


class SegmentLog:
    """A log split in segments named by the byte offset they start at.

    ``<dir>/000000000000.log``, ``<dir>/000000001024.log`` ... : the offset in
    the whole stream is ``start + position``, so readers can follow the log
    across rotations, and a new attempt appends to the same stream.
    """

    def __init__(self, directory: str, max_bytes: int, keep: int):
        self.dir, self.max_bytes, self.keep = directory, max(1, max_bytes), max(1, keep)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        segs = segments(directory)
        if segs:
            start = segs[-1]
            size = os.path.getsize(seg_path(directory, start))
            self.start, self.size = start, size
        else:
            self.start, self.size = 0, 0
        self.f = self._open(seg_path(directory, self.start))

    @staticmethod
    def _open(path: str):
        # The log folder is the service's own, never the job's: a job that could
        # plant a symlink here would have a root runner append to any file.
        return open(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600), "ab")

    def write(self, data: bytes) -> None:
        while data:
            if self.size >= self.max_bytes:
                self._rotate()
            room = self.max_bytes - self.size
            chunk, data = data[:room], data[room:]
            self.f.write(chunk)
            self.size += len(chunk)
        self.f.flush()

    def _rotate(self) -> None:
        self.f.close()
        self.start += self.size
        self.size = 0
        self.f = self._open(seg_path(self.dir, self.start))
        for old in segments(self.dir)[:-self.keep]:
            try:
                os.unlink(seg_path(self.dir, old))
            except FileNotFoundError:
                pass


def seg_path(directory: str, start: int) -> str:
    return os.path.join(directory, f"{start:012d}.log")


def segments(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) for every process on the host, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().decode(errors="replace").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue   # exited while we looked
        table[int(name)] = (int(fields[1]), fields[0])
    return table


def descendants(root: int, table: dict | None = None) -> list[int]:
    """Every process below ``root`` in the process tree, zombies included."""
    table = _proc_table() if table is None else table
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _state) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, todo = [], list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, ()))
    return out


def _become_subreaper() -> bool:
    """Orphans of the pod (``setsid`` double forks included) are re-parented to
    this process instead of init, so they stay in its tree and can be swept."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0   # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


class Pod:
    """The processes of one pod: its cgroup when it has one, else this process's subtree."""

    def __init__(self, cgroup: str | None, subreaper: bool):
        self.cgroup, self.subreaper = cgroup, subreaper
        self.me = os.getpid()
        self.command: int | None = None   # the command's pid: Popen reaps it, never we

    def _has_children(self) -> bool:
        """Any child left, running or not yet reaped? As a subreaper, none means
        the pod's whole process tree is gone: no need to scan /proc."""
        self.reap_orphans()
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return False
        return True

    def pids(self) -> list[int]:
        """Live (non-zombie) processes of the pod."""
        found: set[int] = set()
        if self.cgroup:
            try:
                with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
                    found = {int(x) for x in f.read().split()}
            except OSError:
                pass
        if self.subreaper and not self._has_children():
            return sorted(found)
        # a pod process that left the cgroup is still ours while it is below us
        table = _proc_table()
        found |= set(descendants(self.me, table))
        return [p for p in found if p in table and table[p][1] not in ("Z", "X")]

    def signal_all(self, sig: int) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_all(self, deadline: float = 5.0) -> None:
        """SIGKILL every process of the pod until none is left (forks racing the sweep included)."""
        if self.cgroup:
            try:
                with open(os.path.join(self.cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass   # kernel before 5.14: the loop below does it
        end = time.monotonic() + deadline
        while True:
            left = self.pids()
            if not left or time.monotonic() > end:
                return
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            self.reap_orphans()
            time.sleep(0.01)

    def reap_orphans(self) -> None:
        """Collect the exit status of adopted orphans. Not the command's: reaped
        behind Popen's back, its exit code would read as 0; orphans that end after
        it wait until Popen has it (the next call, at the latest the last one)."""
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == self.command:
                return
            try:
                os.waitpid(info.si_pid, 0)
            except ChildProcessError:
                pass


def _setup_cgroup(cg: dict) -> str | None:
    """Create the pod's cgroup and apply its limits; None when that is not possible."""
    path = cg["path"]
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    for name in ("memory.max", "cpu.max"):
        value = cg.get(name)
        if value is not None and os.path.exists(os.path.join(path, name)):
            try:
                with open(os.path.join(path, name), "w") as f:
                    f.write(str(value))
            except OSError:
                pass
    return path


def _limits(path: str | None) -> str:
    if not path:
        return "no cgroup (process-tree sweep)"
    out = []
    for name in ("memory.max", "cpu.max"):
        try:
            with open(os.path.join(path, name)) as f:
                out.append(f"{name}={f.read().strip()}")
        except OSError:
            pass
    return f"cgroup {path}" + (f" ({', '.join(out)})" if out else " (no limits available)")


def _enter(cgroup: str | None, account: dict | None, workdir: str | None):
    """Runs in the command's process between fork and exec: join the pod's cgroup
    while still privileged, drop to the job's account, then enter the workdir as
    that account (so a workdir the account cannot open is refused)."""
    def fail(what: str, exc: OSError) -> None:
        os.write(2, f"hived: cannot {what}: {exc.strerror or exc}\n".encode())
        _hard_exit(127)

    def enter() -> None:
        if cgroup:
            try:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write("0")
            except OSError as exc:
                fail(f"join cgroup {cgroup}", exc)
        if account:
            try:
                os.setgroups(account.get("groups") or [])
                os.setresgid(account["gid"], account["gid"], account["gid"])
                os.setresuid(account["uid"], account["uid"], account["uid"])
            except OSError as exc:
                fail(f"switch to uid {account['uid']}", exc)
        if workdir:
            try:
                os.chdir(workdir)
            except OSError as exc:
                fail(f"enter workdir {workdir!r}", exc)
    return enter


class _Flags:
    term = False
    kill = False
    child = True     # a child may have ended: look for orphans to reap


def main(spec_path: str, ready: tuple[str, str] | None = None) -> int:
    """Run the pod of ``spec_path``. ``ready``: (a cgroup this process already joined,
    the cgroup it came from): the pod's cgroup is that one, so the command is
    born in it instead of joining it (a migration costs the start path 2-20 ms)."""
    with open(spec_path) as f:
        spec = json.load(f)
    if spec.get("cgroup") and ready:
        cgroup: str | None = _setup_cgroup({**spec["cgroup"], "path": ready[0]})
    else:
        cgroup = _setup_cgroup(spec["cgroup"]) if spec.get("cgroup") else None
        if ready:
            _move_to(ready[1])
            _remove(ready[0])
            ready = None
    try:
        return _run(spec, cgroup, ready[1] if ready else None)
    finally:
        if cgroup:
            try:
                os.rmdir(cgroup)
            except OSError:
                pass   # still populated (we are being killed): the launcher removes it


def _move_to(cgroup: str) -> bool:
    try:
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write("0")
        return True
    except OSError:
        return False


def _remove(cgroup: str) -> None:
    try:
        os.rmdir(cgroup)
    except OSError:
        pass


def _own_cgroup() -> str | None:
    """This process's cgroup v2 folder, from /proc/self/cgroup and the mounts."""
    try:
        with open("/proc/self/cgroup") as f:
            rel = next(line[3:].strip() for line in f if line.startswith("0::"))
        with open("/proc/self/mounts") as f:
            mount = next(line.split()[1] for line in f if line.split()[2:3] == ["cgroup2"])
    except (OSError, StopIteration):
        return None
    return os.path.join(mount, rel.lstrip("/"))


def _run(spec: dict, cgroup: str | None, home: str | None = None) -> int:
    flags = _Flags()
    # SIGTERM from the launcher: pass it on to every process of the pod and wait
    # for them (the grace period); SIGUSR1: the grace is over, kill them all.
    # The command gets default dispositions again at exec.
    signal.signal(signal.SIGTERM, lambda *_: setattr(flags, "term", True))
    signal.signal(signal.SIGUSR1, lambda *_: setattr(flags, "kill", True))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, lambda *_: setattr(flags, "child", True))
    pod = Pod(cgroup, _become_subreaper())
    account = spec.get("account")
    # not fsynced: it serves a restarted service, and the pod does not outlive the machine
    _atomic_write(spec["pod_file"], {"pid": os.getpid(), "pgid": os.getpgid(0),
                                     "start_ticks": proc_start_ticks(os.getpid()),
                                     "rank": spec["rank"], "attempt": spec["attempt"], "cgroup": cgroup},
                  durable=False)
    log = SegmentLog(spec["log_dir"], spec["max_bytes"], spec["keep"])
    log.write(spec["header"].encode() + b"\n")
    log.write(f"[hived] {_limits(cgroup)}\n".encode())
    try:
        child = subprocess.Popen(spec["argv"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=spec.get("env"),
                                 preexec_fn=_enter(None if home else cgroup, account, spec.get("workdir")))
    except OSError as exc:
        # command missing: 127 is what a shell would say
        hint = ""
        if account and isinstance(exc, PermissionError):
            hint = (f" (the job runs as uid {account['uid']}: the program and every folder above it "
                    "must be open to that account)")
        if home:
            _move_to(home)
        log.write(f"hived: cannot start {spec['argv'][0]!r}: {exc}{hint}\n".encode())
        _atomic_write(spec["exit_file"], {"exit_code": 127, "ended": time.time()})
        return 127
    pod.command = child.pid
    if home and not _move_to(home):
        # still in the pod's cgroup: a kill of the cgroup would take this runner too
        log.write(f"[hived] the pod runner could not leave {cgroup}\n".encode())
    _pump(child, pod, flags, log)
    rc = child.wait()
    pod.reap_orphans()
    log.write(f"[hived] rank {spec['rank']} attempt {spec['attempt']} exited with code {rc}\n".encode())
    _atomic_write(spec["exit_file"], {"exit_code": rc, "ended": time.time()})
    return rc if rc >= 0 else 128 - rc


def _pump(child: subprocess.Popen, pod: Pod, flags: _Flags, log: SegmentLog) -> None:
    """Copy the command's output to the log and pass on the launcher's signals until every
    process of the pod is gone and what they wrote has been read."""
    assert child.stdout is not None   # started with stdout=PIPE
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ, "output")
    try:   # wakes the loop the moment the command ends (Linux 5.3+; else within 0.2 s)
        sel.register(os.pidfd_open(child.pid), selectors.EVENT_READ, "ended")
    except (AttributeError, OSError):
        pass
    eof, term_sent, swept, drain_until = False, False, False, None
    while True:
        for key, _ in sel.select(timeout=0.2):
            if key.data == "ended":
                sel.unregister(key.fd)
                os.close(key.fd)
                continue
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                eof = True
                sel.unregister(fd)
                continue
            log.write(data)
        if flags.kill:
            pod.kill_all()
            flags.kill = False
        if flags.term and not term_sent:
            term_sent = True
            pod.signal_all(signal.SIGTERM)
        if flags.child:
            flags.child = False
            pod.reap_orphans()
        if child.poll() is None:
            continue
        if not flags.term and not swept:
            # the command is done: whatever it left behind (daemons included) goes with it
            swept = True
            pod.kill_all()   # returns once none is left
        elif pod.pids():
            continue   # terminating: the grace period is the pod's until the launcher says kill
        if eof:
            break
        # every process is gone; what they wrote is in the pipe
        if drain_until is None:
            drain_until = time.monotonic() + 0.5
        elif time.monotonic() > drain_until:
            break


def _spare(server_fds: list[int], taken: int, base: str | None) -> None:
    """A runner forked ahead, in its own session: it takes the next SPEC path from
    the server's input, answers its pid, tells the server to fork the next spare,
    and runs the pod. Never returns."""
    rc = 1
    try:
        os.setsid()   # its own session and group: the launcher signals the group
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in server_fds:
            os.close(fd)
        ready = None
        home = _own_cgroup() if base else None
        if base and home:   # the pod's cgroup, joined ahead (see main)
            path = os.path.join(base, f"spare-{os.getpid()}")
            try:
                os.mkdir(path)
            except OSError:
                pass
            else:
                if _move_to(path):
                    ready = (path, home)
                else:
                    _remove(path)
        line = b""
        while not line.endswith(b"\n"):   # the launcher sends one path, then waits for the pid
            data = os.read(0, 1)
            if not data:
                os.write(taken, b"e")   # end of input: the server ends too
                if ready:
                    _move_to(ready[1])
                    _remove(ready[0])
                _hard_exit(0)
            line += data
        os.write(1, f"{os.getpid()} {ready[0] if ready else '-'}\n".encode())
        os.write(taken, b"t")
        os.close(taken)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):   # the server's pipes: a runner must not hold them open
            os.dup2(null, fd)
        os.close(null)
        rc = main(line.decode().strip(), ready)
    finally:
        _hard_exit(rc & 0xFF)


def _reap(out: int) -> None:
    """Report every runner that ended: ``x PID STATUS``."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        os.write(out, f"x {pid} {os.waitstatus_to_exitcode(status)}\n".encode())


def standby(base: str | None = None) -> int:
    """The fork server (see the module docstring)."""
    import ctypes  # noqa: F401  (what _become_subreaper needs, imported before any fork)
    wake_r, wake_w = os.pipe()
    taken_r, taken_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # wakes the select through the wakeup fd
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sel = selectors.DefaultSelector()
    sel.register(wake_r, selectors.EVENT_READ, "child")
    sel.register(taken_r, selectors.EVENT_READ, "taken")
    spare = True   # fork one now
    while True:
        if spare:
            spare = False
            if os.fork() == 0:
                _spare([wake_r, wake_w, taken_r, sel.fileno()], taken_w, base)
        for key, _ in sel.select():
            data = os.read(key.fd, 4096) if key.data == "taken" else b""
            if key.data == "child":
                try:
                    os.read(wake_r, 4096)
                except BlockingIOError:
                    pass
            if b"e" in data:
                _reap(1)
                return 0
            if b"t" in data:
                spare = True
        _reap(1)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--standby"]:
        sys.exit(standby(sys.argv[2] if len(sys.argv) > 2 else None))
    sys.exit(main(sys.argv[1]))
