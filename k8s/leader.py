"""One active scheduler: leader election on a coordination.k8s.io Lease.

``Elector`` runs the official client's ``kubernetes.leaderelection`` (its
``LeaseLock`` and its acquire/renew rule, ``try_acquire_or_renew``) on a
thread, with two things the library's loop lacks: it can be stopped (a
standby must be able to shut down without ever leading), and a leader that
stops hands the Lease back at once (holder cleared, as client-go's
``ReleaseOnCancel`` does), so a standby takes over within one retry period
instead of waiting for the lease to expire. A leader that dies without
stopping is replaced once its lease has not been renewed for
``lease_duration`` seconds.

``on_lead()`` runs on the elector's thread when this instance becomes the
leader; ``on_lose()`` when it stops being the leader for any reason other
than ``stop()`` (a renewal failed for ``renew_deadline`` seconds: another
instance may lead already, so the caller must stop acting at once).
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

log = logging.getLogger("hived.k8s.leader")


def default_identity() -> str:
    """host name (the pod's name in a StatefulSet) plus a random part: two processes never share one."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"


class _Election(leaderelection.LeaderElection):
    """The library's election with a stop event checked between its tries."""

    def __init__(self, cfg, stop: threading.Event):
        super().__init__(cfg)
        self.stop_event = stop

    def acquire(self) -> bool:
        while not self.stop_event.is_set():
            if self._try():
                return True
            self.stop_event.wait(self.election_config.retry_period)
        return False

    def renew_loop(self, leading_failed=None) -> None:
        cfg = self.election_config
        while not self.stop_event.is_set():
            deadline = time.monotonic() + cfg.renew_deadline
            while time.monotonic() < deadline and not self.stop_event.is_set():
                if self._try():
                    break
                self.stop_event.wait(cfg.retry_period)
            else:
                return          # renew_deadline passed without a renewal (or stopped)
            self.stop_event.wait(cfg.retry_period)

    def _try(self) -> bool:
        try:
            return self.try_acquire_or_renew()
        except Exception as e:   # connection refused while the API server restarts: try again
            log.info("leader election: %s: %s", e.__class__.__name__, e)
            return False


class Elector:
    """Campaign for the Lease ``namespace/name`` as ``identity``."""

    def __init__(self, api_client: client.ApiClient, namespace: str, name: str = "hived-scheduler", *,
                 identity: str | None = None, on_lead: Callable[[], None], on_lose: Callable[[], None],
                 lease_duration: int = 15, renew_deadline: int = 10, retry_period: int = 2):
        self.identity = identity or default_identity()
        self.namespace, self.name = namespace, name
        self.lock = LeaseLock(name, namespace, self.identity)
        self.lock.api_instance = client.CoordinationV1Api(api_client)   # not the global default client
        self.on_lead, self.on_lose = on_lead, on_lose
        self.cfg = electionconfig.Config(self.lock, lease_duration, renew_deadline, retry_period,
                                         self._lead, self._stopped)
        self.leading = threading.Event()
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Elector:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="hived-leader-election", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        _Election(self.cfg, self._stop).run()

    def _lead(self) -> None:
        if self._stop.is_set():
            return
        log.warning("leader election: %s leads (Lease %s/%s)", self.identity, self.namespace, self.name)
        self.leading.set()
        self.on_lead()

    def _stopped(self) -> None:
        if self._stop.is_set():
            return              # stop() hands the Lease back and clears ``leading`` itself
        was = self.leading.is_set()
        self.leading.clear()
        if was:
            self.lost = True
            log.error("leader election: %s lost the Lease %s/%s; it stops scheduling",
                      self.identity, self.namespace, self.name)
            self.on_lose()

    def holder(self) -> str | None:
        """Who holds the Lease now, as the API server says (None: nobody, or unreadable)."""
        try:
            lease = self.lock.api_instance.read_namespaced_lease(self.name, self.namespace)
        except Exception:
            return None
        return (lease.spec.holder_identity if lease.spec else None) or None

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; a leader hands the Lease back (``release``) so a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.cfg.retry_period + 5)
            self._thread = None
        if release and self.leading.is_set():
            self._release()
        self.leading.clear()

    def _release(self) -> None:
        api = self.lock.api_instance
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or lease.spec.holder_identity != self.identity:
                return
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            api.replace_namespaced_lease(self.name, self.namespace, lease)   # carries its resourceVersion
        except (ApiException, OSError, Exception) as e:   # the lease then expires on its own
            log.warning("leader election: could not hand back the Lease: %s", e)
