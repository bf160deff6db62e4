"""Per-call and per-transition records, and the per-prompt metrics computed from them.

Definitions follow the paper (App. D.2): ``model_calls`` counts MH calls (one per
sequential step, one per PreSTO round); block extensions are counted apart in
``extend_calls``. transitions per call = transitions / model_calls. ``kv_tokens_peak``: the
most KV tokens one call (MH or extension) asks for, sum over its requests of prefix + new
tokens; an upper bound on the engine's KV use, which shares cached prefixes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import KW_ONLY, dataclass

from .keys import DecisionId


@dataclass(frozen=True)
class RequestRecord:
    decision: DecisionId | None  # None for a block extension
    cut: int
    prefix_len: int  # prompt + kept response tokens
    new_tokens: int
    _: KW_ONLY
    cached_tokens: int
    reachable: bool = True
    temperature: float | None = None  # the draw's proposal temperature
    seed: int | None = None  # the draw's keyed engine seed


@dataclass(frozen=True)
class CallRecord:
    index: int
    stage: int
    kind: str  # "extend" or "mh"
    k0: int  # transitions done in the stage before this call
    _: KW_ONLY
    requests: tuple[RequestRecord, ...]
    time_s: float  # wall time of the engine call
    plan_s: float = 0.0  # coordinator: planning
    walk_s: float = 0.0  # coordinator: walking / MH arithmetic


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    call: int  # the round (call index) whose walk made this transition
    stage: int
    k: int  # transition index in the stage
    decision: DecisionId
    request: tuple[int, int]  # (call, request index) of the proposal used
    cut: int
    log_accept: float
    uniform: float
    accepted: bool
    length: int  # response tokens of the state the decision was taken at (the cut fraction is cut / length)
    draws: int = 1  # requests the decision used: request, request + 1, ... of its call
    selected: int = 0  # which of them was proposed (MultiTryMH's selected try)


@dataclass(frozen=True)
class PromptMetrics:
    model_calls: int
    extend_calls: int
    transitions: int
    transitions_per_call: float
    _: KW_ONLY
    accepted: int
    requests_issued: int
    requests_per_call: float
    requests_realized: int
    requests_unreachable: int
    requests_wasted: int
    tokens_decoded: int
    prefill_tokens: int
    cached_tokens: int
    cache_hit_rate: float
    kv_tokens_peak: int
    call_time_s: float  # cumulative MH call time
    time_per_call_s: float
    extend_time_s: float
    coordinator_time_s: float


def _ratio(a: float, b: float) -> float:
    return a / b if b else 0.0


def summarize(calls: Iterable[CallRecord], nodes: Iterable[NodeRecord]) -> PromptMetrics:
    calls, nodes = list(calls), list(nodes)
    mh = [c for c in calls if c.kind == "mh"]
    ext = [c for c in calls if c.kind == "extend"]
    mh_requests = [r for c in mh for r in c.requests]
    all_requests = [r for c in calls for r in c.requests]
    realized = {(n.request[0], n.request[1] + j) for n in nodes for j in range(n.draws)}
    issued = len(mh_requests)
    call_time = sum(c.time_s for c in mh)
    prefill = sum(r.prefix_len for r in all_requests)
    cached = sum(r.cached_tokens for r in all_requests)
    return PromptMetrics(
        model_calls=len(mh),
        extend_calls=len(ext),
        transitions=len(nodes),
        transitions_per_call=_ratio(len(nodes), len(mh)),
        accepted=sum(n.accepted for n in nodes),
        requests_issued=issued,
        requests_per_call=_ratio(issued, len(mh)),
        requests_realized=len(realized),
        requests_unreachable=sum(not r.reachable for r in mh_requests),
        requests_wasted=issued - len(realized),
        tokens_decoded=sum(r.new_tokens for r in all_requests),
        prefill_tokens=prefill,
        cached_tokens=cached,
        cache_hit_rate=_ratio(cached, prefill),
        kv_tokens_peak=max((sum(r.prefix_len + r.new_tokens for r in c.requests) for c in calls), default=0),
        call_time_s=call_time,
        time_per_call_s=_ratio(call_time, len(mh)),
        extend_time_s=sum(c.time_s for c in ext),
        coordinator_time_s=sum(c.plan_s + c.walk_s for c in calls),
    )
