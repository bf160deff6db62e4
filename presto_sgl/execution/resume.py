"""Resuming an interrupted chain from its trace (``presto-sgl sample --resume TRACE``).

The sampler writes a ``state`` record at every boundary the chain reaches: after each block
extension (k = 0) and after each round's walk (k transitions of the stage done), with the
state's tokens and their per-token values (as the change from the record before) and the
walk's path. A trace cut anywhere (Ctrl-C,
``kill -9`` mid-call or mid-line, a server gone for good) is a prefix of the finished trace:
resume keeps it up to its last ``state`` record, drops the rest, and runs on from that
(stage, k, path, state). The keys are functions of a decision's identity only, so with a
seeded engine the resumed chain ends in exactly the tokens of an uninterrupted one; with an
unseeded engine it is the same Markov chain continued from that state (exact in law).
Planner and proposal-store contents are not restored: they change which calls are made,
never which states are visited (Prop. 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Any

from ..chain.metrics import CallRecord, NodeRecord
from ..chain.state import ChainState
from ..chain.trace import StateReplay, TraceLineError, call_record, node_record, trace_records
from ..errors import ConfigError

IDENTITY_FREE = ("type", "prompt_len")
"""Run-record fields that follow from the others (not compared on resume)."""


class EmptyTrace(ValueError):
    """The trace holds no complete record: the run stopped before it began; start it afresh."""


@dataclass(frozen=True)
class Checkpoint:
    """Where a trace's chain stands: ``stage`` 0 when no block was drawn yet."""

    name: str  # the trace's path, for messages
    run: dict[str, Any]  # the trace's run record
    stage: int
    k: int
    _: KW_ONLY
    path: str
    state: ChainState | None  # None at stage 0
    calls: tuple[CallRecord, ...]
    nodes: tuple[NodeRecord, ...]
    offset: int  # bytes of the trace that are kept: through the last state record (or the run record)
    finished: bool  # the trace had a summary: the chain was complete


def read_checkpoint(path: str | Path) -> Checkpoint:
    """The last boundary recorded in the trace at ``path``; ValueError naming the line for a
    trace that is not one chain's (a corrupt line, a second run, no run record)."""
    name = str(path)
    records = _one_run(name, path)
    run = records[0][0]
    last = max((j for j, (r, _) in enumerate(records) if r["type"] == "state"), default=0)
    calls: list[CallRecord] = []
    nodes: list[NodeRecord] = []
    state, stage, k, path = None, 0, 0, ""
    states = StateReplay(tuple(run["prompt"]))
    for j, (r, _) in enumerate(records[: last + 1]):
        try:
            if r["type"] == "call":
                calls.append(call_record(r))
            elif r["type"] == "node":
                nodes.append(node_record(r, run["block_size"]))
            elif r["type"] == "state":
                state = states.apply(r)
                stage, k, path = int(r["stage"]), int(r["k"]), str(r["path"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"trace {name} line {j + 1}: malformed {r['type']!r} record ({exc!r})") from None
    finished = any(r["type"] == "summary" for r, _ in records[last:])
    return Checkpoint(
        name,
        run,
        stage,
        k,
        path=path,
        state=state,
        calls=tuple(calls),
        nodes=tuple(nodes),
        offset=records[last][1],
        finished=finished,
    )


def _one_run(name: str, path: str | Path) -> list[tuple[dict[str, Any], int]]:
    """The complete records of the trace at ``path``, each with the byte offset after its line;
    ValueError unless they are one run's, its run record first."""
    try:
        lines = Path(path).read_bytes().decode("utf-8").splitlines(keepends=True)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read trace {name}: {getattr(exc, 'strerror', None) or exc}") from None
    if lines and not lines[-1].endswith("\n"):
        lines.pop()  # after the last newline: a write that was cut off
    ends = list(itertools.accumulate(len(line.encode("utf-8")) for line in lines))  # byte offset after each line
    try:
        records = [(rec, ends[n - 1]) for n, rec in trace_records(lines)]  # (record, offset after its line)
    except TraceLineError as exc:
        raise ValueError(
            f"trace {name} line {exc.line} is corrupt (not {exc.reason}): not a presto-sgl trace, or edited"
        ) from None
    if not records:
        raise EmptyTrace(f"trace {name} has no complete record: the run stopped before it began; start it again")
    runs = [r for r, _ in records if r["type"] == "run"]
    if len(runs) != 1 or records[0][0]["type"] != "run":
        got = "no 'run' record first" if not runs or records[0][0]["type"] != "run" else f"{len(runs)} runs"
        raise ValueError(f"trace {name} has {got}: resume takes the trace of one `sample` run")
    if "prompt" not in runs[0]:
        raise ValueError(f"trace {name} was written by an older presto-sgl (no prompt ids in its run record): rerun it")
    return records


def check_same_run(name: str, recorded: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """ValueError naming every field where this run's record differs from the trace's (a trace
    written before the registry is read in today's words: :func:`current_record`)."""
    recorded, current = current_record(recorded), current_record(current)
    keys = sorted((set(recorded) | set(current)) - set(IDENTITY_FREE))
    differ = [k for k in keys if recorded.get(k) != current.get(k)]
    if differ:
        diff = "; ".join(
            f"{{{k}}} (trace {recorded.get(k, '(none)')!r}, now {current.get(k, '(none)')!r})" for k in differ
        )
        raise ConfigError(
            differ[0],
            current.get(differ[0]),
            f"trace {name} is from another run ({diff}): resume with "
            "the options, prompt, model and engine it was written with",
        )


def truncate(path: str | Path, offset: int) -> None:
    """Cut the trace at ``path`` to its first ``offset`` bytes (what resume keeps)."""
    with open(path, "r+b") as f:
        f.truncate(offset)


def current_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """A run record or manifest config in today's words. Earlier versions called the ending
    (fixed | eos) ``target``; before the registry, ``sampler`` was "sequential" or "presto" beside ``kernel``
    (an MH run) or a baseline's name, and best-of-N's ``best_of`` was ``n``; a record written
    since is returned as it is."""
    out = dict(record)
    if "target" in out and "ending" not in out:
        out["ending"] = out.pop("target")
    if "sampler" not in out or "method" in out:
        return out
    sampler = out.pop("sampler")
    if sampler in ("sequential", "presto"):
        out["method"] = out.pop("kernel", "powermh")
        if sampler == "sequential":
            out["rule"] = "sequential"
    else:
        out["method"] = sampler
        if sampler == "bestofn" and "n" in out:
            out["best_of"] = out.pop("n")
    return out
