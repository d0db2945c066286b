"""Idle capacity a waiting job could have used: the simulator's measure of waste.

At each sample the simulator asks: of the GPUs no job holds, how many could the
queued jobs take right now, by node counts (free GPUs, CPUs and memory per node,
as placement counts them)? Queued jobs not in retry back-off are taken in queue
order, VC by VC, each placed pod by pod first-fit on a copy of the nodes' free
resources (a job whose pods do not all fit takes nothing). The sum over samples
times the sample interval is ``idle_gpu_hours_job_fits``: GPU-hours idle while
a job that fits them waited. Cells, VC quotas and affinity are not asked: a
scheme whose rules keep a fitting job off idle GPUs (head-of-line blocking,
quotas, cell shapes) shows here as waste, which is the point.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..engine import Engine


def idle_fit_gpus(eng: Engine, now: float) -> int:
    """GPUs idle at ``now`` that the queued jobs could take, by node counts."""
    left: dict[str, list[float]] = {n: [st.gpus_free, st.cpus_free, st.memory_free_gb]
                                   for n, st in eng.view.nodes.items() if st.gpus_free > 0}
    if not left:
        return 0
    idle = sum(v[0] for v in left.values())
    taken = 0
    for vc in eng.spec.vcs:
        for jid in eng.queue(vc, now):
            rec = eng.job(jid)
            if rec.not_before > now or rec.gpus > idle - taken:
                continue
            took: dict[str, list[float]] = {}     # this job's pods so far, per node
            for c, m, g in rec.pod_demands:
                node = None
                for n, v in left.items():
                    t = took.get(n)
                    tg, tc, tm = (t[0], t[1], t[2]) if t is not None else (0.0, 0.0, 0.0)
                    if v[0] - tg >= g and v[1] - tc + 1e-9 >= c and v[2] - tm + 1e-9 >= m:
                        node = n
                        break
                if node is None:
                    took = {}
                    break
                t = took.setdefault(node, [0.0, 0.0, 0.0])
                t[0] += g
                t[1] += c
                t[2] += m
            if took:
                for n, (g, c, m) in took.items():
                    v = left[n]
                    v[0] -= int(g)
                    v[1] -= c
                    v[2] -= m
                    if v[0] <= 0:
                        del left[n]
                taken += rec.gpus
                if taken >= idle:
                    return int(taken)
    return int(taken)
    return int(taken)
