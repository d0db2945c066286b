"""Cell exchange between VCs: proxies, arbiter, bulletin board, ledger.

The design is §3.3 of the earlier version of the HiveD paper ("HiveD: How to
Share a GPU Cluster for Deep Learning"; docs/papers.md).

Each VC talks through its ``ExchangeProxy``: it posts offers (cells it will
lend for a time window) and requests (cells it wants for a window). The
``ExchangeArbiter`` keeps the bulletin board, runs the pluggable
``ExchangePolicy`` (balanced cell exchange, Algorithm 2, by default) and
carries out each match through the allocator:

    Allocator.transfer(lender_vc, borrower_vc, chain, level, count)

moves the *right to use* the cells, as guaranteed capacity, when the window
starts (the borrower's VC view grows, the lender's shrinks); when the
window ends the arbiter moves them back with the arguments swapped
(``give_back``). Guaranteed jobs the borrower still runs on them are handled
as reconfiguration handles them: re-bound to the same GPUs as opportunistic
(preempted later if the owner needs the cells); their owners come back in
``Exchange.downgraded`` / ``TickResult.downgraded`` for the engine to act on.

A spatial exchange is a pair of reciprocal posts (e.g. one 8-GPU cell for
eight 1-GPU cells); it moves cells both ways for the same window.

Time comes in as ``now`` (seconds); nothing here reads a clock. The caller
(engine or service) calls ``match(now)`` after posts and ``tick(now)`` as
time passes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .exchange_policy import ExchangePolicy, make_policy, overlap, qualifies
from .exchange_types import Cells, Exchange, ExchangeState, Ledger, LedgerEntry, Leg, Post, PostKind
from .timefmt import clock, window


class ReturnDelayed(RuntimeError):
    """Cells could not go back yet (a job on them still waits for its victims to leave)."""

    def __init__(self, message: str, downgraded: list[str]):
        super().__init__(message)
        self.downgraded = downgraded


class ExchangeError(ValueError):
    """A post or action was refused; ``where`` names the field."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where, self.problem = where, problem


@dataclass
class TickResult:
    started: list[Exchange] = field(default_factory=list)
    ended: list[Exchange] = field(default_factory=list)
    failed: list[Exchange] = field(default_factory=list)
    expired: list[Post] = field(default_factory=list)
    delayed: list[Exchange] = field(default_factory=list)     # window over, cells not back yet (retried)
    downgraded: list[str] = field(default_factory=list)       # owners made opportunistic in this tick


