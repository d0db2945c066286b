"""The run-time estimate shown beside a job (docs/estimator.md).

In a VC whose queue policy orders by length (``queuePolicy: allox``) it is
the policy's own estimate, the one the queue is ordered by: the user's
``--estimate``, else the policy's default, refined by the progress the job
reported. In other VCs it is what the estimator learns without a default:
the user's hint refined by progress, or nothing. Ended jobs show none.
"""
from __future__ import annotations

from typing import Any

from hived.core.estimator import Estimator


def estimate_view(eng: Any, rec: Any, now: float) -> dict[str, Any] | None:
    """``{value, source, confidence, ...}`` of the job's estimate now, or None."""
    if rec.state.terminal:
        return None
    policy = eng.vc_policies.get(rec.request.vc) if hasattr(eng, "vc_policies") else None
    refresh = getattr(policy, "on_progress", None)
    est = refresh(rec, now) if refresh is not None else Estimator().for_record(rec, now)
    if est is None:
        return None
    doc: dict[str, Any] = est.to_dict()
    doc["value"] = round(est.value, 3)
    return doc
