"""Prometheus metrics of one scheduler service, on a registry of its own.

A registry per service (not prometheus_client's global one) keeps several
services in one process, and jupyter-server's own metrics, apart. The state
(queues, jobs, GPUs in use) is read under the service's lock when scraped, so
it is never stale; timings and preemptions are fed by the service as they happen.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from hived.core.exchange_types import ExchangeState
from hived.core.jobs import HOLDING as _HOLDING
from hived.core.jobs import KERNEL_LABEL, JobState

from .views import loans, spec_gpus

# (job class, cells) pairs always shown, 0 when idle; an opportunistic job never holds guaranteed cells
_GPU_SERIES = (("te", "guaranteed"), ("te", "opportunistic"), ("be", "guaranteed"), ("be", "opportunistic"),
               ("opportunistic", "opportunistic"))
# a round is milliseconds; a commit waits for fsync (FULL synchronous)
_ROUND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 24 * 3600.0, 72 * 3600.0)
_COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class _StateCollector:
    """Gauges computed from the service's jobs at scrape time."""

    def __init__(self, service):
        self._svc = service

    def describe(self):
        return []   # computed at scrape time: nothing to check at registration

    def collect(self):
        svc = self._svc
        queue = GaugeMetricFamily("hived_queue_length", "Jobs waiting in a VC's queue", labels=["vc"])
        jobs = GaugeMetricFamily("hived_jobs", "Jobs known to the service, by VC and state",
                                 labels=["vc", "state"])
        gpus = GaugeMetricFamily("hived_gpus_in_use", "GPUs held by a VC's jobs, by job class (te, be, "
                                 "opportunistic) and by the cells they hold (guaranteed: the VC's own; "
                                 "opportunistic: idle cells lent at low priority)",
                                 labels=["vc", "job_class", "cells"])
        total = GaugeMetricFamily("hived_vc_gpus", "Guaranteed GPUs a VC holds now: its spec's, plus cells "
                                  "borrowed, less cells lent by cell exchange", labels=["vc"])
        spec_total = GaugeMetricFamily("hived_vc_spec_gpus", "GPUs a VC is guaranteed by the spec", labels=["vc"])
        submitted = CounterMetricFamily("hived_jobs_submitted", "Jobs submitted to a VC (from the journal: "
                                        "survives restarts and gc)", labels=["vc"])
        preempted = CounterMetricFamily("hived_preemptions", "Preemptions carried out, by the preempted job's VC "
                                        "(from the journal: survives restarts and gc)", labels=["vc"])
        kernels = GaugeMetricFamily("hived_kernel_jobs", "Jobs that are Jupyter kernels (label 'kernel'), by VC "
                                    "and state", labels=["vc", "state"])
        kernel_counts: dict = {}
        with svc.lock:
            vcs = sorted(svc.spec.vcs)
            counts: dict = {(vc, s.value): 0 for vc in vcs for s in JobState}
            base = getattr(svc, "gc_totals", {})
            subs = {vc: base.get(vc, {}).get("submitted", 0) for vc in vcs}
            pre = {vc: base.get(vc, {}).get("preemptions", 0) for vc in vcs}
            used: dict = {(vc, cls, cells): 0 for vc in vcs for cls, cells in _GPU_SERIES}
            for rec in svc.eng.jobs():
                vc = rec.request.vc
                counts[(vc, rec.state.value)] = counts.get((vc, rec.state.value), 0) + 1
                if KERNEL_LABEL in rec.request.labels:
                    kernel_counts[(vc, rec.state.value)] = kernel_counts.get((vc, rec.state.value), 0) + 1
                subs[vc] = subs.get(vc, 0) + 1
                pre[vc] = pre.get(vc, 0) + rec.preemptions
                if rec.state in _HOLDING:
                    key = (vc, rec.request.job_class.value, "opportunistic" if rec.opportunistic else "guaranteed")
                    used[key] = used.get(key, 0) + rec.gpus
            for vc in vcs:
                queue.add_metric([vc], len(svc.eng.queue(vc)))
                total.add_metric([vc], svc.eng.capacity(vc))
                spec_total.add_metric([vc], spec_gpus(svc.spec, vc))
                submitted.add_metric([vc], subs[vc])
                preempted.add_metric([vc], pre[vc])
            exchange = list(_exchange_families(svc, vcs))
            unhealthy = len(svc.unhealthy)
            degraded = svc.degraded is not None
        for (vc, state), n in sorted(counts.items()):
            jobs.add_metric([vc, state], n)
        for (vc, cls, cells), n in sorted(used.items()):
            gpus.add_metric([vc, cls, cells], n)
        for (vc, state), n in sorted(kernel_counts.items()):
            kernels.add_metric([vc, state], n)
        yield from (queue, jobs, gpus, total, spec_total, submitted, preempted, kernels, *exchange)
        yield GaugeMetricFamily("hived_unhealthy_gpus", "GPUs (or whole nodes) marked unhealthy",
                                value=unhealthy)
        yield GaugeMetricFamily("hived_degraded", "1 while the journal cannot be written", value=int(degraded))


