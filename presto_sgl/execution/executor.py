"""The executor: a stage's K transitions as rounds of plan -> one engine call -> walk.

It knows nothing of a kernel's arithmetic or of a rule: the planner picks decisions
(with their cuts), the kernel names the draws each needs and decides, the walker takes
the MH path. Sequential execution is the same loop with one decision per call
(docs/design.md §3).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, replace

from ..chain.keys import ChainKeys, DecisionDraws, DecisionId, Keying
from ..chain.metrics import CallRecord, NodeRecord, RequestRecord
from ..chain.state import ChainState
from ..constraints import Constraint
from ..engines.base import Completion, Engine, Request, check_lengths, check_values, validate_completion
from ..errors import EngineError
from ..kernels.base import Kernel, Proposal, SuffixDraw, Transition
from ..kernels.proposals import ProposalStore, StoredProposal
from ..planners import PlannedRequest, Planner, RoundContext, RoundFeedback
from .context import ALONE, RunContext
from .offers import Offer
from .walker import Step, walk

OnTransition = Callable[[int, int, ChainState, Transition], None]
"""Called after every transition with (stage, k, new state, transition)."""


class Recorder:
    """Runs model calls (timed, validated) and keeps the call and node records of one run, in
    its ``context``: the guard runs before each call the chain makes on its engine; with a lane,
    the calls go to a shared scheduler's rounds (:mod:`presto_sgl.scheduling.scheduler`), which
    runs the lane's check."""

    def __init__(self, engine: Engine, context: RunContext = ALONE) -> None:
        self.engine = engine
        self.trace = context.trace
        self.lane = context.lane
        self.guard = context.guard
        self.calls: list[CallRecord] = []
        self.nodes: list[NodeRecord] = []

    def sharing(self) -> bool:
        """Whether this chain's next call is a shared scheduler's (its lane says the scheduler
        weighs the chains' offers now); else the chain calls its engine alone."""
        return self.lane is not None and self.lane.sharing()

    def call(self, requests: Sequence[Request]) -> tuple[list[Completion], float]:
        """One model call of every request (in a scheduled chain that shares: in the scheduler's next round)."""
        if not requests:
            return [], 0.0
        _, completions, elapsed = self.submit(Offer((tuple(requests),)), shared=self.sharing())
        return completions, elapsed

    def submit(self, offer: Offer, *, shared: bool, lengths_only: bool = False) -> tuple[int, list[Completion], float]:
        """(groups sent, their completions, call seconds): with ``shared`` the offer goes to the
        chain's scheduler, which picks the groups; otherwise every group is sent on the chain's own
        engine. The completions are checked whole; with ``lengths_only`` only their lengths (the
        caller checks the values of those it uses: :meth:`check`)."""
        t0 = time.perf_counter()
        if not shared or self.lane is None:
            if self.guard is not None:
                self.guard()
            taken = len(offer.groups)
            requests = [r for g in offer.groups for r in g]
            completions = self.engine.generate(requests)
            elapsed = time.perf_counter() - t0
        else:
            taken, completions, elapsed = self.lane.submit(offer)
            requests = [r for g in offer.groups[:taken] for r in g]
        if len(completions) != len(requests):
            raise EngineError(f"engine returned {len(completions)} results for {len(requests)} requests")
        vocab = self.engine.capabilities.vocab_size
        for req, comp in zip(requests, completions):
            if lengths_only:
                check_lengths(req, comp)
            else:
                validate_completion(req, comp, vocab)
        return taken, completions, elapsed

    def check(self, proposal: Proposal) -> None:
        """The value check of an engine's output, on a draw that is about to be used."""
        check_values(proposal, self.engine.capabilities.vocab_size)

    def record_call(self, record: CallRecord) -> None:
        self.calls.append(record)
        if self.trace:
            self.trace.call(record)

    def record_node(self, record: NodeRecord) -> None:
        self.nodes.append(record)
        if self.trace:
            self.trace.node(record)

    def record_state(self, stage: int, k: int, path: str, state: ChainState) -> None:
        """A boundary the chain reached (after an extension or a round): where resume starts."""
        if self.trace:
            self.trace.state(stage, k, path, state)


