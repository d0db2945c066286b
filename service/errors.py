"""The refusals the service answers with, besides ``RequestError`` (400) and ``ServiceDegraded`` (503)."""
from __future__ import annotations

from hived.core.engine import RequestError


class NotAuthorized(PermissionError):
    """The user may not do this (not a member/admin of the VC, not the job's owner)."""


class NotFound(RequestError, LookupError):
    """Unknown job or VC (``field`` says which); a LookupError too, so doors answer 404."""


def unknown_job(job_id) -> NotFound:
    """What a job that does not exist answers, and so also one the caller may not see."""
    return NotFound("job_id", f"unknown job {job_id!r}")
