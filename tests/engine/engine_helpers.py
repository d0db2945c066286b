"""Small specs and helpers shared by the engine tests."""
from __future__ import annotations

from hived.core.engine import Engine
from hived.core.jobs import DecisionKind, JobClass, JobRequest, PodGroup
from hived.core.quota import QuotaAllocator
from hived.core.spec import load_spec


def fig2_spec() -> dict:
    """HiveD (earlier version) Figure 2: two 4-GPU nodes, two PCIe switches each; tenants A and B, 4 GPUs each."""
    return {
        "physicalCluster": {
            "cellTypes": {"PCIE": {"childCellType": "GPU", "childCellNumber": 2},
                          "NODE": {"childCellType": "PCIE", "childCellNumber": 2, "isNodeLevel": True,
                                   "cpus": 16, "memoryGB": 128}},
            "physicalCells": [{"cellType": "NODE", "cellAddress": "node1"},
                              {"cellType": "NODE", "cellAddress": "node2"}]},
        "virtualClusters": {"A": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}], "users": ["alice"],
                                  "admins": ["root"]},
                            "B": {"virtualCells": [{"cellType": "NODE", "cellNumber": 1}]}},
    }


def eight_gpu_spec(nodes: int = 4, vcs=None) -> dict:
    from hived.core.sim.cluster import node_spec
    return node_spec(nodes, vcs or {"A": 8 * (nodes // 2), "B": 8 * (nodes - nodes // 2)})


def quota_engine(spec_dict, **kw) -> Engine:
    kw.setdefault("preemption_policy", "none")
    return Engine(QuotaAllocator(load_spec(spec_dict)), **kw)


def req(vc="A", gpus=1, pods=1, cls=JobClass.TE, user="alice", **kw) -> JobRequest:
    kw.setdefault("groups", [PodGroup(pods, gpus)])
    return JobRequest(user=user, vc=vc, job_class=cls, **kw)


def run(eng: Engine, now: float) -> list:
    """step(now) and acknowledge START decisions the way a launcher would."""
    ds = eng.step(now)
    for d in ds:
        if d.kind is DecisionKind.START:
            eng.on_started(d.job_id, now)
    return ds


def kinds(ds) -> list:
    return [(d.kind.value, d.job_id) for d in ds]


def borrowed(grace: float = 60.0, **engine_kw) -> Engine:
    """Figure 2's cluster: B's opportunistic job ``opp`` (grace ``grace``) runs on A's idle node;
    A's guaranteed job ``g`` then wants the node back: ``opp`` is told to stop and ``g`` is
    placed, waiting for it."""
    eng = Engine(load_spec(fig2_spec()), **engine_kw)
    eng.submit(req(vc="B", gpus=4, cls=JobClass.BE, user="bob"), 0.0, job_id="bfill")
    eng.submit(req(vc="B", gpus=4, cls=JobClass.OPPORTUNISTIC, user="bob", grace_period=grace), 0.0, job_id="opp")
    run(eng, 0.0)
    eng.submit(req(gpus=4), 10.0, job_id="g")
    assert kinds(eng.step(10.0)) == [("preempt", "opp")]
    return eng
