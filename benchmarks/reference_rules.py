"""Sequential PowerMH vs PreSTO (`bfs`, `predictive` with online refit, `step`) on the reference engine, side by side.

Same prompts, same keys, same engine in one run; prints model calls, transitions per
call, requests per call, realized / unreachable / wasted requests, coordinator time,
and checks that every PreSTO chain ends in the sequential chain's final state.

    python -m benchmarks.reference_rules [--prompts 8] [--steps 100] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from presto_sgl import Sampler, sampling_configs
from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

BUDGETS = (4, 8, 10, 16, 20)
EPS = 0.01


def run(args: argparse.Namespace) -> list[dict]:
    engine = ReferenceEngine(ReferenceLM(args.vocab, sharpness=args.sharpness, seed=0))
    prompts = [[(3 * i + j) % args.vocab for j in range(8)] for i in range(args.prompts)]
    rows = []
    for keying, rules in (("path", ("bfs", "predictive")), ("step", ("step",))):
        power = dict(alpha=args.alpha, max_new_tokens=args.n, block_size=args.block, steps=args.steps)
        sequential = Sampler(engine, *sampling_configs("sequential", keying=keying, **power))
        seq = [sequential.run(p, seed=args.seed, prompt_id=i) for i, p in enumerate(prompts)]
        rows.append(summarize(f"sequential ({keying} keys)", 1, seq, seq))
        for rule in rules:
            for budget in BUDGETS:
                # the shipped predictor was fitted on SmolLM2: refit it online on this LM
                config, presto = sampling_configs(rule, budget=budget, online=rule == "predictive", **power)
                t0 = time.perf_counter()
                # a fresh sampler per prompt: each chain refits its own copy of the predictor
                res = [
                    Sampler(engine, config, presto).run(p, seed=args.seed, prompt_id=i) for i, p in enumerate(prompts)
                ]
                rows.append(summarize(rule, budget, res, seq, time.perf_counter() - t0))
    return rows


def summarize(name, budget, results, sequential, wall=None) -> dict:
    ms = [r.metrics for r in results]
    calls = sum(m.model_calls for m in ms)
    trans = sum(m.transitions for m in ms)
    issued = sum(m.requests_issued for m in ms)
    return {
        "rule": name,
        "budget": budget,
        "calls_per_prompt": calls / len(ms),
        "transitions_per_call": trans / calls,
        "requests_per_call": issued / calls,
        "realized_share": sum(m.requests_realized for m in ms) / issued,
        "unreachable_share": sum(m.requests_unreachable for m in ms) / issued,
        "acceptance": sum(m.accepted for m in ms) / trans,
        "coordinator_ms_per_call": 1e3 * sum(m.coordinator_time_s for m in ms) / calls,
        "exact": all(r.state == s.state for r, s in zip(results, sequential)),
    }


def eps_shares(args) -> tuple[float, float, float]:
    """Shares of eps-certain reject / uncertain / eps-certain accept over sequential decisions."""
    engine = ReferenceEngine(ReferenceLM(args.vocab, sharpness=args.sharpness, seed=0))
    config, presto = sampling_configs(
        "sequential", alpha=args.alpha, max_new_tokens=args.n, block_size=args.block, steps=args.steps
    )
    sampler = Sampler(engine, config, presto)
    logs: list[float] = []
    for i in range(args.prompts):
        sampler.run(
            [(3 * i + j) % args.vocab for j in range(8)],
            seed=args.seed,
            prompt_id=i,
            on_transition=lambda s, k, st, tr: logs.append(tr.log_accept),
        )
    a = [math.exp(x) for x in logs]
    n = len(a)
    return sum(x <= EPS for x in a) / n, sum(EPS < x < 1 - EPS for x in a) / n, sum(x >= 1 - EPS for x in a) / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=64, help="max new tokens (paper: one block)")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--steps", type=int, default=100, help="K (paper: 100)")
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--vocab", type=int, default=32)
    ap.add_argument("--sharpness", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = run(args)
    rej, unc, acc = eps_shares(args)
    print(
        f"reference LM V={args.vocab} sharpness={args.sharpness}; n={args.n} B={args.block} K={args.steps} "
        f"alpha={args.alpha}; {args.prompts} prompts; eps-certain reject/uncertain/accept = "
        f"{rej:.0%}/{unc:.0%}/{acc:.0%}"
    )
    head = (
        f"{'rule':<22}{'N_pf':>5}{'calls/prompt':>13}{'trans/call':>11}{'req/call':>9}{'realized':>9}"
        f"{'unreach':>8}{'acc':>6}{'coord ms':>9}{'exact':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        print(
            f"{r['rule']:<22}{r['budget']:>5}{r['calls_per_prompt']:>13.1f}{r['transitions_per_call']:>11.2f}"
            f"{r['requests_per_call']:>9.2f}{r['realized_share']:>9.0%}{r['unreachable_share']:>8.0%}"
            f"{r['acceptance']:>6.0%}{r['coordinator_ms_per_call']:>9.2f}{'yes' if r['exact'] else 'NO':>6}"
        )
    print(f"total {time.perf_counter() - t0:.1f}s")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
