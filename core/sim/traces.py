"""Trace readers: the Philly trace, our own CSV format, and the job model they share.

A trace is a list of ``TraceJob`` sorted by submit time (seconds from the
trace's first submission), plus the tenants in it.

**Philly** (``PHILLY_DIR``: shipped in the package, ``data/philly/``; columns
``timestamp,duration,num_gpus,gpu_time,cluster``): the VC (``cluster``) is
the tenant. A job of g <= 8 GPUs is one pod of g GPUs (it must sit on one
node: hard affinity, as HiveD (OSDI '20) §5.1 says most jobs ask); a larger job is a gang
of 8-GPU pods (or 4-GPU pods when g is not a multiple of 8: 12 -> 3x4).
VCs with fewer than ``min_jobs`` jobs (four VCs with 3-8 jobs) are dropped,
since a quota from their GPU-hour share would round to nothing.

**Our CSV** (header required; extra columns ignored; a UTF-8 byte-order mark is fine)::

    job_id,tenant,submit,duration,gpus[,pods,job_class|class,affinity,grace_period|grace,cpus,memory_gb,time_limit]

``submit`` is seconds (any origin; shifted so the first job is at 0) or an
ISO date-time, one or the other for the whole file; ``duration`` is seconds;
``gpus`` is the job's total, possibly fractional (0.5 over 1 pod) or 0 (a
CPU-only job, which the replay refuses and counts: HiveD places GPU cells);
``pods`` (default: as for Philly) must divide a whole ``gpus``; a fractional
share per pod is rounded up to whole GPUs (``gpus_asked`` keeps what was
written); ``job_class`` te|be|opportunistic (default te); ``affinity``
hard|soft (default hard); ``cpus`` and ``memory_gb`` per pod (default: the
node's share for its GPUs); ``time_limit`` seconds each run may take (empty
or absent: none; 1 s to a year), after which the job ends as ``timeout`` and
backfill counts it as an upper bound of the job's end. Limits: durations, grace periods and the span of
submit times at most 10 years, a job at most 4096 pods and 32,768 GPUs.
A soft-affinity job of n > 1 GPUs becomes n one-GPU pods that want one cell
holding all n and relax (engine's soft affinity) when they cannot get it.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import gzip
import math
import os
from collections import Counter
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from importlib.resources import files

# Package data (see its README for the CC-BY-4.0 attribution); a plain folder
# for an installed or editable hived, so callers may join paths onto it.
PHILLY_DIR = str(files("hived.core.sim") / "data" / "philly")

YEAR = 365 * 86400.0
MAX_SECONDS = 10 * YEAR        # a duration, a grace period, or the span of submit times
MAX_EPOCH = 1e11               # a submit time in seconds (Unix time reaches 1e10 in 2286)
MAX_PODS = 4096                # pods of one job (the engine's limit per pod group)
MAX_JOB_GPUS = 8 * MAX_PODS    # GPUs of one job
MAX_TIME_LIMIT = YEAR          # a job's time limit, as the service's submit payload allows (1 s .. a year)


class TraceError(ValueError):
    """A bad trace line: ``str(e) == f"{where}: {problem}"``."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass
