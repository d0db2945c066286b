"""The launcher protocol: how the service starts, stops and watches gangs.

The service executes the engine's decisions through a launcher and feeds
what the launcher sees back to the engine. ``local_launcher.LocalLauncher``
runs pods as processes on this machine; ``hived.k8s.launcher`` runs them as
Kubernetes pods; the simulator has its own.

What a launcher can do beyond the five methods of ``Launcher`` it declares by
offering the optional members named in ``CAPABILITIES``; the service asks for one
with ``capability(launcher, name)`` and never looks at the launcher's class. Its
``kind`` (a word: ``local``, ``kubernetes``) names it to people.

A launcher may offer ``validate(request)``, raising ``ValueError`` (with
``where``/``problem``) for what its ``launch`` would refuse: the service calls
it at submission for requests carrying launcher-specific fields
(``k8s_template``), so such a job is refused before it is queued.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hived.core.engine import RequestError
from hived.core.jobs import KERNEL_LABEL, JobRequest, Placement


@dataclass(frozen=True)
class LauncherEvent:
    """Something the launcher saw happen to a job.

    ``kind`` is ``"started"`` (every pod of the gang runs) or ``"exited"`` (the
    whole gang is gone). For ``exited``: ``exit_code`` is the first non-zero
    pod exit code in rank order (0 when all succeeded; negative = killed by
    that signal, Python's convention), or ``None`` when the processes vanished
    without a trace (the service then records failure class "lost");
    ``log_tail`` is the end of that pod's log, for failure classification.
    """

    job_id: str
    kind: str
    exit_code: int | None = None
    log_tail: str = ""
    attempt: int = 0


@runtime_checkable
class Launcher(Protocol):
    def launch(self, job_id: str, request: JobRequest, placement: Placement, attempt: int) -> None: ...

    def terminate(self, job_id: str, grace_period: float) -> None: ...

    def poll(self) -> list[LauncherEvent]: ...

    def adopt(self, job_id: str, placement: Placement) -> bool: ...

    def logs(self, job_id: str, rank: int = 0, offset: int = 0) -> tuple[str, int]: ...


CAPABILITIES = {
    "validate": "validate(request): refuse at submission what launch would refuse (job template fields)",
    "check_account": "check_account(request): the job's account may run jobs here (ValueError: why not)",
    "check_reach": "check_reach(request, needs): the job's account reaches its workdir, program and needs",
    "on_change": "on_change(callback): call callback() when a gang may have exited (no wait for the poll)",
    "warm": "warm(): get ready before the first launch",
    "gang_started": "gang_started(job_id): an adopted gang runs (False: its pods are still Pending)",
    "shared_account": "shared_account(vcs): the one account every VC's jobs run as, if any (for status)",
    "close": "close(): release what the launcher holds when the service closes",
    "pod_names": "pod_names(job_id): the pods of the job's live gang (a kernel pod that reports names its own)",
}


def capability(launcher: Any, name: str) -> Any:
    """The optional member ``name`` (one of ``CAPABILITIES``) of ``launcher``, or None when it has none."""
    if name not in CAPABILITIES:
        raise KeyError(f"{name!r} is no declared launcher capability; known: {', '.join(CAPABILITIES)}")
    return getattr(launcher, name, None)


def refuse_unlaunchable(launcher: Any, req: JobRequest) -> None:
    """Refuse at submission what the launcher would refuse at launch (a job's own Kubernetes
    template fields), so a bad job is never queued only to fail when its turn comes."""
    check_account = capability(launcher, "check_account")   # local: the job's unix account
    if check_account is not None:
        try:
            check_account(req)
        except ValueError as e:
            raise RequestError("user", str(e)) from None
    validate = capability(launcher, "validate")
    # a kernel job's pod needs what the launcher knows (where it reports to): checked like a template
    if req.k8s_template is None and (validate is None or KERNEL_LABEL not in req.labels):
        return
    if validate is None:
        kind = getattr(launcher, "kind", "a launcher that takes no job templates")
        raise RequestError("k8s_template", f"this hived runs jobs with {kind}; "
                           "job template fields apply on Kubernetes only (hived serve --launcher kubernetes)")
    try:
        validate(req)
    except ValueError as e:          # TemplateError: where ("template.volumes[0]...") + problem
        where = getattr(e, "where", "template")
        where = "k8s_template" + where[len("template"):] if where.startswith("template") else where
        raise RequestError(where, getattr(e, "problem", str(e))) from None


def refuse_unreachable(launcher: Any, req: JobRequest, needs: Any) -> None:
    """Refuse at submission a job whose account cannot reach its workdir, its program or ``needs``
    (a launcher with ``check_reach``: the local one checks as the job's account)."""
    try:
        capability(launcher, "check_reach")(req, needs)
    except ValueError as e:
        raise RequestError(getattr(e, "field", "user"), getattr(e, "problem", str(e))) from None
