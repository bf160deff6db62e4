"""Sequential PowerMH vs PreSTO rules side by side on one engine (shared by the benchmarks).

Same prompts and keys for every method in one run: model calls, transitions per call,
time per call, cumulative model-call time, speedup (paper Eq. 20: ratio of mean
cumulative call times against the sequential sampler with the same keying), cached-token
share, acceptance, and whether each PreSTO chain ended with the sequential chain's tokens.
"""

from __future__ import annotations

import statistics

from presto_sgl import PowerConfig, PowerMH, PrestoConfig, PrestoPowerMH

PROMPTS = [
    "What is 17 + 25? Answer with the number.",
    "Name a prime number between 10 and 20.",
    "Complete the sentence: The capital of France is",
    "What is 6 times 7?",
]
"""Chat prompts shared by the SmolLM2 benchmarks."""


def compare_rules(engine, prompts, args) -> list[dict]:
    """``args``: T, K, alpha, seed, budgets. Returns one row per method."""
    rows = []
    runs = [("sequential", "path", None), *[("bfs", "path", b) for b in args.budgets],
            ("sequential", "step", None), *[("step", "step", b) for b in args.budgets]]
    seq_states: dict[str, list] = {}
    seq_time: dict[str, float] = {}
    for rule, keying, budget in runs:
        cfg = PowerConfig(alpha=args.alpha, max_new_tokens=args.T, block_size=args.T, steps=args.K, keying=keying)
        results = []
        for i, p in enumerate(prompts):
            sampler = PowerMH(engine, cfg) if budget is None else PrestoPowerMH(engine, cfg, PrestoConfig(rule, budget))
            results.append(sampler.run(p, seed=args.seed, prompt_id=i))
        ms = [r.metrics for r in results]
        calls = sum(m.model_calls for m in ms)
        call_time = statistics.mean(m.call_time_s for m in ms)
        if budget is None:
            seq_states[keying] = [r.state for r in results]
            seq_time[keying] = call_time
        same = [r.state.tokens == s.tokens for r, s in zip(results, seq_states[keying])]
        same_str = f"{sum(same)}/{len(same)}" if engine.capabilities.seeded else "n/a (unseeded engine)"
        row = {
            "rule": rule, "keys": keying, "budget": budget or 1, "calls_per_prompt": calls / len(ms),
            "transitions_per_call": sum(m.transitions for m in ms) / calls,
            "time_per_call_s": sum(m.call_time_s for m in ms) / calls,
            "call_time_per_prompt_s": call_time, "speedup": seq_time[keying] / call_time,
            "cached_share": sum(m.cached_tokens for m in ms) / max(1, sum(m.prefill_tokens for m in ms)),
            "acceptance": sum(m.accepted for m in ms) / sum(m.transitions for m in ms),
            "same_final_tokens": same_str,
        }
        rows.append(row)
        print(f"B {rule:10s} {keying:4s} N_pf={row['budget']:2d} calls/prompt={row['calls_per_prompt']:5.1f} "
              f"trans/call={row['transitions_per_call']:5.2f} time/call={row['time_per_call_s']:5.2f}s "
              f"call time/prompt={call_time:6.1f}s speedup={row['speedup']:4.2f} cached={row['cached_share']:.0%} "
              f"acc={row['acceptance']:.0%} same-as-sequential={row['same_final_tokens']}", flush=True)
    return rows
