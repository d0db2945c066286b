"""One gang as the Kubernetes launcher follows it: its pods, their states, where it is in its life.

``KubernetesLauncher`` (launcher.py) keeps one ``Gang`` per job in its gang book
(``launcher.gangs``, under ``launcher.lock``), from ``launch`` or from ``adopt``
after a restart (adoption.py), until the gang's ``exited`` event was reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(eq=False)            # identity: gangs sit in sets
class Gang:
    job_id: str
    attempt: int
    namespace: str
    names: list
    grace: float
    states: dict = field(default_factory=dict)     # rank -> PodState
    started: bool = False
    ended: bool = False
    terminating: bool = False
    launching: bool = False
    skipped: bool = False          # terminated before its pods were created (pipeline mode)
    failing: tuple | None = None    # (rank, PodState) of the member that ended the gang badly
    release_at: float = 0.0        # monotonic time after which a failing gang is over regardless
    pending_since: float = 0.0     # monotonic time its pods were created (or adopted), for the Pending timeout
    nodes: list = field(default_factory=list)     # rank -> the node its pod is bound to
    forced: set = field(default_factory=set)      # pod names force-deleted (their node is not Ready)
    stuck: str = ""                # why a member outlives its grace period on a Ready node (REST shows it)
