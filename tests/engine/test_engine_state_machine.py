"""The engine under random event sequences, checked by an oracle of its own.

A hypothesis state machine drives one Engine (HiveD's allocator, FitGpp)
with submit, step, finish, fail, cancel, preempt-confirm, health,
reconfigure and exchange events, acting as the launcher does on the
decisions it gets back. The oracle keeps its own books from those decisions
(which job was told to start where, which it has seen leave) and its own
picture of each VC (quota in node cells, nodes holding its guaranteed work,
the free aligned GPU blocks inside them), and checks after every event:

* no GPU is held by two jobs that were started and not yet seen leaving;
* a node holds guaranteed work of one VC at most (node-level VC cells);
* every guaranteed job at the head of its VC's queue that fits its VC's free
  cells (by the oracle's count, not the engine's) is placed in that round;
* every job ends at most once, and once ended stays ended;
* at the end the cluster is drained (all exchanges given back, every node
  healthy, every run finished): no job is left in a non-terminal state.

CI runs a short budget; ``make soak`` runs a long one
(``HIVED_SOAK_EXAMPLES`` examples, default 60 here).
"""
import os
from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from hived.core.engine import Engine, EngineConfig, RequestError
from hived.core.engine_records import JobRecord
from hived.core.jobs import HOLDING, DecisionKind, JobClass, JobRequest, JobState, PodGroup
from hived.core.sim.cluster import node_spec

NODES = ["n0000", "n0001", "n0002", "n0003"]
SPECS = [{"A": 16, "B": 8, "C": 8}, {"A": 8, "B": 16, "C": 8}]   # reconfigure swaps between these
USERS = {"A": "ua", "B": "ub", "C": "uc"}
TERMINAL = {"succeeded", "failed", "cancelled"}
# (pods, GPUs per pod): every shape fits one 8-GPU node, so fits every VC of both specs
SHAPES = [(1, 1), (1, 2), (1, 3), (1, 4), (1, 8), (1, 8), (2, 1), (4, 1), (2, 4), (2, 4), (2, 2)]


def spec_dict(k: int) -> dict:
    d = node_spec(len(NODES), SPECS[k])
    for vc, user in USERS.items():
        d["virtualClusters"][vc]["users"] = [user]
    return d


def block(gpus: int) -> int:
    """The aligned block (buddy cell) a pod of ``gpus`` takes: 1, 2, 4 or 8."""
    return next(b for b in (1, 2, 4, 8) if b >= gpus)


def free_blocks(used: set, size: int) -> int:
    return sum(1 for s in range(0, 8, size) if not any(g in used for g in range(s, s + size)))


class EngineMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.k = 0
        self.eng = Engine(spec_dict(0), preemption_policy="fitgpp", config=EngineConfig(soft_wait=60.0))
        self.quota = {vc: g // 8 for vc, g in SPECS[0].items()}  # node cells per VC (oracle's own)
        self.now = 0.0
        self.n = 0
        self.live: dict = {}         # job -> {(node, gpu)} from its START, until we see it leave
        self.stopping: set = set()   # told to stop (PREEMPT/KILL), not yet confirmed gone
        self.ended: dict = {}        # job -> terminal state, once seen
        self.unhealthy: set = set()
        self.loans: list = []        # (lender, borrower) node cells lent by an exchange

    # ------------------------------------------------------------ acting as the launcher

    def act(self, decisions) -> None:
        for d in decisions:
            if d.kind is DecisionKind.START:
                gpus = {(p.node, g) for p in d.placement.pods for g in p.gpus}
                assert d.job_id not in self.live, f"{d.job_id} started twice"
                assert len(gpus) == d.placement.gpu_count == self.eng.job(d.job_id).gpus, \
                    f"{d.job_id} got {len(gpus)} GPUs, asked {self.eng.job(d.job_id).gpus}"
                self.live[d.job_id] = gpus
                self.eng.on_started(d.job_id, self.now)
            elif d.kind in (DecisionKind.PREEMPT, DecisionKind.KILL):
                self.stopping.add(d.job_id)

    def gone(self, jid: str) -> None:
        self.live.pop(jid, None)
        self.stopping.discard(jid)

    def _state(self, jid):
        return self.eng.job(jid).state

    # ------------------------------------------------------------ events

    @rule(vc=st.sampled_from("ABC"), shape=st.sampled_from(SHAPES),
          cls=st.sampled_from([JobClass.TE, JobClass.BE, JobClass.BE, JobClass.OPPORTUNISTIC]),
          opp=st.booleans(), grace=st.sampled_from([0.0, 30.0]), retries=st.sampled_from([None, 0, 1]),
          copies=st.integers(1, 4), second_user=st.booleans())
    def submit(self, vc, shape, cls, opp, grace, retries, copies, second_user=False):
        pods, g = shape
        user = USERS[vc] + ("-2" if second_user else "")     # two users per VC: per-user queue counts
        r = JobRequest(user=user, vc=vc, job_class=cls, groups=[PodGroup(pods, g)],
                       allow_opportunistic=opp, grace_period=grace, max_retries=retries)
        for _ in range(copies):
            self.n += 1
            try:
                self.eng.submit(r, self.now, job_id=f"j{self.n}")
            except RequestError:
                pass

    @rule(vc=st.sampled_from("ABC"), cls=st.sampled_from([JobClass.TE, JobClass.BE]), copies=st.integers(1, 4))
    def submit_node_jobs(self, vc, cls, copies):
        """Whole-node jobs in bursts: queues form (hypothesis draws rules alike)."""
        self.submit(vc, (1, 8), cls, False, 0.0, None, copies)

    @rule(dt=st.sampled_from([0.0, 1.0, 31.0, 200.0]))
    def step(self, dt):
        self.now += dt
        self.act(self.eng.step(self.now))
        self.check_heads()

    @precondition(lambda self: any(self._state(j) is JobState.RUNNING for j in self.live))
    @rule(data=st.data(), code=st.sampled_from([0, 0, 1, 3, 137]),
          tail=st.sampled_from(["", "NCCL error: unhandled system error", "SyntaxError: bad"]))
    def finish(self, data, code, tail):
        jid = data.draw(st.sampled_from(sorted(j for j in self.live if self._state(j) is JobState.RUNNING)))
        self.gone(jid)
        self.eng.on_finished(jid, self.now, code, tail)

    @precondition(lambda self: bool(self.stopping))
    @rule(data=st.data())
    def preempt_confirm(self, data):
        jid = data.draw(st.sampled_from(sorted(self.stopping)))
        self.gone(jid)
        if self._state(jid) in HOLDING:
            self.eng.on_preempted(jid, self.now)

    @precondition(lambda self: any(not r.state.terminal for r in self.eng.jobs()))
    @rule(data=st.data())
    def cancel(self, data):
        heads = [q[0] for q in (self.eng.queue(vc) for vc in "ABC") if q]
        if heads and data.draw(st.booleans()):   # a blocked head most often: what frees a queue
            rec = self.eng.job(data.draw(st.sampled_from(heads)))
        else:
            rec = data.draw(st.sampled_from(sorted((r for r in self.eng.jobs() if not r.state.terminal),
                                                   key=lambda r: r.job_id)))
        self.act(self.eng.cancel(rec.job_id, self.now, rec.request.user))
        if data.draw(st.booleans()):   # the next round at once, nothing else between
            self.step(0.0)

    @rule(node=st.sampled_from(NODES))
    def health(self, node):
        """A node fails, or (when one is down) the failed node comes back."""
        healthy = bool(self.unhealthy)
        if healthy:
            node = sorted(self.unhealthy)[0]
            self.unhealthy.discard(node)
        else:
            self.unhealthy.add(node)
        self.act(self.eng.set_health(node, None, healthy, self.now))

    @rule()
    def reconfigure(self):
        """The service's reload: a new engine on the other spec, every job restored into it;
        refused (the old engine kept) when a binding does not fit the new spec."""
        if self.loans or self.unhealthy:
            return
        k = 1 - self.k
        new = Engine(spec_dict(k), preemption_policy="fitgpp", config=EngineConfig(soft_wait=60.0))
        recs = self.eng.restore_order()
        try:
            for rec in recs:
                new.restore(JobRecord.from_dict(rec.to_dict()))
        except Exception:
            return
        self.eng, self.k = new, k
        self.quota = {vc: g // 8 for vc, g in SPECS[k].items()}

    @rule(lender=st.sampled_from("ABC"), borrower=st.sampled_from("ABC"))
    def exchange(self, lender, borrower):
        if lender == borrower or self.unhealthy:
            return
        try:
            self.eng.alloc.transfer(lender, borrower, "NODE", 4, 1)
        except ValueError:
            return
        self.loans.append((lender, borrower))
        self.quota[lender] -= 1
        self.quota[borrower] += 1
        self.eng.on_capacity_changed([lender, borrower], [], self.now)

    @precondition(lambda self: bool(self.loans))
    @rule()
    def give_back(self):
        lender, borrower = self.loans[-1]
        try:
            self.eng.alloc.transfer(borrower, lender, "NODE", 4, 1)
        except ValueError:
            return   # the borrower still uses it: given back later
        self.loans.pop()
        self.quota[lender] += 1
        self.quota[borrower] -= 1
        self.eng.on_capacity_changed([lender, borrower], [], self.now)

    # ------------------------------------------------------------ the oracle

    def guaranteed_use(self) -> dict:
        """node -> (VC, GPUs under guaranteed pods) from the jobs holding cells."""
        out: dict = {}
        for rec in self.eng.jobs():
            if rec.state in (JobState.PLACED, JobState.RUNNING, JobState.PREEMPTING) and rec.placement \
                    and not rec.placement.opportunistic:
                for p in rec.placement.pods:
                    vc, used = out.setdefault(p.node, (rec.request.vc, set()))
                    assert vc == rec.request.vc, f"node {p.node} holds guaranteed work of {vc} and {rec.request.vc}"
                    b = block(len(p.gpus))      # a pod holds the whole buddy cell (3 GPUs: a 4-GPU cell)
                    start = min(p.gpus) // b * b
                    used.update(range(start, start + b))
        return out

    def fits(self, rec, use: dict) -> bool:
        vc = rec.request.vc
        bound = {n: used for n, (v, used) in use.items() if v == vc}
        if self.quota[vc] - len(bound) > 0:
            return True        # an unbound node cell of the VC: a whole node
        sizes = list(rec.pod_gpus)
        if len(sizes) == 1:
            return any(free_blocks(u, block(sizes[0])) for u in bound.values())
        if rec.want_level is not None:   # the whole gang inside one cell of the wanted level
            return any(free_blocks(u, block(sum(sizes))) for u in bound.values())
        return False

    def check_heads(self) -> None:
        if self.unhealthy:
            return   # bad hardware may leave a VC's cells without a physical home
        use = self.guaranteed_use()
        for vc in "ABC":
            head = next((j for j in self.eng.queue(vc) if self.eng.job(j).not_before <= self.now), None)
            if head is None:
                continue
            rec = self.eng.job(head)
            if rec.request.job_class.guaranteed and self.fits(rec, use):
                raise AssertionError(f"{head} ({rec.pod_gpus} GPUs) heads VC {vc}'s queue and fits its free "
                                     f"cells (quota {self.quota[vc]} nodes, use {use}) but is still queued: "
                                     f"{rec.wait_reason}")

    @invariant()
    def no_gpu_held_twice(self):
        seen: dict = {}
        for jid, gpus in self.live.items():
            for gpu in gpus:
                assert gpu not in seen, f"GPU {gpu} held by {seen[gpu]} and {jid}"
                seen[gpu] = jid
        self.guaranteed_use()

    @invariant()
    def ends_once(self):
        for rec in self.eng.jobs():
            ends = [h for h in rec.history if h[1] in TERMINAL]
            assert len(ends) <= 1, f"{rec.job_id} ended {len(ends)} times: {ends}"
            if rec.job_id in self.ended:
                assert rec.state.value == self.ended[rec.job_id], f"{rec.job_id} left its end state"
            elif rec.state.terminal:
                assert rec.job_id not in self.live, f"{rec.job_id} ended while still running"
                self.ended[rec.job_id] = rec.state.value
                assert rec.wait_reason == ""

    @invariant()
    def queued_counts_are_the_queue(self):
        """Admission's O(1) counts (``queued_count``) agree with the jobs' states after every step."""
        want: Counter = Counter()
        for rec in self.eng.jobs():
            if rec.state is JobState.QUEUED:
                want[rec.request.vc, rec.request.user] += 1
                want[rec.request.vc, None] += 1
        for vc in "ABC":
            for user in (None, USERS[vc], USERS[vc] + "-2"):
                assert self.eng.queued_count(vc, user) == want[vc, user], (vc, user, dict(want))

    @invariant()
    def waiting_jobs_say_why(self):
        for rec in self.eng.jobs():
            if rec.state is JobState.QUEUED:
                assert rec.wait_reason, f"{rec.job_id} queued with no reason"

    def teardown(self):
        """Drain: give every loan back, heal every node, finish every run; nothing may stay."""
        for node in sorted(self.unhealthy):
            self.unhealthy.discard(node)
            self.act(self.eng.set_health(node, None, True, self.now))
        for _ in range(400):
            while self.loans:
                lender, borrower = self.loans[-1]
                try:
                    self.give_back()
                except ValueError:
                    break
                if self.loans and self.loans[-1] == (lender, borrower):
                    break
            for jid in sorted(self.stopping):
                self.gone(jid)
                if self._state(jid) in HOLDING:
                    self.eng.on_preempted(jid, self.now)
            for jid in sorted(self.live):
                if self._state(jid) is JobState.RUNNING:
                    self.gone(jid)
                    self.eng.on_finished(jid, self.now, 0)
            if all(r.state.terminal for r in self.eng.jobs()) and not self.loans:
                return
            self.now += 400.0
            self.act(self.eng.step(self.now))
        stuck = [(r.job_id, r.state.value, r.wait_reason) for r in self.eng.jobs() if not r.state.terminal]
        raise AssertionError(f"jobs left after the cluster drained: {stuck[:5]} (loans {self.loans})")


EngineMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("HIVED_SOAK_EXAMPLES", "60")), stateful_step_count=50, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
test_engine_state_machine = EngineMachine.TestCase
