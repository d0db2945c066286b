"""Prometheus metrics of one scheduler service, on a registry of its own.

A registry per service (not prometheus_client's global one) keeps several
services in one process, and jupyter-server's own metrics, apart. The state
(queues, jobs, GPUs in use) is read under the service's lock when scraped, so
it is never stale; timings and preemptions are fed by the service as they happen.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from hived.core.jobs import HOLDING as _HOLDING
from hived.core.jobs import KERNEL_LABEL

# (job class, cells) pairs always shown, 0 when idle; an opportunistic job never holds guaranteed cells
_GPU_SERIES = (("te", "guaranteed"), ("te", "opportunistic"), ("be", "guaranteed"), ("be", "opportunistic"),
               ("opportunistic", "opportunistic"))
# a round is milliseconds; a commit waits for fsync (FULL synchronous)
_ROUND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
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
        total = GaugeMetricFamily("hived_vc_gpus", "GPUs a VC is guaranteed by the spec", labels=["vc"])
        kernels = GaugeMetricFamily("hived_kernel_jobs", "Jobs that are Jupyter kernels (label 'kernel'), by VC "
                                    "and state", labels=["vc", "state"])
        kernel_counts: dict = {}
        with svc._lock:
            vcs = sorted(svc.spec.vcs)
            counts: dict = {}
            used: dict = {(vc, cls, cells): 0 for vc in vcs for cls, cells in _GPU_SERIES}
            for rec in svc.eng.jobs():
                vc = rec.request.vc
                counts[(vc, rec.state.value)] = counts.get((vc, rec.state.value), 0) + 1
                if KERNEL_LABEL in rec.request.labels:
                    kernel_counts[(vc, rec.state.value)] = kernel_counts.get((vc, rec.state.value), 0) + 1
                if rec.state in _HOLDING:
                    key = (vc, rec.request.job_class.value, "opportunistic" if rec.opportunistic else "guaranteed")
                    used[key] = used.get(key, 0) + rec.gpus
            for vc in vcs:
                queue.add_metric([vc], len(svc.eng.queue(vc)))
                spec = svc.spec.vcs[vc]
                total.add_metric([vc], sum(n * svc.spec.chains[c].gpus_per_level[lvl - 1]
                                           for (c, lvl), n in spec.cells.items()))
            unhealthy = len(svc._unhealthy)
            degraded = svc.degraded is not None
        for (vc, state), n in sorted(counts.items()):
            jobs.add_metric([vc, state], n)
        for (vc, cls, cells), n in sorted(used.items()):
            gpus.add_metric([vc, cls, cells], n)
        for (vc, state), n in sorted(kernel_counts.items()):
            kernels.add_metric([vc, state], n)
        yield from (queue, jobs, gpus, total, kernels)
        yield GaugeMetricFamily("hived_unhealthy_gpus", "GPUs (or whole nodes) marked unhealthy",
                                value=unhealthy)
        yield GaugeMetricFamily("hived_degraded", "1 while the journal cannot be written", value=int(degraded))


class ServiceMetrics:
    """What one service reports; ``text()`` is the Prometheus exposition."""

    def __init__(self, service):
        self.registry = CollectorRegistry(auto_describe=False)
        self.round_seconds = Histogram("hived_round_seconds", "Time of one scheduling round",
                                       registry=self.registry, buckets=_ROUND_BUCKETS)
        self.commit_seconds = Histogram("hived_journal_commit_seconds", "Time of one journal commit",
                                        registry=self.registry, buckets=_COMMIT_BUCKETS)
        self.preemptions = Counter("hived_preemptions", "Preemptions carried out, by the preempted job's VC",
                                   ["vc"], registry=self.registry)
        self.registry.register(_StateCollector(service))

    def text(self) -> bytes:
        return generate_latest(self.registry)
