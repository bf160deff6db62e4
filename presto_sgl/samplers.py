"""PowerMH (paper Alg. 1) and PreSTO-PowerMH (Alg. 2) over the engine seam.

Both share the block schedule: stage l extends the state by B tokens from q_tau (no
EOS stop), then runs K MH transitions targeting p0(x_{1:lB})^alpha. They differ only
in how the K transitions are executed: one model call per transition, or one batched
call per prefetch round (planner) followed by a walk over the scored proposals.
With the same keys both visit exactly the same states (paper Prop. 1).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from .config import PowerConfig, PrestoConfig
from .engines.base import Completion, Engine, EngineError, Request, validate_completion
from .kernel import Proposal, Transition, mh_step
from .keys import ChainKeys, DecisionDraws
from .metrics import CallRecord, NodeRecord, PromptMetrics, RequestRecord, TraceWriter, summarize
from .planner import RoundContext, RoundFeedback, make_planner
from .proposals import DecisionId, ProposalStore, StoredProposal
from .state import ChainState
from .walker import walk

OnTransition = Callable[[int, int, ChainState, Transition], None]
"""Called after every transition with (stage, k, new state, transition)."""


@dataclass(frozen=True)
class SampleResult:
    state: ChainState
    metrics: PromptMetrics


class _Recorder:
    """Runs model calls (timed, validated) and keeps the call and node records."""

    def __init__(self, engine: Engine, trace: TraceWriter | None) -> None:
        self.engine = engine
        self.trace = trace
        self.calls: list[CallRecord] = []
        self.nodes: list[NodeRecord] = []

    def call(self, requests: Sequence[Request]) -> tuple[list[Completion], float]:
        t0 = time.perf_counter()
        completions = self.engine.generate(list(requests))
        elapsed = time.perf_counter() - t0
        if len(completions) != len(requests):
            raise EngineError(f"engine returned {len(completions)} results for {len(requests)} requests")
        vocab = self.engine.capabilities.vocab_size
        for req, comp in zip(requests, completions):
            validate_completion(req, comp, vocab)
        return completions, elapsed

    def record_call(self, record: CallRecord) -> None:
        self.calls.append(record)
        if self.trace:
            self.trace.call(record)

    def record_node(self, record: NodeRecord) -> None:
        self.nodes.append(record)
        if self.trace:
            self.trace.node(record)

    @property
    def next_index(self) -> int:
        return len(self.calls)


def _validate_prompt(prompt: Sequence[int], vocab_size: int) -> tuple[int, ...]:
    if len(prompt) == 0:
        raise ValueError("`prompt` (=[]) is empty; pass at least one token id (e.g. a BOS or chat-template prefix)")
    bad = [t for t in prompt if isinstance(t, bool) or not isinstance(t, int) or not (0 <= t < vocab_size)]
    if bad:
        raise ValueError(
            f"`prompt` has token ids {bad[:5]} outside the vocabulary [0, {vocab_size}); "
            "tokenize with the engine's tokenizer"
        )
    return tuple(int(t) for t in prompt)


class _BlockSampler:
    """The block schedule shared by both samplers; subclasses run the K transitions."""

    name = "powermh"

    def __init__(self, engine: Engine, config: PowerConfig) -> None:
        if not isinstance(config, PowerConfig):
            raise TypeError(f"`config` must be a PowerConfig, got {type(config).__name__}")
        self.engine = engine
        self.config = config

    def describe(self) -> dict[str, object]:
        c = self.config
        return {
            "sampler": self.name,
            "alpha": c.alpha,
            "tau": c.temperature,
            "max_new_tokens": c.max_new_tokens,
            "block_size": c.block_size,
            "steps": c.steps,
            "keying": c.keying,
        }

    def check_prompt(self, prompt: Sequence[int]) -> tuple[int, ...]:
        """The prompt as a tuple of ids, or a ValueError if it cannot be sampled from."""
        prompt_ids = _validate_prompt(prompt, self.engine.capabilities.vocab_size)
        limit = self.engine.capabilities.context_length
        if limit is not None and len(prompt_ids) + self.config.max_new_tokens > limit:
            raise ValueError(
                f"`max_new_tokens` (={self.config.max_new_tokens}) plus the prompt ({len(prompt_ids)} tokens) exceeds "
                f"the model context ({limit}); use max_new_tokens <= {max(0, limit - len(prompt_ids))} or a shorter prompt"
            )
        return prompt_ids

    def run(
        self,
        prompt: Sequence[int],
        *,
        seed: int,
        prompt_id: int | str = 0,
        trace: TraceWriter | None = None,
        on_transition: OnTransition | None = None,
    ) -> SampleResult:
        """Sample one response of ``max_new_tokens`` tokens (approximately) from pi_alpha."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"`seed` (={seed!r}) must be an integer")
        prompt_ids = self.check_prompt(prompt)
        keys = ChainKeys(seed, prompt_id)
        rec = _Recorder(self.engine, trace)
        if trace:
            trace.write("run", {**self.describe(), "seed": seed, "prompt_id": prompt_id, "prompt_len": len(prompt_ids)})
        cfg = self.config
        state = ChainState(prompt_ids)
        for stage in range(1, cfg.num_stages + 1):
            L = state.length
            req = Request(state.context(L), cfg.block_size, cfg.temperature, keys.extension_seed(stage))
            (comp,), elapsed = rec.call([req])
            rec.record_call(
                CallRecord(rec.next_index, stage, "extend", 0, (RequestRecord(None, L, len(req.prefix), cfg.block_size, comp.cached_tokens),), elapsed)
            )
            state = state.replace_suffix(L, comp.tokens, comp.logq, comp.logp)
            state = self._mh_block(stage, state, keys, rec, on_transition)
        metrics = summarize(rec.calls, rec.nodes)
        if trace:
            trace.write("summary", {"metrics": metrics.__dict__, "tokens": list(state.tokens)})
        return SampleResult(state, metrics)

    def _mh_block(
        self, stage: int, state: ChainState, keys: ChainKeys, rec: _Recorder, on_transition: OnTransition | None
    ) -> ChainState:
        raise NotImplementedError


