"""Run-time estimates for jobs, each saying where it came from and how sure it is.

Four sources (sample runs as in AlloX, EuroSys '20, §4.1):

- ``sample``: short sample runs of the job (AlloX runs about 3% of the
  iterations). Run time is fitted as ``a + b * steps`` over the samples
  (``a`` = start-up cost, ``b`` = time per step) and extrapolated to the
  job's total steps; memory is the samples' peak.
- ``history``: finished runs of jobs with the same *signature* (project,
  entry point, the parameters that matter); the median of their run times.
  Where history lives is pluggable (``HistorySource``): the MLflow plugin
  reads its tracking store, tests use ``InMemoryHistory``.
- ``hint``: the user's own guess (``JobRequest.estimate``), trusted least.
- ``progress``: while a job runs and reports steps done of total, the
  elapsed time scaled up to the total, blended with the estimate it had.
- ``oracle``: the simulator's true duration (experiments only), and
  ``default``: nothing is known, a configured guess; both say so.

Confidence is a number in (0, 1]: a heuristic score, not a probability; the
rules are in each function and docs/estimator.md. Times are seconds on
whatever clock the caller uses; nothing here reads a clock.
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from .jobs import STARTED, state_values

if TYPE_CHECKING:
    from .engine_records import JobRecord

SOURCES = ("sample", "history", "hint", "progress", "oracle", "default")
HINT_CONFIDENCE = 0.3
DEFAULT_CONFIDENCE = 0.05
MAX_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Estimate:
    value: float                      # seconds of run time on ``kind`` (whole job, not what is left)
    source: str                       # one of SOURCES
    confidence: float                 # (0, 1]
    kind: str = "gpu"                 # the configuration / device kind it is for
    memory_gb: float | None = None
    detail: str = ""                  # how it was made, for people

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"Estimate.source: must be one of {', '.join(SOURCES)}, got {self.source!r}")
        _positive("Estimate.value", self.value)
        if not 0 < self.confidence <= 1:
            raise ValueError(f"Estimate.confidence: must be in (0, 1], got {self.confidence!r}")

    def to_dict(self) -> dict[str, float | str | None]:
        return {"value": self.value, "source": self.source, "confidence": self.confidence,
                "kind": self.kind, "memory_gb": self.memory_gb, "detail": self.detail}


@dataclass(frozen=True)
class Sample:
    """One short sample run: ``steps`` iterations took ``seconds``."""

    steps: float
    seconds: float
    peak_memory_gb: float | None = None


def _positive(what: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or math.isnan(x) or math.isinf(x) or x <= 0:
        raise ValueError(f"{what}: must be a finite number > 0, got {x!r}")
    return float(x)


def _clamp(c: float) -> float:
    return max(0.01, min(MAX_CONFIDENCE, c))


def from_samples(samples: Sequence[Sample], total_steps: float, kind: str = "gpu") -> Estimate:
    """Linear extrapolation of sample runs to ``total_steps``.

    Confidence: 0.6 from one sample, 0.85 from two or more, times
    (1 - relative fit residual): samples that do not lie on a line say the
    job is not as regular as the model assumes.
    """
    total = _positive("total_steps", total_steps)
    if not samples:
        raise ValueError("samples: need at least one sample run")
    for n, s in enumerate(samples):
        _positive(f"samples[{n}].steps", s.steps)
        _positive(f"samples[{n}].seconds", s.seconds)
        if s.steps > total:
            raise ValueError(f"samples[{n}].steps: {s.steps} is more than total_steps {total}")
        if s.peak_memory_gb is not None and not s.peak_memory_gb >= 0:
            raise ValueError(f"samples[{n}].peak_memory_gb: must be >= 0, got {s.peak_memory_gb!r}")
    xs = [float(s.steps) for s in samples]
    ys = [float(s.seconds) for s in samples]
    a, b = 0.0, sum(ys) / sum(xs)            # one sample (or all at one size): proportional
    if len(set(xs)) >= 2:
        mx, my = statistics.fmean(xs), statistics.fmean(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        b_fit = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        if b_fit > 0:                        # a per-step time <= 0 is noise: keep proportional
            a, b = max(0.0, my - b_fit * mx), b_fit
    resid = math.sqrt(statistics.fmean([(y - (a + b * x)) ** 2 for x, y in zip(xs, ys)])) / statistics.fmean(ys)
    base = 0.6 if len(samples) == 1 else 0.85
    peaks = [s.peak_memory_gb for s in samples if s.peak_memory_gb is not None]
    return Estimate(a + b * total, "sample", _clamp(base * (1 - min(resid, 0.9))), kind,
                    max(peaks) if peaks else None,
                    f"{len(samples)} sample run(s) up to {max(xs):g} of {total:g} steps; "
                    f"{b:.4g} s/step + {a:.3g} s start-up")


def from_history(durations: Sequence[float], kind: str = "gpu", signature: str = "") -> Estimate:
    """Median of past run times of the same signature.

    Confidence grows with the number of runs, n / (n + 2), and falls with
    their spread (coefficient of variation).
    """
    if not durations:
        raise ValueError(f"history{' of ' + signature if signature else ''}: no finished runs to estimate from")
    ds = [_positive(f"history[{n}]", d) for n, d in enumerate(durations)]
    med = statistics.median(ds)
    cv = statistics.pstdev(ds) / statistics.fmean(ds)
    conf = len(ds) / (len(ds) + 2) * (1 - min(cv, 0.9))
    return Estimate(med, "history", _clamp(conf), kind, None,
                    f"median of {len(ds)} finished run(s)" + (f" of {signature}" if signature else ""))


def from_hint(seconds: float, kind: str = "gpu") -> Estimate:
    return Estimate(_positive("hint", seconds), "hint", HINT_CONFIDENCE, kind, None, "the user's estimate")


def refine(prior: Estimate | None, done: float, total: float, elapsed: float) -> Estimate:
    """A running job reported ``done`` of ``total`` steps after ``elapsed`` seconds.

    Progress alone says elapsed * total / done with confidence
    0.5 + 0.45 * done / total; it is averaged with the prior estimate,
    weighted by the prior's confidence times the share of steps still to
    do (the further the job is, the less a guess made before it started
    matters) and by its own confidence, so an early noisy report moves a
    confident prior only a little. Never less than ``elapsed``.
    """
    tot = _positive("total", total)
    if isinstance(done, bool) or not isinstance(done, (int, float)) or not 0 <= done <= tot:
        raise ValueError(f"done: must be between 0 and total ({tot:g}), got {done!r}")
    if not isinstance(elapsed, (int, float)) or not elapsed >= 0:
        raise ValueError(f"elapsed: must be >= 0, got {elapsed!r}")
    kind = prior.kind if prior else "gpu"
    mem = prior.memory_gb if prior else None
    if done == 0 or elapsed == 0:
        if prior is None:
            raise ValueError("done/elapsed: no progress yet and no prior estimate to refine")
        return replace(prior, value=max(prior.value, elapsed) if elapsed else prior.value)
    frac = done / tot
    own, conf = elapsed / frac, 0.5 + 0.45 * frac
    if prior is not None and frac < 1:
        w = prior.confidence * (1 - frac)
        value = (w * prior.value + conf * own) / (w + conf)
        conf = max(conf, prior.confidence)
    else:
        value = own
    return Estimate(max(value, elapsed), "progress", _clamp(conf), kind, mem,
                    f"{done:g}/{tot:g} steps after {elapsed:.4g} s")


def signature(project: str, entry_point: str = "main", params: Mapping[str, object] | None = None,
              relevant: Iterable[str] | None = None) -> str:
    """A stable key for "the same job": project, entry point and the parameters that matter.

    ``relevant`` names the parameters that change the run time (epochs,
    batch size, model); None keeps them all. Values are compared as strings
    (the MLflow CLI hands every parameter over as a string).
    """
    if not project:
        raise ValueError("signature: project must not be empty")
    params = dict(params or {})
    if relevant is not None:
        keep = set(relevant)
        params = {k: v for k, v in params.items() if k in keep}
    blob = json.dumps([project, entry_point, sorted((str(k), str(v)) for k, v in params.items())])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class HistorySource(Protocol):
    """Where finished runs come from (MLflow, the service's store, a test list)."""

    def durations(self, signature: str, kind: str) -> Sequence[float]: ...


class InMemoryHistory:
    def __init__(self) -> None:
        self._runs: dict[tuple[str, str], list[float]] = {}

    def add(self, signature: str, kind: str, seconds: float) -> None:
        self._runs.setdefault((signature, kind), []).append(_positive("seconds", seconds))

    def durations(self, signature: str, kind: str) -> Sequence[float]:
        return list(self._runs.get((signature, kind), ()))


# which source wins a tie in confidence (measured beats remembered beats guessed)
_RANK = {"oracle": 0, "progress": 1, "sample": 2, "history": 3, "hint": 4, "default": 5}


def record_elapsed(rec: JobRecord, now: float | None) -> float:
    """Seconds a job record has run: earlier runs (``run_time``) plus the current one."""
    el = float(getattr(rec, "run_time", 0.0) or 0.0)
    started = getattr(rec, "started", None)
    state = getattr(getattr(rec, "state", None), "value", None)
    if now is not None and started is not None and state in state_values(STARTED):
        el += max(0.0, now - started)
    return el


class Estimator:
    """Picks the most confident estimate per job and kind, and refines it from progress."""

    def __init__(self, history: HistorySource | None = None):
        self.history = history
        self._estimates: dict[str, Estimate] = {}
        self._base: dict[str, Estimate] = {}     # per job: the estimate before any progress

    def estimate(self, kind: str = "gpu", *, signature: str | None = None,
                 samples: Sequence[Sample] | None = None, total_steps: float | None = None,
                 hint: float | None = None) -> Estimate | None:
        """The best estimate from what is known, or None when nothing is."""
        found: list[Estimate] = []
        if samples:
            if total_steps is None:
                raise ValueError("total_steps: needed to extrapolate sample runs")
            found.append(from_samples(samples, total_steps, kind))
        if signature and self.history is not None:
            past = list(self.history.durations(signature, kind))
            if past:
                found.append(from_history(past, kind, signature))
        if hint is not None:
            found.append(from_hint(hint, kind))
        if not found:
            return None
        return min(found, key=lambda e: (-e.confidence, _RANK[e.source]))

    def estimate_all(self, kinds: Iterable[str], *, signature: str | None = None,
                     samples: Mapping[str, Sequence[Sample]] | Sequence[Sample] | None = None,
                     total_steps: float | None = None, hint: float | None = None) -> dict[str, Estimate]:
        """One estimate per kind the job can run on (kinds with nothing known are left out).

        ``samples`` may be a dict kind -> samples here.
        """
        out: dict[str, Estimate] = {}
        for k in kinds:
            s = samples.get(k) if isinstance(samples, Mapping) else samples
            e = self.estimate(k, signature=signature, samples=s, total_steps=total_steps, hint=hint)
            if e is not None:
                out[k] = e
        return out

    # --- per running job (what the engine calls) ------------------------
    def track(self, job_id: str, estimate: Estimate) -> None:
        self._estimates[job_id] = estimate

    def get(self, job_id: str) -> Estimate | None:
        return self._estimates.get(job_id)

    def report_progress(self, job_id: str, done: float, total: float, elapsed: float) -> Estimate:
        est = refine(self._estimates.get(job_id), done, total, elapsed)
        self._estimates[job_id] = est
        return est

    def remaining(self, job_id: str, elapsed: float) -> float | None:
        est = self._estimates.get(job_id)
        return None if est is None else max(0.0, est.value - elapsed)

    def forget(self, job_id: str) -> None:
        self._estimates.pop(job_id, None)
        self._base.pop(job_id, None)

    # --- per engine record (what policies call) -------------------------
    def base_for(self, rec: JobRecord, kind: str = "gpu", *, oracle: bool = False,
                 default: float | None = None) -> Estimate | None:
        """The estimate of a job before it reports progress: its signature label
        (``labels["signature"]``) in the history, the user's hint, the simulator's
        duration when ``oracle`` is set, else ``default``; kept per job."""
        got = self._base.get(rec.job_id)
        if got is not None:
            return got
        req = rec.request
        if oracle and req.duration:
            got = Estimate(float(req.duration), "oracle", MAX_CONFIDENCE, kind, None, "the simulator's duration")
        else:
            sig = (getattr(req, "labels", None) or {}).get("signature")
            got = self.estimate(kind, signature=sig, hint=req.estimate or None)
        if got is None and default is not None:
            got = Estimate(_positive("default", default), "default", DEFAULT_CONFIDENCE, kind, None,
                           "nothing known about this job: the configured default")
        if got is not None:
            self._base[rec.job_id] = got
        return got

    def for_record(self, rec: JobRecord, now: float | None, kind: str = "gpu", *, oracle: bool = False,
                   default: float | None = None) -> Estimate | None:
        """The job's current estimate: its base refined by the progress it reported
        (``rec.progress`` = (done, total), set by ``Engine.report_progress``) over the
        time it has run. Idempotent: always refined from the base, never compounded."""
        base = self.base_for(rec, kind, oracle=oracle, default=default)
        prog = getattr(rec, "progress", None)
        el = record_elapsed(rec, now)
        if not prog or el <= 0 or (base is not None and base.source == "oracle"):
            est = base
        else:
            done, total = prog
            if done <= 0 and base is None:
                return None
            est = refine(base, done, total, el)
        if est is not None:
            self._estimates[rec.job_id] = est
        return est

    def remaining_for(self, rec: JobRecord, now: float | None, kind: str = "gpu", *, oracle: bool = False,
                      default: float | None = None) -> float | None:
        """Seconds the job still needs: its estimate less what it has run (at least 1 s
        while it is not done, so a late job never looks free)."""
        est = self.for_record(rec, now, kind, oracle=oracle, default=default)
        if est is None:
            return None
        return max(1.0, est.value - record_elapsed(rec, now))
