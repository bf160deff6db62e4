"""Per-call records, per-prompt metrics, and their recomputation from a JSONL trace.

Definitions follow the paper (App. D.2): ``model_calls`` counts MH calls (one per
sequential step, one per PreSTO round); block extensions are counted apart in
``extend_calls``. transitions per call = transitions / model_calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import IO, Any

from .proposals import DecisionId


@dataclass(frozen=True)
class RequestRecord:
    decision: DecisionId | None  # None for a block extension
    cut: int
    prefix_len: int  # prompt + kept response tokens
    new_tokens: int
    cached_tokens: int
    reachable: bool = True


@dataclass(frozen=True)
class CallRecord:
    index: int
    stage: int
    kind: str  # "extend" or "mh"
    k0: int  # transitions done in the stage before this call
    requests: tuple[RequestRecord, ...]
    time_s: float  # wall time of the engine call
    plan_s: float = 0.0  # coordinator: planning
    walk_s: float = 0.0  # coordinator: walking / MH arithmetic


@dataclass(frozen=True)
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
    length: int  # T, response tokens of the stage (the cut fraction is cut / length)


@dataclass(frozen=True)
class PromptMetrics:
    model_calls: int
    extend_calls: int
    transitions: int
    transitions_per_call: float
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
    realized = {n.request for n in nodes}
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
        call_time_s=call_time,
        time_per_call_s=_ratio(call_time, len(mh)),
        extend_time_s=sum(c.time_s for c in ext),
        coordinator_time_s=sum(c.plan_s + c.walk_s for c in calls),
    )


class TraceWriter:
    """JSONL trace: one line per record, flushed at once so an interrupted run stays valid."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, record_type: str, payload: dict[str, Any]) -> None:
        self._stream.write(json.dumps({"type": record_type, **payload}) + "\n")
        self._stream.flush()

    def call(self, record: CallRecord) -> None:
        self.write("call", asdict(record))

    def node(self, record: NodeRecord) -> None:
        self.write("node", asdict(record))


def read_trace(lines: Iterable[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines if line.strip()]


def node_record(rec: dict[str, Any], block_size: int) -> NodeRecord:
    """A trace's node record; traces written before ``length`` existed get T = stage * B."""
    body = {f.name: rec[f.name] for f in fields(NodeRecord) if f.name != "length"}
    body["request"] = tuple(body["request"])
    return NodeRecord(**body, length=rec.get("length", rec["stage"] * block_size))


def metrics_from_trace(records: Iterable[dict[str, Any]]) -> list[PromptMetrics]:
    """Recompute each run's metrics from its trace records (one run = records after a ``run``)."""
    runs: list[tuple[list[CallRecord], list[NodeRecord]]] = []
    block_size = 0
    for rec in records:
        kind = rec["type"]
        if kind in ("call", "node") and not runs:
            raise ValueError(f"trace has a {kind!r} record before any 'run' record: is it truncated at the start?")
        if kind == "run":
            runs.append(([], []))
            block_size = rec["block_size"]
        elif kind == "call":
            body = {f.name: rec[f.name] for f in fields(CallRecord)}
            body["requests"] = tuple(RequestRecord(**r) for r in body["requests"])
            runs[-1][0].append(CallRecord(**body))
        elif kind == "node":
            runs[-1][1].append(node_record(rec, block_size))
    return [summarize(c, n) for c, n in runs]
