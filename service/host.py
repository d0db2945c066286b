"""What ``SchedulerService`` lends the parts it is composed of.

Retention (retention.py), disk quotas (quota.py), cell exchange (exchange.py),
job control (control.py) and kernel idle release (kernel_idle.py) are objects the
service builds, each given the service as a ``ServiceHost``: the members below and
nothing else. They are all public members of ``SchedulerService``; a part never
reaches into the service's private state, nor into another part's.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .errors import NotAuthorized

if TYPE_CHECKING:
    from hived.core.engine import Engine
    from hived.core.engine_records import JobRecord
    from hived.core.jobs import Decision
    from hived.core.spec import ClusterSpec

    from .access import Access
    from .store import Store


class ServiceHost(Protocol):
    # what the service is on
    clock: Callable[[], float]
    data_dir: Path
    degraded: str | None
    eng: Engine
    scheme: str
    spec: ClusterSpec
    store: Store

    @property
    def lock(self) -> threading.RLock: ...      # the service lock: the engine and the journal

    @property
    def access(self) -> Access: ...

    def unknown_vc(self, vc: Any, user: str, groups: Iterable[Any] = ()) -> LookupError: ...
    def record(self, job_id: str) -> JobRecord: ...

    # the journal: write, then act
    def require_journal(self, now: float) -> None: ...
    def degrade(self, exc: Exception) -> str: ...
    def write(self, ids: Iterable[str], now: float, meta: dict[str, str] | None = None, *,
              sync: bool = True) -> int: ...
    def try_write(self, ids: Iterable[str], now: float) -> None: ...
    def rewrite(self, job_id: str) -> None: ...
    def act(self, decisions: list[Decision], now: float, also: Iterable[str] = ()) -> bool: ...
    def cancel_job(self, job_id: str, user: str) -> None: ...
    def forget_job(self, job_id: str) -> None: ...
    def settle(self) -> None: ...
    def wake(self) -> None: ...


def administered(host: ServiceHost, user: str, vc: str | None, groups: Iterable[str] = ()) -> list[str]:
    """The VCs whose retention and disk quota ``user`` may set and apply: ``[vc]`` or, with no
    ``vc``, every VC ``user`` administers. Refused when none."""
    spec, access = host.spec, host.access
    if vc is not None:
        if vc not in spec.vcs:
            raise host.unknown_vc(vc, user, groups)
        if not access.is_vc_admin(user, vc, groups):
            raise NotAuthorized(f"user {user!r} may not set or apply the retention of VC {vc!r}"
                                f"{access.admins_for(user, vc, groups)}")
        return [vc]
    mine = [v for v in sorted(spec.vcs) if access.is_vc_admin(user, v, groups)]
    if not mine:
        raise NotAuthorized(f"user {user!r} administers no VC: garbage collection is for admins")
    return mine


class HandOn:
    """A member of the service that is its part's: ``gc = HandOn("retention_rules", "gc")`` makes
    ``svc.gc`` the bound method ``svc.retention_rules.gc`` (what the doors call on the service)."""

    def __init__(self, part: str, member: str):
        self.part, self.member = part, member

    def __get__(self, svc: Any, owner: Any = None) -> Any:
        if svc is None:
            return self
        return getattr(getattr(svc, self.part), self.member)
