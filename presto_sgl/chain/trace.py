"""JSONL traces: one record per line (:data:`RECORD_TYPES`), written as a run goes and read
back to recompute its metrics (docs/design.md §7) or to resume the chain
(:mod:`presto_sgl.execution.resume`: ``state`` records hold the chain at its boundaries).

A ``state`` record holds what changed since the run's previous one: ``keep`` (the response
tokens, with their values, it keeps from that state; 0 or absent: a whole state) and the
rest. A rejected round keeps everything, so a trace grows by the accepted suffixes, not by
T per round; :class:`StateReplay` reads the records back in order."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import IO, Any

from .metrics import CallRecord, NodeRecord, PromptMetrics, RequestRecord, summarize
from .state import ChainState


class TraceWriter:
    """JSONL trace: one line per record, flushed at once so an interrupted run stays valid."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._last: ChainState | None = None  # the state of the run's previous state record

    def write(self, record_type: str, payload: dict[str, Any]) -> None:
        if record_type in ("run", "resume"):
            self._last = None  # a run's first state record is whole
        self._stream.write(json.dumps({"type": record_type, **payload}) + "\n")
        self._stream.flush()

    def call(self, record: CallRecord) -> None:
        self.write("call", asdict(record))

    def node(self, record: NodeRecord) -> None:
        self.write("node", asdict(record))

    def state(self, stage: int, k: int, path: str, state: ChainState) -> None:
        """The chain after ``k`` transitions of ``stage`` (walk path ``path``): what resume needs,
        as the change from the previous state record. JSON floats round-trip exactly, so a
        resumed chain carries the very same values."""
        c = 0 if self._last is None else kept(self._last, state)
        self.write(
            "state",
            {
                "stage": stage,
                "k": k,
                "path": path,
                "keep": c,
                "tokens": list(state.tokens[c:]),
                "logq": list(state.logq[c:]),
                "logp": list(state.logp[c:]),
                "entropy": None if state.entropy is None else list(state.entropy[c:]),
                "logq_at": None if state.logq_at is None else [list(r) for r in state.logq_at[c:]],
            },
        )
        self._last = state


def _values(state: ChainState) -> tuple[tuple[Any, ...], ...]:
    return tuple(v for v in (state.tokens, state.logq, state.logp, state.entropy, state.logq_at) if v is not None)


def kept(old: ChainState, new: ChainState) -> int:
    """How many response tokens ``new`` keeps from ``old`` with every per-token value the same
    (the longest such prefix: a binary search of C-level slice comparisons)."""
    if new is old:
        return new.length
    a, b = _values(old), _values(new)
    if len(a) != len(b):
        return 0
    lo, hi = 0, min(old.length, new.length)
    while lo < hi:  # invariant: the first lo agree; the first hi + 1 do not (or hi is the end)
        mid = (lo + hi + 1) // 2
        if all(x[:mid] == y[:mid] for x, y in zip(a, b)):
            lo = mid
        else:
            hi = mid - 1
    return lo


RECORD_TYPES = ("run", "call", "node", "state", "resume", "summary", "server", "best_of", "smc_step")
"""Every record a trace may hold: what all methods write (run, call, resume, summary), the MH
samplers' transitions and boundaries (node, state), the CLI's server metrics (server), and
the baselines' own (best_of: best-of-N's scores; smc_step: Power-SMC's ESS per step)."""


class TraceLineError(ValueError):
    """A trace line that is not a trace record; ``line`` is its number (from 1)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"trace line {line} is not {reason}: the trace is damaged")
        self.line, self.reason = line, reason


def trace_records(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of each non-blank line. A last line cut off mid-write (no
    newline, not JSON: the run was killed) is dropped; any other line that is not a trace
    record raises :class:`TraceLineError`, so a damaged trace never yields wrong metrics."""
    items = list(lines)
    for n, line in enumerate(items, start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError as exc:
            if n == len(items) and not line.endswith("\n"):
                return  # the write of the last line was interrupted
            raise TraceLineError(n, f"JSON ({exc})") from None
        if not isinstance(rec, dict) or rec.get("type") not in RECORD_TYPES:
            kind = rec.get("type") if isinstance(rec, dict) else rec
            raise TraceLineError(n, f"a trace record (type {kind!r})")
        yield n, rec


def read_trace(lines: Iterable[str]) -> list[dict[str, Any]]:
    """The records of a trace's lines (:func:`trace_records`)."""
    return [rec for _, rec in trace_records(lines)]


def call_record(rec: dict[str, Any]) -> CallRecord:
    """A trace's call record."""
    body = {f.name: rec[f.name] for f in fields(CallRecord)}
    body["requests"] = tuple(RequestRecord(**r) for r in body["requests"])
    return CallRecord(**body)


class StateReplay:
    """The chain states of one run's ``state`` records, read in trace order (each keeps a
    prefix of the one before: :meth:`TraceWriter.state`)."""

    def __init__(self, prompt: tuple[int, ...]) -> None:
        self.prompt = prompt
        self.state: ChainState | None = None

    def apply(self, rec: dict[str, Any]) -> ChainState:
        """The state of the next ``state`` record ``rec``; ValueError when it keeps more than
        the state before it holds."""
        keep = int(rec.get("keep", 0))
        prev = (
            self.state
            if keep
            else ChainState(
                self.prompt,
                entropy=() if rec["entropy"] is not None else None,
                logq_at=() if rec["logq_at"] is not None else None,
            )
        )
        if prev is None or keep > prev.length or keep < 0:
            have = "no state" if prev is None else f"a state of {prev.length} tokens"
            raise ValueError(f"state record keeps {keep} tokens of the previous state, which is {have}")
        entropy, at = rec["entropy"], rec["logq_at"]
        self.state = prev.replace_suffix(
            keep,
            tuple(rec["tokens"]),
            tuple(rec["logq"]),
            tuple(rec["logp"]),
            None if entropy is None else tuple(entropy),
            None if at is None else tuple(map(tuple, at)),
        )
        if (self.state.entropy is None) != (entropy is None) or (self.state.logq_at is None) != (at is None):
            raise ValueError("state record has other per-token values than the state it keeps")
        return self.state


def node_record(rec: dict[str, Any], block_size: int) -> NodeRecord:
    """A trace's node record; older traces lack ``length`` (T = stage * B), ``draws`` (1) and
    ``selected`` (0)."""
    body = {f.name: rec[f.name] for f in fields(NodeRecord) if f.name not in ("length", "draws", "selected")}
    body["request"] = tuple(body["request"])
    length = rec.get("length", rec["stage"] * block_size)
    return NodeRecord(**body, length=length, draws=rec.get("draws", 1), selected=rec.get("selected", 0))


def metrics_from_trace(records: Iterable[dict[str, Any]]) -> list[PromptMetrics]:
    """Recompute each run's metrics from its trace records (one run = records after a ``run``)."""
    runs: list[tuple[list[CallRecord], list[NodeRecord]]] = []
    block_size = 0
    for i, rec in enumerate(records, start=1):
        kind = rec["type"]
        if kind in ("call", "node") and not runs:
            raise ValueError(f"trace has a {kind!r} record before any 'run' record: is it truncated at the start?")
        try:
            if kind == "run":
                runs.append(([], []))
                block_size = rec.get("block_size", 0)  # baselines without blocks make no nodes
            elif kind == "call":
                runs[-1][0].append(call_record(rec))
            elif kind == "node":
                runs[-1][1].append(node_record(rec, block_size))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"trace record {i} (a {kind!r}) is malformed ({exc!r}): the trace is damaged") from None
    return [summarize(c, n) for c, n in runs]
