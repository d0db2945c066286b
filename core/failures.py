"""Why a job ended, and whether to run it again.

The Philly study (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU
Clusters for DNN Training Workloads", ATC '19, §4.2 and §5) found that most failures are user errors
(syntax, imports, bad inputs) that fail again at once if retried, while
infrastructure faults (MPI/NCCL transport, storage, GPU driver) are worth a
retry after a pause. Its guideline: classify from the job's exit status and
the tail of its log, and adapt the retries to the class.

Everything is in two tables below: ``RULES`` (first match wins) and
``RETRY`` (per class: how many retries, and the back-off). Both are data, so
that a reader can see every rule in one place and a test can walk them.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class FailureClass(str, enum.Enum):
    SUCCESS = "success"
    USER = "user_error"               # the program or its inputs are wrong: fails again if retried
    OOM = "out_of_memory"             # host or GPU memory: the job asks too much for its batch size
    INFRA = "infrastructure"          # network, storage, driver, node: transient, retry with back-off
    PREEMPTED = "preempted"           # stopped by a scheduler (ours or another): requeue, not a failure
    LOST = "lost"                     # killed from outside with no message (node gone, SIGKILL)
    CANCELLED = "cancelled"           # a user asked for it
    UNKNOWN = "unknown"               # kept for stored records; classify() no longer returns it
    TIMEOUT = "timeout"               # stopped at its time limit (--time-limit)
    DEPENDENCY = "dependency"         # never started: a job it runs --after failed or was cancelled


@dataclass(frozen=True)
class Rule:
    name: str
    cls: FailureClass
    exit_codes: frozenset[int] | None = None   # None = any non-zero code
    pattern: str | None = None            # regex searched in the log tail (case-insensitive)


def _codes(*c: int) -> frozenset[int]:
    return frozenset(c)


# First match wins. Log signatures are checked before bare exit codes because
# a signature is closer to the root cause (the Philly study, ATC '19, §4.2.1: "signatures closer to
# the root cause" first, implicit ones such as a bare traceback last).
RULES: tuple[Rule, ...] = (
    Rule("gpu-oom", FailureClass.OOM,
         pattern=r"CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|OutOfMemoryError|RESOURCE_EXHAUSTED"),
    Rule("cpu-oom", FailureClass.OOM,
         pattern=r"\bMemoryError\b|std::bad_alloc|oom-kill|Out of memory: Killed process|Cannot allocate memory"),
    Rule("mpi-nccl", FailureClass.INFRA,
         pattern=r"NCCL (error|WARN)|MPI_ABORT|ORTE|mpirun noticed|Gloo.*(timeout|closed)"),
    Rule("network", FailureClass.INFRA,
         pattern=r"Connection (reset|refused|timed out)|Network is unreachable|Broken pipe|Transport endpoint"),
    Rule("storage", FailureClass.INFRA,
         pattern=r"Input/output error|Stale file handle|HDFS|No space left on device|Read-only file system"),
    Rule("gpu-driver", FailureClass.INFRA,
         pattern=r"\bXid\b|ECC error|CUDA driver version is insufficient|cudaErrorInitializationError"
                 r"|CUDA error: (unknown error|initialization error)|GPU is lost|NVML"),
    # a gang whose pods never all started (image pull, a node that never runs them): the
    # launcher tears it down and says so; nothing of the user's code ran
    Rule("pods-never-started", FailureClass.INFRA, pattern=r"\bPendingTimeout\b"),
    # the cluster refused the gang before any pod existed (its namespace missing, admission, quota):
    # nothing of the user's code ran; the admin's fix (or a retry) is what it needs
    Rule("launch-refused", FailureClass.INFRA, pattern=r"\bLaunchRefused\b"),
    Rule("checkpoint-io", FailureClass.INFRA, pattern=r"(checkpoint|ckpt).*(timeout|I/O|unavailable)"),
    Rule("syntax", FailureClass.USER, pattern=r"\b(SyntaxError|IndentationError|TabError)\b"),
    Rule("import", FailureClass.USER, pattern=r"\b(ImportError|ModuleNotFoundError)\b"),
    Rule("inputs", FailureClass.USER, pattern=r"\b(FileNotFoundError|IsADirectoryError|No such file or directory)\b"),
    Rule("permission", FailureClass.USER, pattern=r"\bPermissionError\b|Permission denied"),
    Rule("semantic", FailureClass.USER,
         pattern=r"\b(NameError|TypeError|ValueError|KeyError|AttributeError|IndexError|AssertionError"
                 r"|ZeroDivisionError|RuntimeError: (shape|size) mismatch)\b"),
    Rule("invalid-memory", FailureClass.USER, pattern=r"Segmentation fault|illegal memory access|core dumped"),
    Rule("diverged", FailureClass.USER, pattern=r"\b(NaN|nan) loss|loss is nan|Model diverged"),
    Rule("sigterm", FailureClass.PREEMPTED, exit_codes=_codes(143, -15), pattern=None),
    Rule("not-executable", FailureClass.USER, exit_codes=_codes(126, 127)),
    Rule("usage", FailureClass.USER, exit_codes=_codes(2)),
    Rule("sigkill", FailureClass.LOST, exit_codes=_codes(137, -9)),
    Rule("segv", FailureClass.USER, exit_codes=_codes(139, -11)),
    Rule("traceback", FailureClass.USER, pattern=r"Traceback \(most recent call last\)"),
)

# the Philly study (ATC '19) §5: a non-zero exit with no infrastructure signature is the user's own
# (most failures are user errors; retrying them fails again at once).
NO_SIGNATURE = Rule("no-signature", FailureClass.USER)

_COMPILED = [(r, re.compile(r.pattern, re.IGNORECASE) if r.pattern else None) for r in RULES]


@dataclass(frozen=True)
class RetryRule:
    """How a class is retried: at most ``max_retries`` times, waiting
    ``base * factor**(n-1)`` seconds (capped at ``max_delay``) before retry n."""

    max_retries: int
    base: float = 0.0
    factor: float = 2.0
    max_delay: float = 3600.0
    counts: bool = True   # False: the run does not count against the cap (preemption)


# the Philly study (ATC '19) §5: "stop retrying for failure categories like incorrect data/model input
# and continue retrying for network timeouts". The Philly scheduler's back-off
# was 2 minutes (the Philly study, ATC '19, §2.2), which we take as the first delay. A request's own
# ``max_retries`` asks for retries of any failure class (user errors included).
RETRY: dict[FailureClass, RetryRule] = {
    FailureClass.SUCCESS: RetryRule(0),
    FailureClass.USER: RetryRule(0, base=10.0),            # only when the request asks (max_retries)
    FailureClass.OOM: RetryRule(0, base=10.0),             # deterministic for the same batch size
    FailureClass.INFRA: RetryRule(3, base=120.0, factor=2.0, max_delay=1800.0),
    FailureClass.LOST: RetryRule(3, base=120.0, factor=2.0, max_delay=1800.0),
    FailureClass.PREEMPTED: RetryRule(1 << 30, base=0.0, counts=False),
    FailureClass.CANCELLED: RetryRule(0),
    FailureClass.UNKNOWN: RetryRule(0, base=10.0),
    FailureClass.TIMEOUT: RetryRule(0, base=10.0),         # only when the request asks (max_retries)
    FailureClass.DEPENDENCY: RetryRule(0),
}


@dataclass(frozen=True)
class Classification:
    cls: FailureClass
    rule: str            # the rule's name ("exit-0", "no-signature" when nothing matched)

    def __str__(self) -> str:
        return f"{self.cls.value} ({self.rule})"


def classify(exit_code: int, log_tail: str = "") -> Classification:
    """Class of an exit: ``exit_code`` 0 is success whatever the log says."""
    if not isinstance(exit_code, int) or isinstance(exit_code, bool):
        raise TypeError(f"exit_code: must be an int, got {exit_code!r}")
    if exit_code == 0:
        return Classification(FailureClass.SUCCESS, "exit-0")
    tail = log_tail or ""
    for rule, rx in _COMPILED:
        if rule.exit_codes is not None and exit_code not in rule.exit_codes:
            continue
        if rx is not None and not rx.search(tail):
            continue
        return Classification(rule.cls, rule.name)
    return Classification(NO_SIGNATURE.cls, NO_SIGNATURE.name)


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay: float
    reason: str


def retry_decision(cls: FailureClass, failures_so_far: int, max_retries: int | None = None,
                   cap: int | None = None) -> RetryDecision:
    """Retry after the ``failures_so_far``-th counted failure (1 = the first)?

    ``max_retries`` (the request's own) replaces the class's count, for
    every class that can fail (a user who knows the error is flaky asks for
    retries); ``cap`` (the engine's) bounds both.
    """
    rule = RETRY[cls]
    if not rule.counts:
        return RetryDecision(True, rule.base, f"{cls.value}: requeued, not counted as a failure")
    limit = rule.max_retries
    if max_retries is not None and cls not in (FailureClass.SUCCESS, FailureClass.CANCELLED):
        limit = max_retries
    if cap is not None:
        limit = min(limit, cap)
    if limit <= 0:
        askable = cls in (FailureClass.USER, FailureClass.OOM, FailureClass.TIMEOUT) and max_retries is None
        why = "not retried" + (" (hived submit --retries N, max_retries in the request, asks for retries)"
                               if askable else "")
        return RetryDecision(False, 0.0, f"{cls.value}: {why}")
    if failures_so_far > limit:
        return RetryDecision(False, 0.0, f"{cls.value}: retry cap {limit} reached after {failures_so_far} failures")
    delay = min(rule.max_delay, rule.base * rule.factor ** max(0, failures_so_far - 1))
    return RetryDecision(True, delay, f"{cls.value}: retry {failures_so_far}/{limit} after {delay:.0f}s back-off")