class StageExecutor:
    """The K transitions of one stage: rounds of plan -> one engine call -> walk."""

    def __init__(
        self,
        kernel: Kernel,
        horizon: int,
        steps: int,
        *,
        budget: int,
        keying: Keying,
        planner: Planner,
        stage: int,
        keys: ChainKeys,
        rec: Recorder,
        on_transition: OnTransition | None,
        stop: tuple[int, ...] = (),
        constraint: Constraint | None = None,
    ) -> None:
        self.kernel, self.steps, self.planner = kernel, steps, planner
        self.budget, self.keying = budget, keying  # PrestoConfig's: requests per call, the keys
        self.stage, self.keys, self.rec, self.on_transition = stage, keys, rec, on_transition
        self.stop = stop  # the EOS-terminated target's stop tokens: every draw ends at the first
        self.constraint = constraint  # every draw from q_tau masked by C, resumed after its kept prefix
        self.horizon = horizon  # H = stage * B: a draw at cut c has at most H - c tokens
        self.store = ProposalStore(check=rec.check)
        self._draws: dict[DecisionId, DecisionDraws] = {}

    def draws(self, decision: DecisionId) -> DecisionDraws:
        if decision not in self._draws:
            self._draws[decision] = self.keys.decision(self.stage, decision)
        return self._draws[decision]

    def run(self, state: ChainState, path: str = "", k: int = 0) -> ChainState:
        """The stage's transitions from ``k`` done (walk path ``path``) to K."""
        while k < self.steps:
            state, path, k = self.round(state, path, k)
            self.rec.record_state(self.stage, k, path, state)
        return state

    def round(self, state: ChainState, path: str, k: int) -> tuple[ChainState, str, int]:
        """One round from root ``state``: plan, send the planned draws in one call, store them,
        walk the MH path through them, record; returns the walk's (state, path, k)."""
        t0 = time.perf_counter()
        remaining = self.steps - k
        ctx = RoundContext(
            root=state,
            root_path=path,
            k0=k,
            remaining=remaining,
            budget=self.budget,
            draws=self.draws,
            store=self.store,
            kernel=self.kernel,
            keying=self.keying,
            horizon=self.horizon,
        )
        batch = self.plan(ctx)
        plan_s = time.perf_counter() - t0
        batch, completions, elapsed = self.send(batch)
        t1 = time.perf_counter()
        index = len(self.rec.calls)
        self.fill(state, batch, completions, index)
        result = walk(
            state,
            path,
            k,
            remaining,
            kernel=self.kernel,
            decision_of=ctx.decision,
            draws=self.draws,
            store=self.store,
        )
        walk_s = time.perf_counter() - t1
        if not result.steps:
            raise RuntimeError(f"planner {type(self.planner).__name__} made no progress at stage {self.stage}, k={k}")
        self.record(state.length, k, index, batch, completions, result.steps, (elapsed, plan_s, walk_s))
        k += len(result.steps)
        if self.planner.carries_over:
            self.store.discard_before(k)
        else:
            self.store.clear()
        return result.state, result.path, k

    def plan(self, ctx: RoundContext) -> Batch:
        """The planner's requests (in a scheduled chain whose round is shared: its offer) as
        engine requests, one group of draws per planned decision."""
        shared = self.rec.sharing()  # decided once per round: the offer and the call agree
        offer = self.planner.offer(ctx) if shared else None
        planned = offer.batch if offer is not None else self.planner.plan(ctx)
        H, root = self.horizon, ctx.root
        groups = [self.kernel.suffix_draws(p.cut, H, self.draws(p.decision)) for p in planned]
        rows = [
            tuple(
                Request(
                    root.context(p.cut),
                    H - p.cut,
                    d.temperature,
                    d.seed,
                    return_entropy=d.entropy,
                    score_temperatures=d.score_temperatures,
                    route=self.keys.route,
                    stop=self.stop,
                    constraint=self.constraint,
                    resume=p.cut,
                )
                for d in group
            )
            for p, group in zip(planned, groups)
        ]
        if offer is None:
            return Batch(planned, groups, rows)
        return Batch(planned, groups, rows, offer.values, preferred=offer.preferred, shared=True)

    def send(self, batch: Batch) -> tuple[Batch, list[Completion], float]:
        """One engine call (a scheduler may take a prefix of the groups): the batch sent, its
        completions (lengths checked; values when used) and the call's seconds."""
        if not batch.rows:
            return batch, [], 0.0
        offer = Offer(tuple(batch.rows), batch.values, batch.preferred)
        taken, completions, elapsed = self.rec.submit(offer, shared=batch.shared, lengths_only=True)
        return batch.prefix(taken), completions, elapsed

    def fill(self, root: ChainState, batch: Batch, completions: Sequence[Completion], index: int) -> None:
        """Store each decision's scored draws under the prefix it kept (call ``index``)."""
        j = 0
        for p, group in zip(batch.planned, batch.groups):
            n = len(group)
            proposals = tuple(
                Proposal(p.cut, c.tokens, c.logq, c.logp, entropy=c.entropy, logq_at=c.logq_at)
                for c in completions[j : j + n]
            )
            self.store.add(
                p.decision, StoredProposal(root.tokens[: p.cut], proposals, tuple((index, j + i) for i in range(n)))
            )
            j += n

    def record(
        self,
        T: int,
        k: int,
        index: int,
        batch: Batch,
        completions: Sequence[Completion],
        steps: Sequence[Step],
        seconds: tuple[float, float, float],
    ) -> None:
        """The call record, a node record per transition walked (and ``on_transition``), and the
        planner's feedback. ``T``: the root's length; ``seconds``: (call, plan, walk)."""
        rec, requests = self.rec, batch.requests
        elapsed, plan_s, walk_s = seconds
        records = [
            RequestRecord(
                p.decision,
                p.cut,
                len(r.prefix),
                len(c.tokens),
                cached_tokens=c.cached_tokens,
                reachable=p.reachable,
                temperature=r.temperature,
                seed=r.seed,
            )
            for p, r, c in zip(_per_request(batch.planned, batch.groups), requests, completions)
        ]
        rec.record_call(
            CallRecord(
                index, self.stage, "mh", k, requests=tuple(records), time_s=elapsed, plan_s=plan_s, walk_s=walk_s
            )
        )
        self.record_nodes(T, k, index, steps)
        self.planner.observe(
            RoundFeedback(
                T,
                tuple((s.transition.cut, s.transition.log_accept) for s in steps),
                tuple((len(r.prefix), len(c.tokens)) for r, c in zip(requests, completions)),
                elapsed,
                timed=not batch.shared,
            )
        )

    def record_nodes(self, T: int, k: int, index: int, steps: Sequence[Step]) -> None:
        """A node record per transition walked (call ``index``, from ``k``), and ``on_transition``."""
        length = T  # the length of the state each decision was taken at (it varies under ending="eos")
        for i, step in enumerate(steps):
            tr = step.transition
            self.rec.record_node(
                NodeRecord(
                    call=index,
                    stage=self.stage,
                    k=k + i,
                    decision=step.decision,
                    request=step.requests[0],
                    cut=tr.cut,
                    log_accept=tr.log_accept,
                    uniform=tr.uniform,
                    accepted=tr.accepted,
                    length=length,
                    draws=len(step.requests),
                    selected=tr.selected,
                )
            )
            length = step.state.length
            if self.on_transition:
                self.on_transition(self.stage, k + i, step.state, tr)


@dataclass(frozen=True)
class Batch:
    """A round's planned draws: per planned decision its draws (``groups``) and their engine
    requests (``rows``), with a scheduled offer's predicted values and preferred size."""

    planned: list[PlannedRequest]
    groups: list[tuple[SuffixDraw, ...]]
    rows: list[tuple[Request, ...]]
    values: tuple[float, ...] | None = None
    _: KW_ONLY
    preferred: int | None = None
    shared: bool = False  # sent through a shared scheduler that weighs it (it fits the time model)

    @property
    def requests(self) -> list[Request]:
        return [r for g in self.rows for r in g]

    def prefix(self, n: int) -> Batch:
        """The first ``n`` decisions' groups (what a scheduler took)."""
        return replace(self, planned=self.planned[:n], groups=self.groups[:n], rows=self.rows[:n])


def _per_request(planned: Sequence[PlannedRequest], groups: Sequence[Sequence[object]]) -> list[PlannedRequest]:
    """Each planned decision repeated once per draw it sends."""
    return [p for p, group in zip(planned, groups) for _ in group]
