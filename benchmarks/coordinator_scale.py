"""The coordinator at paper scale (issue 28, item 4): what a chain costs besides the model.

On the reference engine (a cheap LM, so that the coordinator is what is timed): for every
rule (and the shared scheduler, merged, 4 chains) and two shapes -- one block of T tokens
with K = 100, and 16 blocks of T / 16 with K = 10 per block -- at T = 64 ... 3072:

- coordinator seconds per MH call and per transition: wall time of the run less the
  engine's own time (``generate``), median and range over the prompts;
- the same with a JSONL trace written (what ``run --traces`` does), and the trace's bytes
  per prompt;
- peak Python memory of one chain (tracemalloc, a separate run) and the proposal store's
  peak (entries, and numbers held: prefix tokens + draw tokens, log q, log p0).

    python -m benchmarks.coordinator_scale --prompts 10 --json benchmarks/results/coordinator/scale.json
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.compare import machine
from presto_sgl import TraceWriter, sampling_configs
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM
from presto_sgl.engines.text import TextView
from presto_sgl.execution.context import RunContext
from presto_sgl.kernels.proposals import ProposalStore
from presto_sgl.samplers import Sampler
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.scheduling.scheduler import Scheduler

RULES: dict[str, dict[str, Any]] = {
    "sequential": dict(rule="sequential"),
    "bfs": dict(rule="bfs"),
    "predictive": dict(rule="predictive"),
    "step": dict(rule="step"),
    "step-cost": dict(rule="step", cost_aware=True),
    "bfs-cost": dict(rule="bfs", cost_aware=True),
    "predictive-cost": dict(rule="predictive", cost_aware=True),
}
SHAPES = {
    "one-block": lambda T: dict(max_new_tokens=T, block_size=T, steps=100),
    "16-blocks": lambda T: dict(max_new_tokens=T, block_size=T // 16, steps=10),
}


class TimedEngine:
    """The reference engine, its ``generate`` time summed (per thread-free run)."""

    def __init__(self, inner: ReferenceEngine) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.text: TextView = inner.text
        self.seconds = 0.0

    def generate(self, requests):
        t0 = time.perf_counter()
        try:
            return self.inner.generate(requests)
        finally:
            self.seconds += time.perf_counter() - t0


class StorePeak:
    """Peak entries and numbers held by any ProposalStore while installed."""

    def __init__(self) -> None:
        self.entries = self.numbers = 0

    def __enter__(self) -> StorePeak:
        self._add = ProposalStore.add
        peak = self

        def add(store, decision, stored):
            peak._add(store, decision, stored)
            held = [e for v in store._by_decision.values() for e in v]
            numbers = sum(len(e.prefix) + sum(3 * len(p.tokens) for p in e.proposals) for e in held)
            peak.entries, peak.numbers = max(peak.entries, len(held)), max(peak.numbers, numbers)

        ProposalStore.add = add  # type: ignore[method-assign]  # the timer wraps the method
        return self

    def __exit__(self, *exc) -> None:
        ProposalStore.add = self._add  # type: ignore[method-assign]  # the timer restores the method


def prompts_of(n: int) -> list[list[int]]:
    return [[(7 * i + j) % 32 for j in range(3 + i % 4)] for i in range(n)]


def sampler_of(rule: str, T: int, shape: str) -> tuple[Sampler, TimedEngine]:
    engine = TimedEngine(ReferenceEngine(ReferenceLM(32, seed=5)))
    cfg, presto = sampling_configs(alpha=4.0, budget=20, **RULES[rule], **SHAPES[shape](T))
    return Sampler(engine, cfg, presto), engine


def one(rule: str, T: int, shape: str, prompt, i: int, trace: bool) -> dict:
    sampler, engine = sampler_of(rule, T, shape)
    buf = io.StringIO()
    t0 = time.perf_counter()
    r = sampler.run(prompt, seed=3, prompt_id=i, context=RunContext(trace=TraceWriter(buf) if trace else None))
    wall = time.perf_counter() - t0
    coord = wall - engine.seconds
    return {
        "coord_s": coord,
        "per_call_ms": 1e3 * coord / r.metrics.model_calls,
        "per_transition_ms": 1e3 * coord / r.metrics.transitions,
        "calls": r.metrics.model_calls,
        "transitions": r.metrics.transitions,
        "trace_bytes": len(buf.getvalue().encode()) if trace else 0,
    }


def scheduled(rule: str, T: int, shape: str, prompts) -> dict:
    """4 chains through the merged scheduler: coordinator time of the whole run per call."""
    sampler, engine = sampler_of(rule, T, shape)
    sched = Scheduler.for_method(sampler, dispatch="merged")
    t0 = time.perf_counter()
    results = run_prompts(sampler.run, prompts, seed=3, workers=4, scheduler=sched)
    coord = time.perf_counter() - t0 - engine.seconds
    calls = sum(r.metrics.model_calls for r in results)
    return {
        "per_call_ms": 1e3 * coord / calls,
        "per_transition_ms": 1e3 * coord / sum(r.metrics.transitions for r in results),
        "merged_calls": sched.stats.calls,
    }


def memory(rule: str, T: int, shape: str, prompt) -> dict:
    sampler, _ = sampler_of(rule, T, shape)
    tracemalloc.start()
    with StorePeak() as store:
        sampler.run(prompt, seed=3, prompt_id=0)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "peak_python_mib": round(peak / 2**20, 2),
        "store_peak_entries": store.entries,
        "store_peak_numbers": store.numbers,
    }


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--lengths", default="64,256,1024,3072")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--rules", default=",".join(RULES))
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    prompts = prompts_of(args.prompts)
    data: dict[str, Any] = {"machine": machine(), "runs": []}
    print(data["machine"], flush=True)
    for shape in args.shapes.split(","):
        for T in map(int, args.lengths.split(",")):
            if shape == "one-block" and T > 1024:
                continue  # the paper's one-block shape stops at T = 1024 (K = 100)
            for rule in args.rules.split(","):
                plain = [one(rule, T, shape, p, i, False) for i, p in enumerate(prompts)]
                traced = [one(rule, T, shape, p, i, True) for i, p in enumerate(prompts[:3])]
                row = {
                    "shape": shape,
                    "T": T,
                    "rule": rule,
                    "prompts": len(prompts),
                    "per_call_ms": summary([x["per_call_ms"] for x in plain]),
                    "per_transition_ms": summary([x["per_transition_ms"] for x in plain]),
                    "calls_per_prompt": statistics.median(x["calls"] for x in plain),
                    "traced_per_call_ms": summary([x["per_call_ms"] for x in traced]),
                    "trace_bytes_per_prompt": statistics.median(x["trace_bytes"] for x in traced),
                    **memory(rule, T, shape, prompts[0]),
                }
                if rule != "sequential":
                    row["scheduler_merged_4"] = scheduled(rule, T, shape, prompts[:4])
                data["runs"].append(row)
                print(json.dumps(row), flush=True)
                if args.json:
                    args.json.parent.mkdir(parents=True, exist_ok=True)
                    args.json.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
