"""FitGpp's (OpML '19) workload replayed through the real Engine (``--backend engine``).

``fitgpp_experiment.simulate`` is the paper's own model (a minute-tick FIFO
over nodes). This module replays the same ``SynthJob`` list through
``hived.core.engine.Engine`` instead: one VC owning the paper's 84 nodes,
the quota allocator (core/quota.py: per-node best fit, the placement the
paper's FIFO uses; or HiveD's buddy allocator with ``allocator="hived"``),
the engine's FIFO queue policy with TE jobs first for the preemptive
policies, and the registered preemption policies (FitGpp, LRTP, RAND;
"none" for FIFO). The simulated launcher (core/sim/launcher.py) ends
runs after their remaining time and preempted runs after their grace period.

Same clock discipline as the paper model: every minute, jobs that arrived
meet the cluster as the last round left it (so a TE job preempts on
arrival), then the minute's exits are reported, then the engine decides
again. Times are seconds on the engine's clock, whole minutes here.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from hived.core.allocator import Allocator
from hived.core.engine import Engine, EngineConfig
from hived.core.jobs import DecisionKind, JobClass, JobRequest, PodGroup
from hived.core.policies.fifo import FifoPolicy
from hived.core.policies.fitgpp import DEFAULT_CAP, DEFAULT_S, FitGppPolicy
from hived.core.policies.lrtp import LRTPPolicy
from hived.core.policies.rand import RandPolicy
from hived.core.quota import QuotaAllocator
from hived.core.spec import load_spec

from .fitgpp_workload import NODES, SynthJob, cluster_spec
from .launcher import SimLauncher

if TYPE_CHECKING:   # fitgpp_experiment imports this module
    from .fitgpp_experiment import PolicyResult

MIN = 60.0


def _policy(name: str, s: float, seed: int) -> str | FitGppPolicy | LRTPPolicy | RandPolicy:
    # no cap here: the engine applies P (EngineConfig.preemption_cap) to the candidates
    if name == "fifo":
        return "none"
    if name == "fitgpp":
        return FitGppPolicy(s=s, seed=seed)
    if name == "lrtp":
        return LRTPPolicy()
    if name == "rand":
        return RandPolicy(seed=seed)
    raise ValueError(f"fitgpp engine replay: unknown policy {name!r}; choose from fifo, lrtp, rand, fitgpp")


def simulate_engine(jobs: Sequence[SynthJob], policy: str, *, nodes: int = NODES, s: float = DEFAULT_S,
                    cap: float = DEFAULT_CAP, seed: int = 0, tick: Callable[[int], object] | None = None,
                    allocator: str = "quota") -> PolicyResult:
    """Replay ``jobs`` (with arrival minutes) through the Engine; returns a ``PolicyResult``.

    ``allocator``: "quota" (per-node GPU counts, the paper's placement) or
    "hived" (HiveD's buddy cells: a pod holds the smallest cell of 1, 2, 4 or
    8 GPUs holding it, so a 3-GPU job holds 4 GPUs and a 5-GPU job a node).
    """
    from .fitgpp_experiment import PolicyResult, histogram  # what both backends share

    eng = _engine(policy, nodes=nodes, s=s, cap=cap, seed=seed, allocator=allocator)
    sim = SimLauncher()
    n = len(jobs)
    ids = [f"j{j.idx}" for j in jobs]
    index = {jid: k for k, jid in enumerate(ids)}
    finish = [0.0] * n
    signal: dict[str, float] = {}
    intervals: list[int] = []
    preempted = [0] * n
    preemptions = fallbacks = done = 0
    nxt = 0

    def decide(now: float) -> None:
        nonlocal preemptions, fallbacks
        for _ in range(100):  # a START can follow a KILL in the same minute; bounded for safety
            out = eng.step(now)
            if not out:
                return
            for d in out:
                if d.kind is DecisionKind.START:
                    eng.on_started(d.job_id, now)
                    rec = eng.job(d.job_id)
                    sim.launch(d.job_id, now, rec.remaining or 0.0, rec.attempts)
                    if d.job_id in signal:
                        intervals.append(round((now - signal.pop(d.job_id)) / MIN))
                elif d.kind is DecisionKind.PREEMPT:
                    sim.terminate(d.job_id, now, d.grace_period)
                    signal[d.job_id] = now
                    k = index[d.job_id]
                    preempted[k] += 1
                    preemptions += 1
                    fallbacks += "fallback" in d.reason
        raise AssertionError(f"engine replay: no quiet state at {now} s after 100 rounds")

    t = 0
    while done < n:
        now = t * MIN
        while nxt < n and jobs[nxt].arrival_min <= t:
            eng.submit(_request(jobs[nxt]), now, job_id=ids[nxt])
            nxt += 1
        decide(now)                       # arrivals meet the cluster as the last round left it
        for kind, jid in sim.due(now):
            if kind == SimLauncher.FINISHED:
                eng.on_finished(jid, now, 0)
                finish[index[jid]] = now
                done += 1
                if tick is not None and done & 1023 == 0:
                    tick(1024)
            else:
                eng.on_preempted(jid, now)
        decide(now)
        cand = [x for x in (sim.next_time(), eng.next_wakeup()) if x is not None]
        if nxt < n:
            cand.append(jobs[nxt].arrival_min * MIN)
        if not cand:
            if done < n:
                raise AssertionError(f"engine replay ({policy}): stuck at minute {t} with {n - done} jobs left")
            break
        t = max(t + 1, math.ceil(min(cand) / MIN))
    if tick is not None and n & 1023:
        tick(n & 1023)
    te_sd, be_sd = _slowdowns(jobs, finish)
    return PolicyResult(policy, s if policy == "fitgpp" else None, cap, n, te_sd, be_sd, intervals,
                        sum(1 for p in preempted if p), preemptions, fallbacks, round(max(finish) / MIN) if n else 0,
                        histogram(preempted))


def _request(j: SynthJob) -> JobRequest:
    return JobRequest(user="sim", vc="vc0", job_class=JobClass.TE if j.te else JobClass.BE,
                      groups=[PodGroup(1, j.gpus, cpus=float(j.cpus), memory_gb=float(j.memory_gb))],
                      grace_period=j.grace_min * MIN, duration=j.exec_min * MIN)


def _engine(policy: str, *, nodes: int, s: float, cap: float, seed: int, allocator: str) -> Engine:
    """The engine ``simulate_engine`` replays through: ``allocator`` over the FitGpp cluster of
    ``nodes`` nodes, TE first (but for fifo), ``policy`` choosing victims, no backfill."""
    pol = _policy(policy, s, seed)
    alloc: QuotaAllocator | Allocator
    if allocator == "quota":
        alloc = QuotaAllocator(load_spec(cluster_spec(nodes)))
    elif allocator == "hived":
        alloc = Allocator(load_spec(cluster_spec(nodes)))
    else:
        raise ValueError(f"fitgpp engine replay: unknown allocator {allocator!r}; choose quota or hived")
    return Engine(alloc,
                  queue_policy=FifoPolicy(te_first=policy != "fifo"), preemption_policy=pol,
                  # inf: no cap (the engine only compares preemption counts with it)
                  config=EngineConfig(preemption_cap=cap if math.isinf(cap) else int(cap),  # type: ignore[arg-type]
                                      backfill=False))   # the paper's strict FIFO


def _slowdowns(jobs: Sequence[SynthJob], finish: list[float]) -> tuple[list[float], list[float]]:
    """(TE, BE) slowdowns: 1 + the time a job waited over its execution time."""
    te_sd: list[float] = []
    be_sd: list[float] = []
    for k, j in enumerate(jobs):
        wait = finish[k] / MIN - j.arrival_min - j.exec_min
        (te_sd if j.te else be_sd).append(1.0 + wait / j.exec_min)
    return te_sd, be_sd
