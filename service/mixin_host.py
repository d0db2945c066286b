"""What ``SchedulerService`` lends its mixins (exchange.py, retention.py, quota.py).

The mixins are parts of one class split by concern: each calls members that
the service (or another mixin) defines. They inherit ``MixinHost`` so the type
checker knows those members; at run time the class is empty, and the real
members come from ``SchedulerService`` and the other mixins through the MRO.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hived.core.engine import Engine
    from hived.core.spec import ClusterSpec

    from .access import Access
    from .admission import AdmissionControl
    from .quota import QuotaMeter
    from .store import Store


class MixinHost:
    if TYPE_CHECKING:
        # SchedulerService.__init__ / _open
        clock: Callable[[], float]
        data_dir: Path
        degraded: str | None
        eng: Engine
        scheme: str
        spec: ClusterSpec
        store: Store
        _lock: threading.RLock
        _wake: threading.Event
        _seen: dict[str, tuple[Any, ...] | None]
        _live: set[str]
        # QuotaMixin (quota.py), which RetentionMixin calls after removing jobs
        _quota: dict[str, float]
        _used: dict[str, int]
        _job_bytes: dict[str, int]
        _aside_pending: bool
        _meter: QuotaMeter
        _admission: AdmissionControl

        # SchedulerService
        def _is_admin(self, user: str, vc: str, groups: Iterable[str] = ()) -> bool: ...
        @property
        def access(self) -> Access: ...
        def unknown_vc(self, vc: Any, user: str, groups: Iterable[Any] = ()) -> LookupError: ...
        def _require_journal(self, now: float) -> None: ...
        def _degrade(self, exc: Exception) -> str: ...
        def _write(self, ids: Iterable[str], now: float, meta: dict[str, str] | None = None, *,
                   sync: bool = True) -> int: ...
        def _try_write(self, ids: Iterable[str], now: float) -> None: ...
        def _cancel(self, job_id: str, user: str) -> None: ...
        # RetentionMixin and QuotaMixin call each other
        def _administered(self, user: str, vc: str | None, groups: Iterable[str] = ()) -> list[str]: ...
        def _forget_sizes(self, job_id: str) -> None: ...