class TraceJob:
    job_id: str
    tenant: str
    submit: float
    duration: float
    gpus: int
    pods: int = 1
    job_class: str = "te"
    affinity: str = "hard"
    grace_period: float = 0.0
    cpus: float | None = None        # per pod; None: the node's share for its GPUs
    memory_gb: float | None = None   # per pod
    gpus_asked: float | None = None  # a fractional request as written (gpus: rounded up per pod)
    time_limit: float | None = None  # seconds each run may take (then it ends as "timeout"); None: no limit

    @property
    def pod_sizes(self) -> list[int]:
        """GPUs of each pod, summing to ``gpus`` exactly (never fewer GPUs than asked).

        Equal pods when ``pods`` divides ``gpus``; otherwise pods of
        ceil(gpus / pods) GPUs and one smaller remainder pod (10 over 3 pods:
        4, 4, 2), the split that keeps each pod in the smallest cell holding it.
        """
        g, p = self.gpus, self.pods
        if g == 0:
            return [0] * p
        if g % p == 0:
            return [g // p] * p
        s = -(-g // p)
        sizes = [s] * (g // s) + ([g % s] if g % s else [])
        if len(sizes) != p:   # no such split: sizes differing by one GPU, still summing to g
            sizes = [g // p + (1 if k < g % p else 0) for k in range(p)]
        return sizes

    @property
    def gpus_per_pod(self) -> int:
        """The largest pod's GPUs (what decides the cell level a job needs)."""
        return max(self.pod_sizes) if self.pods else 0

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.duration


@dataclass
class Trace:
    jobs: list[TraceJob]
    source: str = ""
    warnings: list[str] = field(default_factory=list)   # what was read but not used, for people

    @property
    def tenants(self) -> list[str]:
        return sorted({j.tenant for j in self.jobs})

    @property
    def span(self) -> float:
        if not self.jobs:
            return 0.0
        return max(j.submit for j in self.jobs) - min(j.submit for j in self.jobs)

    def gpu_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for j in self.jobs:
            out[j.tenant] = out.get(j.tenant, 0) + j.gpu_seconds
        return out

    def head(self, n: int | None) -> Trace:
        return self if n is None else Trace(self.jobs[:n], self.source, list(self.warnings))

    def only(self, tenants: Iterable[str]) -> Trace:
        """The jobs of these tenants (each must appear in the trace)."""
        want = list(tenants)
        unknown = sorted(set(want) - set(self.tenants))
        if unknown:
            raise ValueError(f"tenants: {unknown} not in the trace (tenants: {', '.join(self.tenants)})")
        keep = set(want)
        return Trace([j for j in self.jobs if j.tenant in keep], f"{self.source} tenants {','.join(want)}",
                     list(self.warnings))

    def window(self, from_day: float = 0.0, days: float | None = None) -> Trace:
        """Jobs submitted in [from_day, from_day + days) (days of 86,400 s), shifted to start at 0."""
        if from_day < 0 or (days is not None and days <= 0):
            raise ValueError(f"window: from_day must be >= 0 and days > 0, got {from_day}, {days}")
        lo = from_day * 86400.0
        hi = float("inf") if days is None else lo + days * 86400.0
        jobs = [dataclasses.replace(j, submit=j.submit - lo) for j in self.jobs if lo <= j.submit < hi]
        return Trace(jobs, f"{self.source} days {from_day:g}..{'' if days is None else f'{from_day + days:g}'}",
                     list(self.warnings))


def default_pods(gpus: int) -> int:
    """Pods of a job of ``gpus`` GPUs: one up to a node, else 8-GPU pods, else
    4-GPU pods plus one remainder pod (``TraceJob.pod_sizes``: 10 -> 4, 4, 2)."""
    if gpus <= 8:
        return 1
    return gpus // 8 if gpus % 8 == 0 else math.ceil(gpus / 4)


def _lines(path: str) -> Generator[str, None, None]:
    """The file's lines decoded one by one, so that bytes that are not UTF-8 are refused
    with the file and line that hold them (a byte-order mark on the first line is dropped)."""
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        for n, raw in enumerate(f, start=1):
            try:
                yield raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise TraceError(f"{path}:{n}", f"not UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1}; "
                                 "save the trace as UTF-8") from None


def _time(value: str, where: str) -> tuple[float, str]:
    """(seconds, "seconds" | "ISO") of a submit time."""
    v = (value or "").strip()
    try:
        t = float(v)
    except ValueError:
        pass
    else:
        if not math.isfinite(t) or abs(t) > MAX_EPOCH:
            raise TraceError(where, f"{value!r} is out of range (at most {MAX_EPOCH:g} s)")
        return t, "seconds"
    try:
        return datetime.fromisoformat(v).timestamp(), "ISO"
    except ValueError:
        raise TraceError(where, f"submit/timestamp {value!r} is neither seconds nor an ISO date-time") from None


def _finish(jobs: list[TraceJob], source: str, limit: int | None) -> Trace:
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    if jobs:
        t0 = jobs[0].submit
        for j in jobs:
            j.submit -= t0
        if jobs[-1].submit > MAX_SECONDS:
            last = jobs[-1]
            raise TraceError(source, f"submit times span {last.submit:.0f} s (job {last.job_id}); "
                             f"at most {MAX_SECONDS:.0f} s ({MAX_SECONDS / YEAR:g} years)")
    if limit is not None:
        jobs = jobs[:limit]
    return Trace(jobs, source)


def read_philly(path: str, *, limit: int | None = None, min_jobs: int = 10) -> Trace:
    """Read the Philly jobs CSV (``path`` = the .csv.gz or its folder)."""
    if os.path.isdir(path):
        path = os.path.join(path, "philly_jobs.csv.gz")
    if not os.path.isfile(path):
        raise TraceError(path, "file not found")
    jobs = []
    with contextlib.closing(_lines(path)) as f:
        reader = csv.DictReader(f)
        need = {"timestamp", "duration", "num_gpus", "cluster"}
        missing = need - set(reader.fieldnames or [])
        if missing:
            raise TraceError(f"{path}:1", f"missing columns {sorted(missing)}")
        for n, row in enumerate(reader, start=2):
            where = f"{path}:{n}"
            try:
                gpus = int(row["num_gpus"])
                dur = float(row["duration"])
            except (TypeError, ValueError):
                got = f"{row.get('num_gpus')!r}/{row.get('duration')!r}"
                raise TraceError(where, f"bad num_gpus/duration {got}") from None
            if gpus < 1 or dur < 0 or not math.isfinite(dur):
                raise TraceError(where, f"num_gpus must be >= 1 and duration >= 0, got {gpus}, {dur}")
            if gpus > MAX_JOB_GPUS or dur > MAX_SECONDS:
                raise TraceError(where, f"num_gpus at most {MAX_JOB_GPUS} and duration at most {MAX_SECONDS:.0f} s, "
                                 f"got {gpus}, {dur:g}")
            jobs.append(TraceJob(f"p{n - 1}", row["cluster"], _time(row["timestamp"], where)[0], dur, gpus,
                                 default_pods(gpus)))
    counts = Counter(j.tenant for j in jobs)
    jobs = [j for j in jobs if counts[j.tenant] >= min_jobs]
    return _finish(jobs, path, limit)


def read_csv(path: str, *, limit: int | None = None) -> Trace:
    """Read a trace in our CSV format (see the module doc)."""
    if not os.path.isfile(path):
        raise TraceError(path, "file not found")
    with contextlib.closing(_lines(path)) as f:
        return parse_csv(f, path, limit=limit)


def _number(row: dict[str, str | None], col: str, where: str, *, default: float | None = None, lo: float = 0.0,
            hi: float = math.inf) -> float:
    txt = (row.get(col) or "").strip()
    if not txt:
        if default is None:
            raise TraceError(f"{where}: {col}", "empty")
        return default
    try:
        v = float(txt)
    except ValueError:
        raise TraceError(f"{where}: {col}", f"not a number: {txt!r}") from None
    if not math.isfinite(v) or v < lo:
        raise TraceError(f"{where}: {col}", f"must be a finite number >= {lo:g}, got {txt}")
    if v > hi:
        raise TraceError(f"{where}: {col}", f"at most {hi:g}, got {txt}")
    return v


def _column(row: dict[str, str | None], *names: str) -> str:
    for n in names:
        v = row.get(n)
        if v is not None and v.strip():
            return v.strip()
    return ""


def parse_csv(lines: Iterable[str], source: str = "<csv>", *, limit: int | None = None) -> Trace:
    reader = csv.DictReader(lines)
    if reader.fieldnames:  # a UTF-8 byte-order mark read as text (files opened without utf-8-sig)
        reader.fieldnames = [reader.fieldnames[0].lstrip("\ufeff")] + list(reader.fieldnames[1:])
    need = {"job_id", "tenant", "submit", "duration", "gpus"}
    missing = need - set(reader.fieldnames or [])
    if missing:
        raise TraceError(f"{source}:1", f"missing columns {sorted(missing)} (need {', '.join(sorted(need))})")
    jobs, seen = [], set()
    kind = None   # "seconds" or "ISO": one trace uses one of them
    extra: list[str] = []   # lines with fields past the header's columns
    for row in reader:
        where = f"{source}:{reader.line_num}"
        if None in row:     # DictReader keeps fields past the header under the key None
            extra.append(f"{source}:{reader.line_num}")
        jid = (row["job_id"] or "").strip()
        if not jid:
            raise TraceError(f"{where}: job_id", "empty")
        if jid in seen:
            raise TraceError(f"{where}: job_id", f"duplicate {jid!r}")
        seen.add(jid)
        tenant = (row["tenant"] or "").strip()
        if not tenant:
            raise TraceError(f"{where}: tenant", "empty")
        dur = _number(row, "duration", where, hi=MAX_SECONDS)
        asked = _number(row, "gpus", where, hi=MAX_JOB_GPUS)
        cls = (_column(row, "job_class", "class") or "te").lower()
        if cls not in ("te", "be", "opportunistic"):
            col = "job_class" if _column(row, "job_class") else "class"
            raise TraceError(f"{where}: {col}", f"must be te, be or opportunistic, got {cls!r}")
        aff = (row.get("affinity") or "hard").strip().lower()
        if aff not in ("hard", "soft"):
            raise TraceError(f"{where}: affinity", f"must be hard or soft, got {aff!r}")
        pods_txt = (row.get("pods") or "").strip()
        whole = asked == int(asked)
        if pods_txt:
            try:
                pods = int(pods_txt)
            except ValueError:
                raise TraceError(f"{where}: pods", f"not an integer: {pods_txt!r}") from None
            if not 1 <= pods <= MAX_PODS:
                raise TraceError(f"{where}: pods", f"must be in 1..{MAX_PODS}, got {pods}")
            if whole and asked > 0 and int(asked) % pods:
                raise TraceError(f"{where}: pods", f"must divide gpus={int(asked)}, got {pods} "
                                 "(or give fractional GPUs per pod as a fractional total)")
        elif not whole or asked == 0:
            pods = 1
        else:
            pods = int(asked) if (aff == "soft" and asked > 1) else default_pods(int(asked))
        if whole:
            gpus = int(asked)
        else:   # fractional GPUs per pod: HiveD binds whole GPUs, so each pod gets the next whole number
            gpus = pods * math.ceil(asked / pods)
        grace = _number(row, "grace_period" if _column(row, "grace_period") else "grace", where,
                        default=0.0, hi=MAX_SECONDS)
        cpus = _number(row, "cpus", where, default=-1.0, lo=0.0) if _column(row, "cpus") else None
        mem = _number(row, "memory_gb", where, default=-1.0, lo=0.0) if _column(row, "memory_gb") else None
        t_limit = _number(row, "time_limit", where, lo=1.0, hi=MAX_TIME_LIMIT) if _column(row, "time_limit") else None
        submit, k = _time(row["submit"], f"{where}: submit")
        if kind is None:
            kind = k
        elif k != kind:
            raise TraceError(f"{where}: submit", f"{row['submit'].strip()!r} is {'an ' if k == 'ISO' else ''}{k}, "
                             f"but earlier lines give {'ISO date-times' if kind == 'ISO' else 'seconds'}; "
                             "use one of them for the whole trace")
        jobs.append(TraceJob(jid, tenant, submit, dur, gpus, pods, cls, aff, grace, cpus, mem,
                             asked if not whole else None, t_limit))
    trace = _finish(jobs, source, limit)
    if extra:
        trace.warnings.append(f"{extra[0]}: fields past the header's {len(reader.fieldnames or [])} columns are "
                              f"ignored ({len(extra)} line{'s' if len(extra) > 1 else ''}"
                              + (f", also {', '.join(e.rsplit(':', 1)[1] for e in extra[1:4])}"
                                 f"{' ...' if len(extra) > 4 else ''}" if len(extra) > 1 else "") + ")")
    return trace


def write_csv(trace: Trace, path: str) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["job_id", "tenant", "submit", "duration", "gpus", "pods", "job_class", "affinity", "grace_period",
                    "cpus", "memory_gb", "time_limit"])

        def opt(v: float | None) -> float | str:
            return "" if v is None else v

        for j in trace.jobs:
            w.writerow([j.job_id, j.tenant, f"{j.submit:.3f}", f"{j.duration:.3f}",
                        j.gpus if j.gpus_asked is None else j.gpus_asked, j.pods,
                        j.job_class, j.affinity, j.grace_period, opt(j.cpus), opt(j.memory_gb), opt(j.time_limit)])


def soften(trace: Trace, share: float, seed: int = 0) -> Trace:
    """Copy with ``share`` of the multi-GPU jobs turned soft (HiveD, OSDI '20, Figure 9):
    each becomes one-GPU pods that want one cell and relax when they cannot have it."""
    import random
    rng = random.Random(seed)
    out = []
    for j in trace.jobs:
        if j.gpus > 1 and j.gpus <= 8 and rng.random() < share:
            out.append(TraceJob(j.job_id, j.tenant, j.submit, j.duration, j.gpus, j.gpus, j.job_class, "soft",
                                j.grace_period, time_limit=j.time_limit))
        else:
            out.append(j)
    return Trace(out, trace.source)
