"""Runs one pod's command and keeps its log; executed as a script by LocalLauncher.

Why a wrapper process instead of starting the command directly:
- the log is rotated at a size limit, which needs a process reading the
  command's output (a plain file redirect cannot be rotated);
- the exit code is written to a file, so that a service restarted after a
  crash (no longer the parent, so it cannot ``wait()``) still learns how the
  pod ended;
- the wrapper is the leader of the pod's process group, so SIGTERM/SIGKILL to
  the group reaches the command and everything it started.

Usage: ``python pod_runner.py SPEC.json``; SPEC holds argv, log_dir, max_bytes,
keep, pod_file, exit_file and a header line. Standard library only, so it
starts fast and does not depend on the service's imports.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time


def _atomic_write(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
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
        os.makedirs(directory, exist_ok=True)
        segs = segments(directory)
        if segs:
            start = segs[-1]
            size = os.path.getsize(seg_path(directory, start))
            self.start, self.size = start, size
        else:
            self.start, self.size = 0, 0
        self.f = open(seg_path(directory, self.start), "ab")

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
        self.f = open(seg_path(self.dir, self.start), "ab")
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


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)
    # Our own group: the launcher signals the whole group. The command gets
    # the default SIGTERM action (handlers, unlike SIG_IGN, reset on exec);
    # the wrapper itself keeps running to drain the output and record the exit.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGINT, lambda *_: None)
    _atomic_write(spec["pod_file"], {"pid": os.getpid(), "pgid": os.getpgid(0),
                                     "start_ticks": proc_start_ticks(os.getpid()),
                                     "rank": spec["rank"], "attempt": spec["attempt"]})
    log = SegmentLog(spec["log_dir"], spec["max_bytes"], spec["keep"])
    log.write(spec["header"].encode() + b"\n")
    try:
        child = subprocess.Popen(spec["argv"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, cwd=spec.get("workdir"))
    except OSError as exc:
        # command or working directory missing: 127 is what a shell would say
        log.write(f"hived: cannot start {spec['argv'][0]!r}: {exc}\n".encode())
        _atomic_write(spec["exit_file"], {"exit_code": 127, "ended": time.time()})
        return 127
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    eof, drain_until = False, None
    while not eof:
        for _key, _ in sel.select(timeout=0.2):
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                eof = True   # everything the command wrote is in
                break
            log.write(data)
        if not eof and child.poll() is not None:
            # grandchildren may keep the pipe open: drain briefly, not forever
            if drain_until is None:
                drain_until = time.monotonic() + 0.5
            elif time.monotonic() > drain_until:
                break
    rc = child.wait()
    log.write(f"[hived] rank {spec['rank']} attempt {spec['attempt']} exited with code {rc}\n".encode())
    _atomic_write(spec["exit_file"], {"exit_code": rc, "ended": time.time()})
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