def _exchange_families(svc, vcs: list[str]):
    """Cell exchange: GPUs lent and borrowed now, the GPU-hour ledger, open posts, exchanges by state."""
    arb = svc.exchange.arb
    if arb is None:   # the quota scheme trades no cells
        return
    moved = GaugeMetricFamily("hived_exchange_gpus", "GPUs moved by cell exchange now, per VC: lent to "
                              "others (direction=lent) or borrowed from them (direction=borrowed)",
                              labels=["vc", "direction"])
    hours = GaugeMetricFamily("hived_exchange_gpu_hours", "The exchange ledger per VC: GPU-hours contributed "
                              "(lent) and consumed (borrowed)", labels=["vc", "side"])
    for vc in vcs:
        lent, borrowed = loans(svc, vc)
        moved.add_metric([vc, "lent"], lent)
        moved.add_metric([vc, "borrowed"], borrowed)
        entry = arb.ledger.entry(vc)
        hours.add_metric([vc, "contributed"], entry.contributed)
        hours.add_metric([vc, "consumed"], entry.consumed)
    posts = GaugeMetricFamily("hived_exchange_posts", "Open posts on the exchange board", labels=["kind"])
    posts.add_metric(["offer"], len(arb.offers))
    posts.add_metric(["request"], len(arb.requests))
    states = GaugeMetricFamily("hived_exchanges", "Exchanges by state", labels=["state"])
    for st in ExchangeState:
        states.add_metric([st.value], sum(1 for e in arb.exchanges.values() if e.state is st))
    yield from (moved, hours, posts, states)


class ServiceMetrics:
    """What one service reports; ``text()`` is the Prometheus exposition."""

    def __init__(self, service):
        self.registry = CollectorRegistry(auto_describe=False)
        self.round_seconds = Histogram("hived_round_seconds", "Time of one scheduling round",
                                       registry=self.registry, buckets=_ROUND_BUCKETS)
        self.commit_seconds = Histogram("hived_journal_commit_seconds", "Time of one journal commit",
                                        registry=self.registry, buckets=_COMMIT_BUCKETS)
        self.queue_wait = Histogram("hived_queue_wait_seconds", "Time a job waited in its VC's queue before "
                                    "it was started (each start; a requeued job waits again)", ["vc"],
                                    registry=self.registry, buckets=_WAIT_BUCKETS)
        self.registry.register(_StateCollector(service))

    def observe_start(self, rec, now: float) -> None:
        """A START: the job waited from its last time queued (submitted or requeued) until now."""
        queued = next((t for t, state, _ in reversed(rec.history) if state == JobState.QUEUED.value),
                      rec.submitted)
        self.queue_wait.labels(rec.request.vc).observe(max(0.0, now - queued))

    def text(self) -> bytes:
        return generate_latest(self.registry)
