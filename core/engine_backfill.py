"""Backfill with a reservation for the head of a VC's queue (EASY backfill, as Slurm's).

When a VC's head H cannot start, the round does not stop there (docs/engine.md,
"Backfill"): H holds a **reservation**, the earliest time its VC will have
H's GPUs free, from the estimated end of every job holding the VC's
guaranteed GPUs (``Estimator.remaining_for``: the user's hint refined by
progress in the service, the trace's durations in the simulator; jobs in
their grace period end at its end). Later jobs of the VC may then start on
the VC's own free cells, never opportunistically and never by preempting:

* **before the reservation**: its estimated end is no later than the reservation;
* **elsewhere**: it fits in the GPUs the VC will still have free at the
  reservation beyond H's need (the "extra" GPUs, used up one job at a time), when
  H's pods are single GPUs with no locality (else cell shapes, not counts, decide
  where H fits, and a job on "extra" GPUs could split the cell H waits for);
* **preemptible by H**: when the reservation is unknown (some job on the VC's
  GPUs has no estimate) or the job itself has none. When H is next tried and
  fails, and the VC's free GPUs plus those of its preemptible backfilled jobs
  cover it, the latest of them are preempted for H (the TE-preemption
  bookkeeping: H waits for them, they requeue behind H).

A job with an estimate that would end after the reservation and does not fit
the extra GPUs waits. A head that can never fit its VC's current cells (after
a loan's return, a spec reload, or hardware marked bad) holds no reservation:
it waits with that reason and later jobs start as if it were not there.

Everything stays inside the VC's own guaranteed cells, so HiveD's guarantees
and sharing safety are unchanged. The preemptible mark is not journaled: after a
restart backfilled jobs run as ordinary jobs.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .engine_reasons import explain as explain_job
from .estimator import Estimator
from .jobs import HOLDING, Decision, JobClass, JobState
from .policies.preemption_order import preemption_cap, under_cap
from .timefmt import at

if TYPE_CHECKING:
    from .engine_books import EngineBooks
    from .engine_records import JobRecord
    from .grant import Grant

ESTIMATES = ("hint", "oracle", "none")
MAX_TRIED = 1000      # jobs behind a head examined per round (Slurm's bf_max_job_test)


@dataclass
class Reservation:
    head: str
    vc: str
    start: float | None = None     # earliest time the VC has the head's GPUs free; None: unknown
    extra: int = 0                 # GPUs free at ``start`` beyond the head's need (left to hand out)
    never: str = ""                # the head can never fit the VC's current cells: why
    # the head is a gang of 1-GPU pods with no locality: free GPUs decide where it fits, so
    # GPUs beyond its need are truly spare. Otherwise the cells' shapes decide (a whole node,
    # a PCIe pair), and a job on "spare" GPUs may split the very cell the head waits for.
    counts: bool = False
    key: tuple[int, int] = (0, 0)
    # the head's pods each need a whole node: the nodes it will take at ``start``. Later jobs
    # that would end after ``start`` may still start now on other nodes ("elsewhere").
    nodes: frozenset[str] = frozenset()


class Placer(Protocol):
    """What backfill needs of the engine (``Engine``): its books, and placing a job as a round does."""

    books: EngineBooks

    def try_place(self, rec: JobRecord, opportunistic: bool,
                  avoid: frozenset[str] = frozenset()) -> Grant | None: ...

    def bind(self, rec: JobRecord, grant: Grant, now: float, out: list[Decision]) -> None: ...


class Backfill:
    """The engine's backfill: one reservation per blocked VC head, recomputed when the
    VC's holders or cells change."""

    def __init__(self, eng: Placer, estimates: str = "hint"):
        if estimates not in ESTIMATES:
            raise ValueError(f"backfill_estimates: must be one of {', '.join(ESTIMATES)}, got {estimates!r}")
        self.eng = eng
        self.estimates = estimates
        self.estimator = Estimator()
        # VC -> backfilled job -> the placement it got: preemptible by the VC's head while it
        # holds that placement (a later run of the same job is an ordinary one)
        self.preemptible: dict[str, dict[str, object]] = {}
        self._res: dict[str, Reservation] = {}    # VC -> reservation of its blocked head
        # job -> memo of its last failed backfill placement (scope, version, nodes it avoided)
        self._failed: dict[str, tuple[bool, int, frozenset[str]]] = {}
        self._walked: dict[str, tuple[str, int, int, int]] = {}   # VC -> what its last walk read

    # ------------------------------------------------------------------ estimates

    def remaining(self, rec: JobRecord, now: float) -> float | None:
        """Seconds ``rec`` still runs (from now if it has not started), or None when unknown.

        A run's time limit (``JobRequest.time_limit``) bounds it from above, estimates or not:
        the run is stopped at its limit and ends within its grace period."""
        if rec.state is JobState.PREEMPTING and rec.grace_deadline is not None:
            return max(0.0, rec.grace_deadline - now)
        est = None if self.estimates == "none" else \
            self.estimator.remaining_for(rec, now, oracle=self.estimates == "oracle")
        bound = limit_left(rec, now)
        if bound is None:
            return est
        return bound if est is None else min(est, bound)

    # ------------------------------------------------------------------ the reservation

    def reservation(self, head: JobRecord, now: float) -> Reservation:
        eng = self.eng
        vc = head.request.vc
        key = (eng.books.held_ver[vc], eng.books.vver[vc])
        res = self._res.get(vc)
        if (res is not None and res.head == head.job_id and res.key == key
                and (res.start is None or res.start >= now)):
            return res
        res = Reservation(head.job_id, vc, key=key, counts=head.level is None and max(head.pod_gpus) <= 1)
        chains = [head.chain] if head.chain is not None else list(eng.books.spec.chains)
        cap = max(eng.books.vc_cap[vc][c] for c in chains)
        if cap < head.gpus:
            res.never = f"VC {vc} now holds {cap} GPUs, it asks {head.gpus}"
        else:
            why = eng.books.alloc.why_never(vc, head.pod_gpus, chain=head.chain, within_level=head.level)
            if why:
                res.never = why
        if not res.never:
            best: tuple[float, int, frozenset[str]] | None = None
            for c in chains:
                got = self._chain_start(head, c, now)
                if got is not None and (best is None or got[0] < best[0]):
                    best = got
            if best is not None:
                res.start, res.extra, res.nodes = best
        self._res[vc] = res
        return res

    def _chain_start(self, head: JobRecord, chain: str, now: float) -> tuple[float, int, frozenset[str]] | None:
        """(start, extra GPUs then, reserved nodes) of the head in ``chain``. A head whose pods
        each fill a whole node counts nodes too, since GPUs free across nodes do not make a free
        node: it starts once enough nodes are free of the VC's holders, and names them."""
        got = self._ends(head, chain, now)
        if got is None:
            return None
        free, ends = got
        start = _covered(free, ends, head.gpus, now)
        if start is None:
            return None
        nodes = self._node_shadow(head, chain, now)
        named = frozenset() if nodes is None else nodes[1]
        if nodes is not None and nodes[0] > start:
            start = nodes[0]
        elif free >= head.gpus:
            return start, free - head.gpus, named     # the head's GPUs are free now
        return start, free + sum(g for t, g in ends if t <= start) - head.gpus, named

    def _node_shadow(self, head: JobRecord, chain: str, now: float) -> tuple[float, frozenset[str]] | None:
        """(time ``len(head.pod_gpus)`` nodes of ``chain`` are free of the VC's holders, those
        nodes), or None when the pods are not whole nodes or no estimate decides it. A BE
        holder the head's preemption policy may still take counts as gone after its grace."""
        books = self.eng.books
        view = books.view
        vc = head.request.vc
        size = view.node_size(chain)
        need = len(head.pod_gpus)
        if size is None or any(g != size for g in head.pod_gpus):
            return None
        if view.free_nodes(chain) >= need:
            return now, frozenset()     # nodes are free now: GPU counts (the VC's cap) decide
        te = head.request.job_class is JobClass.TE and books.preemption_policy is not None
        cap = preemption_cap(books.config, books.spec, vc) if te else 0
        marks = self.preemptible.get(vc, {})
        ends: dict[str, float] = {}
        mine: dict[str, int] = {}
        for jid in books.held[vc]:
            r = books.jobs[jid]
            if r.opportunistic or r.bound_chain != chain:
                continue
            mark = marks.get(jid)
            left: float | None
            if mark is not None and mark is r.placement:
                left = 0.0                  # the head takes these back when it can run
            elif te and r.request.job_class is JobClass.BE and r.state is JobState.RUNNING \
                    and under_cap(r.preemptions, cap):
                left = float(r.request.grace_period)    # the policy may preempt it for the head
            else:
                left = self.remaining(r, now)
            for node, (g, _c, _m) in view.usage.get(jid, {}).items():
                mine[node] = mine.get(node, 0) + g
                t = float("inf") if left is None else now + left
                ends[node] = max(ends.get(node, now), t)
        usable = [(t, n) for n, t in ends.items() if view.nodes[n].guaranteed_gpus <= mine[n]]
        if view.free_nodes(chain):       # a gang that needs more nodes than are free now
            usable += [(now, n) for n, st in view.nodes.items() if st.chain == chain and st.guaranteed_gpus == 0]
        times = sorted(usable)
        if len(times) < need or times[need - 1][0] == float("inf"):
            return None
        return times[need - 1][0], frozenset(n for _, n in times[:need])

    def _ends(self, head: JobRecord, chain: str, now: float) -> tuple[int, list[tuple[float, int]]] | None:
        """(the VC's free GPUs in ``chain`` now, (estimated end, GPUs) of each of its guaranteed
        holders there, sorted); None when a holder without an estimate could change the head's start."""
        eng = self.eng
        vc = head.request.vc
        free = eng.books.vc_cap[vc][chain] - eng.books.vc_used[vc][chain]
        marks = self.preemptible.get(vc, {})
        ends: list[tuple[float, int]] = []
        for jid in eng.books.held[vc]:
            r = eng.books.jobs[jid]
            if r.opportunistic or r.bound_chain != chain:
                continue
            mark = marks.get(jid)
            if mark is not None and mark is r.placement:
                ends.append((now, r.gpus))     # the head takes these back when it can run
                continue
            left = self.remaining(r, now)
            if left is None:
                return None
            ends.append((now + left, r.gpus))
        ends.sort()
        return free, ends

    # ------------------------------------------------------------------ later jobs

    def admit(self, res: Reservation, rec: JobRecord, now: float) -> tuple[str, str]:
        """How ``rec`` (behind ``res``'s head) may start now: ("plain" | "elsewhere" (off the
        head's reserved nodes) | "preemptible" | "", why). "" means it waits."""
        if res.never:
            return "plain", ""
        left = self.remaining(rec, now)
        if res.start is not None:
            if left is not None and now + left <= res.start:
                return "plain", ""
            if rec.gpus <= res.extra and res.counts:
                return "plain", ""
            if rec.gpus <= res.extra and res.nodes:
                return "elsewhere", ""     # on GPUs the head will not need, off its nodes
            if left is not None:
                return "", (f"backfill: it would end at {at(now + left, now)}, after the reservation of "
                            f"{res.head} at {at(res.start, now)}, and the VC has {res.extra} GPUs to spare then")
        return "preemptible", ""

    def try_start(self, rec: JobRecord, res: Reservation, now: float, out: list[Decision]) -> str:
        """Place ``rec`` on its VC's free cells if the reservation allows; "" when it started,
        else why it waits."""
        eng = self.eng
        vc = rec.request.vc
        if not rec.request.job_class.guaranteed:
            return "opportunistic jobs are not backfilled"
        if eng.books.vc_free(vc, rec.chain) < rec.gpus:
            return ""
        how, why = self.admit(res, rec, now)
        if not how:
            return why
        glob = not eng.books.isolated or not (rec.default_share and eng.books.nondefault == 0)
        ver = eng.books.gver if glob else eng.books.vver[vc]
        avoid = res.nodes if how == "elsewhere" else frozenset()
        memo = (glob, ver, avoid)
        if self._failed.get(rec.job_id) == memo:
            return ""
        eng.books.stats["attempts"] += 1
        grant = eng.try_place(rec, opportunistic=False, avoid=avoid)
        if grant is None:
            self._failed[rec.job_id] = memo
            return ""
        self._failed.pop(rec.job_id, None)
        eng.bind(rec, grant, now, out)
        if how == "preemptible":
            self.preemptible.setdefault(vc, {})[rec.job_id] = rec.placement
        elif res.start is not None and rec.gpus <= res.extra:
            left = self.remaining(rec, now)
            if left is None or now + left > res.start:
                res.extra -= rec.gpus
        eng.books.stats["backfilled"] = eng.books.stats.get("backfilled", 0) + 1
        return "backfilled"

    # ------------------------------------------------------------------ the round

    def walk(self, head: JobRecord, tried: bool, order: Iterator[str], now: float, out: list[Decision],
             done: list[str], new_head: bool) -> None:
        """The rest of a VC's queue behind the blocked ``head``, in order: start what the
        reservation allows (appended to ``done``), explain the others."""
        eng = self.eng
        vc = head.request.vc
        # nothing the walk reads changed since the last one (no release that matters to the
        # VC, no job bound in it, nothing enqueued, same head): it would decide the same
        glob = not eng.books.isolated or eng.books.nondefault > 0
        key = (head.job_id, eng.books.gver if glob else eng.books.vver[vc], eng.books.held_ver[vc], eng.books.next_key)
        if not tried and not new_head and self._walked.get(vc) == key:
            return
        if tried:
            self.reclaim(head, now, out)
        if head.request.job_class.guaranteed:
            res = self.reservation(head, now)
        else:
            res = Reservation(head.job_id, vc, never="it runs only opportunistically")
        explain = eng.books.wait_reasons
        if explain and (tried or new_head):
            head.explain_wait(_join(head.wait_reason, holds(res, now)))
        text = passing(res, now) if explain else ""
        # victims are leaving for the head (reclaimed here, or BE jobs its preemption policy
        # chose): what they free is the head's, so nothing passes it meanwhile
        leaving = bool(head.policy_victims)
        examined = 0
        free = eng.books.vc_free(vc)
        for jid in order:
            rec = eng.books.jobs[jid]
            if rec.not_before > now:
                continue        # in retry back-off (its reason says so)
            if leaving or examined >= MAX_TRIED or free <= 0:
                if not (explain and new_head):
                    break
                rec.explain_wait(text)
                continue
            examined += 1
            eng.books.relax(rec, now)
            why = self.try_start(rec, res, now, out) if rec.gpus <= free else ""
            if why == "backfilled":
                done.append(jid)
                free = eng.books.vc_free(vc)
            elif explain:
                rec.explain_wait(_join(text, why))
        books = eng.books
        self._walked[vc] = (head.job_id, books.gver if glob else books.vver[vc], books.held_ver[vc], books.next_key)
        if explain and done and head.state is JobState.QUEUED:
            # backfilled jobs now hold the VC's cells: the head's line names its holders
            head.explain_wait(_join(explain_job(eng.books, head, now), holds(res, now)))

    # ------------------------------------------------------------------ the head takes its cells back

    def reclaim(self, head: JobRecord, now: float, out: list[Decision]) -> None:
        """``head`` was tried and failed: preempt the VC's preemptible backfilled jobs (latest
        first) when they, with the VC's free GPUs, cover it."""
        vc = head.request.vc
        marks = self.preemptible.get(vc)
        if head.policy_victims or not marks or not head.request.job_class.guaranteed:
            return
        eng = self.eng
        mine: list[JobRecord] = []
        for j, placement in list(marks.items()):
            r = eng.books.jobs.get(j)
            if r is None or r.placement is not placement or r.state not in HOLDING:
                del marks[j]         # ended, preempted or started again since
            elif r.state is not JobState.PREEMPTING and not r.opportunistic:
                mine.append(r)
        if not mine:
            return
        chains = [head.chain] if head.chain is not None else list(eng.books.spec.chains)
        for c in chains:
            free = eng.books.vc_cap[vc][c] - eng.books.vc_used[vc][c]
            pick: list[JobRecord] = []
            for r in reversed(mine):          # latest backfilled first
                if free >= head.gpus:
                    break
                if r.bound_chain == c:
                    pick.append(r)
                    free += r.gpus
            if free >= head.gpus and pick:
                head.policy_victims = [r.job_id for r in pick]
                for r in pick:
                    eng.books.pwaiters.setdefault(r.job_id, set()).add(head.job_id)
                    eng.books.preempt(r, now, f"backfilled ahead of {head.job_id}, which takes its cells back", out)
                return

    def forget(self, job_id: str) -> None:
        """Drop what is kept about an ended job the engine forgets."""
        for marks in self.preemptible.values():
            marks.pop(job_id, None)
        self._failed.pop(job_id, None)
        self.estimator.forget(job_id)