class PowerMH(_BlockSampler):
    """Sequential PowerMH: one model call per MH transition."""

    name = "sequential"

    def _mh_block(self, stage, state, keys, rec, on_transition):
        cfg = self.config
        T = state.length
        path = ""
        for k in range(cfg.steps):
            decision: DecisionId = path if cfg.keying == "path" else k
            d = keys.decision(stage, decision)
            cut = d.cut(T)
            req = Request(state.context(cut), T - cut, cfg.temperature, d.seed)
            (comp,), elapsed = rec.call([req])
            t0 = time.perf_counter()
            proposal = Proposal(cut, comp.tokens, comp.logq, comp.logp)
            state, tr = mh_step(state, proposal, cfg.alpha, d.uniform)
            walk_s = time.perf_counter() - t0
            index = rec.next_index
            rec.record_call(
                CallRecord(index, stage, "mh", k, (RequestRecord(decision, cut, len(req.prefix), T - cut, comp.cached_tokens),), elapsed, 0.0, walk_s)
            )
            rec.record_node(NodeRecord(index, stage, k, decision, (index, 0), cut, tr.log_accept, tr.uniform, tr.accepted, T))
            path += "1" if tr.accepted else "0"
            if on_transition:
                on_transition(stage, k, state, tr)
        return state


class PrestoPowerMH(_BlockSampler):
    """PreSTO-PowerMH: prefetch a subtree of future proposals per call, then walk it."""

    name = "presto"

    def __init__(self, engine: Engine, config: PowerConfig, presto: PrestoConfig | None = None) -> None:
        super().__init__(engine, config)
        presto = presto if presto is not None else PrestoConfig()
        if not isinstance(presto, PrestoConfig):
            raise TypeError(f"`presto` must be a PrestoConfig, got {type(presto).__name__}")
        if presto.keying != config.keying:
            raise ValueError(
                f"rule {presto.rule!r} couples with {presto.keying} keys but `config.keying` is "
                f"{config.keying!r}; use PowerConfig(keying={presto.keying!r})"
            )
        self.presto = presto
        self.planner = make_planner(presto)

    def describe(self) -> dict[str, object]:
        return {**super().describe(), **asdict(self.presto)}

    def _mh_block(self, stage, state, keys, rec, on_transition):
        cfg = self.config
        T = state.length
        path_keys = cfg.keying == "path"
        cache: dict[DecisionId, DecisionDraws] = {}

        def draws(decision: DecisionId) -> DecisionDraws:
            if decision not in cache:
                cache[decision] = keys.decision(stage, decision)
            return cache[decision]

        def decision_of(path: str, k: int) -> DecisionId:
            return path if path_keys else k

        store = ProposalStore()
        path, k = "", 0
        while k < cfg.steps:
            t0 = time.perf_counter()
            ctx = RoundContext(state, path, k, cfg.steps - k, self.presto.budget, draws, store)
            planned = self.planner.plan(ctx)
            requests = [
                Request(state.context(p.cut), T - p.cut, cfg.temperature, draws(p.decision).seed) for p in planned
            ]
            plan_s = time.perf_counter() - t0
            completions, elapsed = rec.call(requests) if requests else ([], 0.0)
            t1 = time.perf_counter()
            index = rec.next_index
            for j, (p, comp) in enumerate(zip(planned, completions)):
                proposal = Proposal(p.cut, comp.tokens, comp.logq, comp.logp)
                store.add(p.decision, StoredProposal(state.tokens[: p.cut], proposal, (index, j)))
            result = walk(
                state, path, k, cfg.steps - k, alpha=cfg.alpha, decision_of=decision_of, draws=draws, store=store
            )
            walk_s = time.perf_counter() - t1
            if not result.steps:
                raise RuntimeError(f"planner {self.presto.rule!r} made no progress at stage {stage}, k={k}")
            rec.record_call(
                CallRecord(
                    index,
                    stage,
                    "mh",
                    k,
                    tuple(
                        RequestRecord(p.decision, p.cut, len(r.prefix), r.max_new_tokens, c.cached_tokens, p.reachable)
                        for p, r, c in zip(planned, requests, completions)
                    ),
                    elapsed,
                    plan_s,
                    walk_s,
                )
            )
            for i, step in enumerate(result.steps):
                tr = step.transition
                rec.record_node(
                    NodeRecord(index, stage, k + i, step.decision, step.request, tr.cut, tr.log_accept, tr.uniform, tr.accepted, T)
                )
                if on_transition:
                    on_transition(stage, k + i, step.state, tr)
            self.planner.observe(
                RoundFeedback(
                    T,
                    tuple((s.transition.cut, s.transition.log_accept) for s in result.steps),
                    tuple((len(r.prefix), r.max_new_tokens) for r in requests),
                    elapsed,
                )
            )
            state, path, k = result.state, result.path, k + len(result.steps)
            if self.planner.carries_over:
                store.discard_before(k)
            else:
                store.clear()
        return state


def make_sampler(engine: Engine, config: PowerConfig, presto: PrestoConfig | None = None) -> _BlockSampler:
    """Sequential PowerMH when ``presto`` is None, else PreSTO-PowerMH."""
    return PowerMH(engine, config) if presto is None else PrestoPowerMH(engine, config, presto)
