"""Accuracy of the project's tiny addition model: greedy vs low temperature vs power sampling.

Held-out problems (seed 777, operands of 2-3 digits). Every method decodes a fixed-length
response on the embedded engine (no EOS stop; the answer is read up to the first
newline): greedy (temperature 1e-3), temperature 1/alpha sampling (the usual low-temperature
baseline), and power sampling pi_alpha with PreSTO (`step` rule), which is exact PowerMH.

    python -m benchmarks.tiny_accuracy [--problems 100] [--alpha 4] [--steps 8]
"""

from __future__ import annotations

import argparse
import time

from presto_sgl import Sampler, sampling_configs
from presto_sgl.engines.base import Request
from presto_sgl.models import embedded_engine
from presto_sgl.tasks.addition import is_correct, make_problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", type=int, default=100)
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--steps", type=int, default=8, help="MH transitions per block")
    ap.add_argument("--length", type=int, default=36, help="response tokens")
    ap.add_argument("--block", type=int, default=12)
    ap.add_argument("--budget", type=int, default=8)
    args = ap.parse_args()
    engine = embedded_engine("tiny-adder")
    problems = make_problems(args.problems, seed=777)
    prompts = [engine.encode(p.prompt) for p in problems]
    results: dict[str, tuple[float, float, float]] = {}  # name: (accuracy, seconds, model calls/problem)
    temps = (
        ("greedy", 1e-3),
        (f"temperature {1 / args.alpha:g}", 1 / args.alpha),
        ("temperature 1", 1.0),
        ("temperature 2", 2.0),
    )
    for name, temp in temps:
        t0 = time.perf_counter()
        comps = engine.generate([Request(tuple(p), args.length, temp, seed=i) for i, p in enumerate(prompts)])
        ok = sum(is_correct(pb, engine.decode(c.tokens)) for pb, c in zip(problems, comps))
        results[name] = (ok / len(problems), time.perf_counter() - t0, len(problems) and 1.0)
    for tau in (1 / args.alpha, 2.0):  # proposals at tau = 1/alpha (default) and deliberately noisy ones
        config, presto = sampling_configs(
            "step",
            budget=args.budget,
            alpha=args.alpha,
            tau=tau,
            max_new_tokens=args.length,
            block_size=args.block,
            steps=args.steps,
        )
        sampler = Sampler(engine, config, presto)
        t0 = time.perf_counter()
        ok = calls = 0
        for i, (pb, p) in enumerate(zip(problems, prompts)):
            res = sampler.run(p, seed=i, prompt_id=i)
            ok += is_correct(pb, engine.decode(res.state.tokens))
            calls += res.metrics.model_calls + res.metrics.extend_calls
        results[f"power alpha={args.alpha:g}, proposals tau={tau:g} (PreSTO step, K={args.steps}/block)"] = (
            ok / len(problems),
            time.perf_counter() - t0,
            calls / len(problems),
        )
    print(f"tiny-adder, {len(problems)} held-out problems (2-3 digit operands), response length {args.length}")
    for name, (acc, secs, per_problem) in results.items():
        extra = f", {per_problem:.1f} model calls/problem" if per_problem != 1.0 else ""
        print(f"  {name:<62} accuracy {acc:6.1%}   ({secs:.1f} s{extra})")


if __name__ == "__main__":
    main()