def limit_left(rec: JobRecord, now: float) -> float | None:
    """Seconds until ``rec`` has surely ended by its time limit (limit, then its grace period):
    from its run's limit while it runs, from a whole limit before; None without one."""
    limit = rec.request.time_limit
    if limit is None:
        return None
    grace = float(rec.request.grace_period)
    if rec.state is JobState.RUNNING and rec.limit_at is not None:   # this run's limit (engine_control)
        return max(0.0, rec.limit_at - now) + grace
    return float(limit) + grace     # not started yet (queued, or placed waiting for its victims)


def _covered(free: int, ends: list[tuple[float, int]], need: int, now: float) -> float | None:
    """The first time ``free`` GPUs plus those of the holders ended by then (``ends``, sorted)
    reach ``need``; None when they never do."""
    if free >= need:
        return now
    for t, g in ends:
        free += g
        if free >= need:
            return t
    return None


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a and b else (a or b)


def holds(res: Reservation, now: float) -> str:
    """What the blocked head's line adds about its reservation."""
    if res.never:
        return f"it cannot fit its VC's current cells ({res.never}): later jobs of the VC start ahead of it"
    if res.start is None:
        return ("it holds a reservation on its VC's cells (end times unknown): later jobs may start "
                "ahead of it only as jobs it preempts when it can run")
    where = ""
    if res.nodes:
        names = sorted(res.nodes)
        where = f" (node{'s' if len(names) > 1 else ''} {', '.join(names[:3])}{', ...' if len(names) > 3 else ''})"
    return (f"it holds a reservation on its VC's cells{where} from {at(res.start, now)}: later jobs start ahead "
            "of it only if they end by then or use GPUs it will not need")


def passing(res: Reservation, now: float) -> str:
    """The line of a job behind a blocked head that did not start."""
    if res.never:
        return (f"behind {res.head}, which cannot fit VC {res.vc}'s current cells; "
                "it starts ahead of it once its VC's free cells fit it")
    when = f"from {at(res.start, now)}" if res.start is not None else "(end times unknown)"
    return (f"behind {res.head}, the head of VC {res.vc}'s queue, which holds a reservation {when}; "
            "backfill: it starts ahead of it once it fits its VC's free cells without delaying it")