class ExchangeArbiter:
    def __init__(self, allocator: Any, spec: Any = None, policy: ExchangePolicy | str | None = None):
        self.allocator = allocator
        self.spec = spec if spec is not None else allocator.spec
        self.policy = make_policy(policy)
        self.ledger = Ledger(sorted(self.spec.vcs))
        self.offers: dict[str, Post] = {}
        self.requests: dict[str, Post] = {}
        self.exchanges: dict[str, Exchange] = {}
        self.posts_made = 0              # numbers the posts (ids, posting order)

    # --- sizes ------------------------------------------------------------
    def gpus_per_cell(self, chain: str, level: int) -> int:
        return int(self.spec.chains[chain].gpus_per_level[level - 1])

    def gpu_hours(self, cells: Cells, start: float, end: float) -> float:
        return cells.count * self.gpus_per_cell(cells.chain, cells.level) * (end - start) / 3600.0

    # --- posting ----------------------------------------------------------
    def proxy(self, vc: str) -> ExchangeProxy:
        if vc not in self.spec.vcs:
            raise ExchangeError("vc", f"unknown VC {vc!r}; known: {', '.join(sorted(self.spec.vcs))}")
        return ExchangeProxy(self, vc)

    def _cells(self, where: str, chain: str, level: int, count: int) -> Cells:
        if chain not in self.spec.chains:
            known = ", ".join(sorted(self.spec.chains))
            raise ExchangeError(f"{where}.chain", f"unknown chain {chain!r}; known: {known}")
        n_levels = len(self.spec.chains[chain].levels)
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= n_levels:
            raise ExchangeError(f"{where}.level", f"must be an integer 1..{n_levels} for chain {chain}, got {level!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ExchangeError(f"{where}.count", f"must be an integer >= 1, got {count!r}")
        return Cells(chain, level, count)

    def holding(self, vc: str, chain: str, level: int) -> int:
        """Cells of that level the VC holds now (its spec quota plus exchanges in, minus out)."""
        held = int(self.spec.vcs[vc].cells.get((chain, level), 0))
        for e in self.exchanges.values():
            if e.state is ExchangeState.ACTIVE:
                for g in e.legs:
                    if (g.cells.chain, g.cells.level) == (chain, level):
                        held += g.cells.count * ((g.borrower == vc) - (g.lender == vc))
        return held

    def committed(self, vc: str, chain: str, level: int, start: float, end: float) -> int:
        """Cells of that level already promised by ``vc`` over a window overlapping [start, end)."""
        n = 0
        for p in self.offers.values():
            if p.vc == vc and (p.cells.chain, p.cells.level) == (chain, level) and p.start < end and start < p.end:
                n += p.cells.count
        for p in self.requests.values():   # cells a spatial request pays with
            r = p.in_return
            if p.vc == vc and r and (r.chain, r.level) == (chain, level) and p.start < end and start < p.end:
                n += r.count
        for e in self.exchanges.values():
            if e.state in (ExchangeState.PENDING, ExchangeState.ACTIVE) and e.start < end and start < e.end:
                for g in e.legs:
                    if g.lender == vc and (g.cells.chain, g.cells.level) == (chain, level):
                        n += g.cells.count
        return n

    def _check_can_lend(self, where: str, vc: str, cells: Cells, start: float, end: float) -> None:
        quota = int(self.spec.vcs[vc].cells.get((cells.chain, cells.level), 0))
        free = quota - self.committed(vc, cells.chain, cells.level, start, end)
        if cells.count > free:
            raise ExchangeError(where, f"VC {vc} can lend at most {max(free, 0)} more {cells.chain} level-"
                                       f"{cells.level} cell(s) over {window(start, end)} "
                                       f"(it has {quota}, {quota - free} already promised)")

    def post(self, kind: PostKind | str, vc: str, chain: str, level: int, count: int, start: float,
             end: float, *, in_return: tuple[str, int, int] | Cells | None = None, now: float = 0.0) -> Post:
        """Put an offer or a request on the board (validated; nothing changes when refused)."""
        try:
            kind = PostKind(kind)
        except ValueError:
            raise ExchangeError("kind", f"must be 'offer' or 'request', got {kind!r}") from None
        if vc not in self.spec.vcs:
            raise ExchangeError("vc", f"unknown VC {vc!r}; known: {', '.join(sorted(self.spec.vcs))}")
        cells = self._cells(kind.value, chain, level, count)
        for name, t in (("start", start), ("end", end)):
            if isinstance(t, bool) or not isinstance(t, (int, float)) or math.isnan(t) or math.isinf(t):
                raise ExchangeError(name, f"must be a finite time in seconds, got {t!r}")
        if not start < end:
            raise ExchangeError("end", f"window must end after it starts ({clock(start)} .. {clock(end)})")
        if end <= now:
            raise ExchangeError("end", f"window {window(start, end)} is already over at {clock(now)}")
        back = None
        if in_return is not None:
            back = in_return if isinstance(in_return, Cells) else self._cells("in_return", *in_return)
            if back.chain != cells.chain:
                raise ExchangeError("in_return.chain", f"spatial exchange stays in one chain ({cells.chain})")
            g1 = cells.count * self.gpus_per_cell(cells.chain, cells.level)
            g2 = back.count * self.gpus_per_cell(back.chain, back.level)
            if g1 != g2:
                raise ExchangeError("in_return", f"a spatial exchange trades equal GPUs: {cells} is {g1} GPUs, "
                                                 f"{back} is {g2}")
            if back.level == cells.level:
                raise ExchangeError("in_return.level", "a spatial exchange trades different levels")
        if kind is PostKind.OFFER:
            self._check_can_lend("offer.count", vc, cells, start, end)
        elif back is not None:
            self._check_can_lend("in_return.count", vc, back, start, end)
        self.posts_made += 1
        post = Post(f"{kind.value[0]}{self.posts_made}", kind, vc, cells, float(start), float(end), back, now,
                    self.posts_made)
        (self.offers if kind is PostKind.OFFER else self.requests)[post.id] = post
        return post

    def resolve_cell_type(self, name: str, where: str = "cell_type") -> tuple[str, int]:
        """"CHAIN.TYPE", a chain name (its top level) or a type found in exactly one chain."""
        if not isinstance(name, str) or not name:
            raise ExchangeError(where, f"must be a cell type name, got {name!r}")
        chain, _, rest = name.partition(".")
        if rest and chain in self.spec.chains:
            try:
                return chain, self.spec.chains[chain].level_of(rest)
            except KeyError as e:
                raise ExchangeError(where, str(e).strip('"')) from None
        if name in self.spec.chains:
            return name, len(self.spec.chains[name].levels)
        hits = [(c, ch.levels.index(name) + 1) for c, ch in self.spec.chains.items() if name in ch.levels]
        if len(hits) == 1:
            return hits[0]
        if not hits:
            raise ExchangeError(where, f"unknown cell type {name!r}; chains: {', '.join(sorted(self.spec.chains))}")
        raise ExchangeError(where, f"cell type {name!r} is in chains {', '.join(c for c, _ in hits)}; "
                                   f"write CHAIN.{name}")

    def post_payload(self, kind: PostKind | str, payload: dict[str, Any], now: float) -> Post:
        """A post from the REST body ``{vc, cell_type, count, duration, start?, in_return?}``.

        ``start`` is seconds from ``now`` (default 0), ``duration`` the
        window's length in seconds; ``in_return`` = ``{cell_type, count}``.
        """
        if not isinstance(payload, dict):
            raise ExchangeError("body", "must be an object")
        for key in ("vc", "cell_type", "count", "duration"):
            if key not in payload:
                raise ExchangeError(key, "is required")
        chain, level = self.resolve_cell_type(payload["cell_type"])
        start = payload.get("start", 0.0)
        dur = payload["duration"]
        for key, val in (("start", start), ("duration", dur)):
            if isinstance(val, bool) or not isinstance(val, (int, float)) or val < 0 or math.isnan(val):
                raise ExchangeError(key, f"must be a number of seconds >= 0, got {val!r}")
        back = payload.get("in_return")
        if back is not None:
            if not isinstance(back, dict) or "cell_type" not in back or "count" not in back:
                raise ExchangeError("in_return", "must be {cell_type, count}")
            bc, bl = self.resolve_cell_type(back["cell_type"], "in_return.cell_type")
            back = self._cells("in_return", bc, bl, back["count"])
        return self.post(kind, payload["vc"], chain, level, payload["count"], now + start, now + start + dur,
                         in_return=back, now=now)

    def withdraw(self, post_id: str, vc: str) -> Post:
        for table in (self.offers, self.requests):
            p = table.get(post_id)
            if p is not None:
                if p.vc != vc:
                    raise ExchangeError("post", f"{post_id} belongs to VC {p.vc}, not {vc}")
                return table.pop(post_id)
        raise ExchangeError("post", f"no open post {post_id!r} (matched, withdrawn or expired)")

    def board(self) -> dict[str, list[dict[str, object]]]:
        return {"offers": [p.to_dict() for p in sorted(self.offers.values(), key=lambda p: p.seq)],
                "requests": [p.to_dict() for p in sorted(self.requests.values(), key=lambda p: p.seq)]}

    # --- matching and windows ---------------------------------------------
    def match(self, now: float, start: bool = True) -> list[Exchange]:
        """Run the policy over the board; matched exchanges whose window has begun start at once
        (``start=False``: only match, as a dry run does; nothing is moved)."""
        self._expire(now)
        pairs = self.policy.match(sorted(self.requests.values(), key=lambda p: p.seq),
                                  sorted(self.offers.values(), key=lambda p: p.seq), self.ledger,
                                  lambda r, o: self.gpu_hours(r.cells, *overlap(r, o)))
        made = []
        for r, o in pairs:
            if r.id not in self.requests or o.id not in self.offers or not qualifies(r, o) \
                    or self.offers[o.id].cells.count < r.cells.count:
                raise RuntimeError(f"exchange policy {self.policy.name} returned an invalid pair ({r.id}, {o.id})")
            del self.requests[r.id]
            rest = o.cells.count - r.cells.count
            if rest:
                o.cells = Cells(o.cells.chain, o.cells.level, rest)
            else:
                del self.offers[o.id]
            legs = [Leg(o.vc, r.vc, r.cells)]
            if r.in_return is not None:
                legs.append(Leg(r.vc, o.vc, r.in_return))
            w_start, w_end = overlap(r, o)
            ex = Exchange(f"x{len(self.exchanges) + 1}", r.id, o.id, legs, w_start, w_end)
            for g in legs:
                gh = self.gpu_hours(g.cells, w_start, w_end)
                ex.gpu_hours[g.lender] = ex.gpu_hours.get(g.lender, 0.0) + gh
                self.ledger.record(g.lender, g.borrower, gh)
            self.exchanges[ex.id] = ex
            made.append(ex)
        if start:
            self.tick(now)
        return made

    def tick(self, now: float) -> TickResult:
        """Start exchanges whose window began, return those whose window ended."""
        res = TickResult(expired=self._expire(now))
        for ex in sorted(self.exchanges.values(), key=lambda e: (e.start, e.id)):
            if ex.state is ExchangeState.PENDING and ex.start <= now:
                if ex.end <= now:   # whole window passed between ticks: never moved
                    self._fail(ex, f"window {window(ex.start, ex.end)} passed before the arbiter ran")
                    res.failed.append(ex)
                elif self._start(ex):
                    res.started.append(ex)
                else:
                    res.failed.append(ex)
        for ex in sorted(self.exchanges.values(), key=lambda e: (e.end, e.id)):
            if ex.state is ExchangeState.ACTIVE and ex.end <= now:
                legs = [(i, g) for i, g in reversed(list(enumerate(ex.legs))) if i not in ex.returned_legs]
                try:
                    for i, g in legs:
                        down = give_back(self.allocator, g.borrower, g.lender, g.cells)
                        ex.downgraded.extend(down)
                        res.downgraded.extend(down)
                        ex.returned_legs.add(i)
                except ReturnDelayed as e:   # stays active; the next tick tries again
                    ex.downgraded.extend(e.downgraded)
                    res.downgraded.extend(e.downgraded)
                    ex.reason = f"return delayed: {e}"
                    res.delayed.append(ex)
                    continue
                ex.state, ex.reason = ExchangeState.RETURNED, ""
                res.ended.append(ex)
        return res

    def _start(self, ex: Exchange) -> bool:
        done: list[Leg] = []
        try:
            for g in ex.legs:
                self.allocator.transfer(g.lender, g.borrower, g.cells.chain, g.cells.level, g.cells.count)
                done.append(g)
        except Exception as e:  # the allocator says this move would break sharing safety
            for g in reversed(done):
                self.allocator.transfer(g.borrower, g.lender, g.cells.chain, g.cells.level, g.cells.count)
            self._fail(ex, f"allocator refused: {e}")
            return False
        ex.state = ExchangeState.ACTIVE
        return True

    def _fail(self, ex: Exchange, reason: str) -> None:
        ex.state, ex.reason = ExchangeState.FAILED, reason
        for g in ex.legs:   # undo the GPU-hours booked at match time
            gh = self.gpu_hours(g.cells, ex.start, ex.end)
            self.ledger.entry(g.lender).contributed -= gh
            self.ledger.entry(g.borrower).consumed -= gh

    def _expire(self, now: float) -> list[Post]:
        gone = [p for t in (self.offers, self.requests) for p in t.values() if p.end <= now]
        for p in gone:
            (self.offers if p.kind is PostKind.OFFER else self.requests).pop(p.id)
        return gone

    def ledger_view(self) -> dict[str, dict[str, float]]:
        return self.ledger.to_dict()


def give_back(allocator: Any, holder: str, owner: str, cells: Cells) -> list[str]:
    """Move ``cells`` from ``holder`` back to ``owner`` at the end of a window.

    When the holder still runs guaranteed jobs on them, they are handled as
    reconfiguration handles jobs that no longer fit (HiveD, OSDI '20, §4): downgraded
    to opportunistic on the same GPUs (so nothing is killed now; the owner's
    guaranteed jobs preempt them when they need the cells). Victims go one
    bound cell at a time, the least used first, so as few jobs as possible
    lose their guarantee. Returns the downgraded owners.
    """
    args = (cells.chain, cells.level, cells.count)
    try:
        return list(allocator.transfer(holder, owner, *args) or [])
    except ValueError as refused:
        first = refused
    tree = getattr(allocator, "tree", None)
    if tree is None:        # not a cell allocator: nothing we can downgrade
        raise first
    grants = [g for g in allocator.grants().values()
              if g.vc == holder and not g.opportunistic and g.chain == cells.chain]
    bound = [b for b in allocator.vc_view(holder).bound_cells
             if (b["chain"], b["level"]) == (cells.chain, cells.level) and b["gpus_used"] > 0]
    out: list[str] = []
    for b in sorted(bound, key=lambda b: (b["gpus_used"], b["cell"])):
        inside = [g for g in grants if g.owner not in out and any(
            b["cell"] in {a.id for a in [tree.by_id[c], *tree.by_id[c].ancestors()]} for c in g.cells)]
        for g in sorted(inside, key=lambda g: (g.priority, g.owner)):
            data = g.to_dict()
            allocator.release(g.owner)
            try:
                allocator.restore(data, force_opportunistic=True)
            except ValueError:   # its GPUs still hold an opportunistic victim: keep it guaranteed for now
                allocator.restore(data)
                continue
            allocator.grant_of(g.owner).downgraded = True
            out.append(g.owner)
        try:
            allocator.transfer(holder, owner, *args)
            return out
        except ValueError:
            continue
    raise ReturnDelayed(f"cannot return {cells} from VC {holder} to VC {owner} even after downgrading "
                        f"{len(out)} job(s): {first}", out)


class ExchangeProxy:
    """One VC's door to the arbiter (what the REST handlers and the CLI use per VC)."""

    def __init__(self, arbiter: ExchangeArbiter, vc: str):
        self.arbiter, self.vc = arbiter, vc

    def offer(self, chain: str, level: int, count: int, start: float, end: float, *,
              wants: tuple[str, int, int] | None = None, now: float = 0.0) -> Post:
        return self.arbiter.post(PostKind.OFFER, self.vc, chain, level, count, start, end, in_return=wants, now=now)

    def request(self, chain: str, level: int, count: int, start: float, end: float, *,
                gives: tuple[str, int, int] | None = None, now: float = 0.0) -> Post:
        return self.arbiter.post(PostKind.REQUEST, self.vc, chain, level, count, start, end, in_return=gives, now=now)

    def withdraw(self, post_id: str) -> Post:
        return self.arbiter.withdraw(post_id, self.vc)

    def board(self) -> dict[str, list[dict[str, object]]]:
        return self.arbiter.board()

    def exchanges(self) -> list[Exchange]:
        return [e for e in self.arbiter.exchanges.values() if any(self.vc in (g.lender, g.borrower) for g in e.legs)]

    def account(self) -> LedgerEntry:
        return self.arbiter.ledger.entry(self.vc)


__all__ = ["Cells", "Exchange", "ExchangeArbiter", "ExchangeError", "ExchangeProxy", "ExchangeState",
           "Ledger", "Post", "PostKind", "TickResult", "give_back"]
