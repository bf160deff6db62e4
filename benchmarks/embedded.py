"""The embedded engine on SmolLM2-135M (CPU): batching, prefix reuse, and PowerMH vs PreSTO.

Part A -- one call of N suffix requests forking one root at uniform cuts (N = 1, 4, 10,
20), after the root's KV is cached: wall time, time relative to a single request
(mean over single requests at the same cuts), cached vs computed prefill tokens, for
two root lengths (prefill work must follow the new tokens, not the root length).

Part B -- sequential PowerMH vs PreSTO (`bfs`, `step`) on the same prompts and keys in
one run: model calls, transitions per call, time per call, cumulative call time,
speedup (paper Eq. 20: ratio of mean cumulative call times) and whether the final
states match the sequential chain's.

    python -m benchmarks.embedded [--model smollm2] [--part A|B|AB] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.compare import PROMPTS, compare_rules, machine
from presto_sgl.chain.keys import ChainKeys
from presto_sgl.engines.base import Request
from presto_sgl.models import embedded_engine
from radix import prefix_sharing


def part_a(engine, args) -> list[dict]:
    rows = []
    for prompt_words in (1, 6):
        prompt = engine.chat_prompt(" ".join([PROMPTS[0]] * prompt_words))
        (root_c,) = engine.generate([Request(tuple(prompt), args.T, 1.0 / args.alpha, seed=1)])
        root = tuple(prompt) + root_c.tokens
        engine.generate([Request(root, 1, 1.0, seed=2)])  # cache the whole root's KV
        keys = ChainKeys(7)
        cuts = [keys.decision(1, k).cut(args.T) for k in range(20)]
        reqs = [
            Request(root[: len(prompt) + c], args.T - c, 1.0 / args.alpha, seed=100 + k) for k, c in enumerate(cuts)
        ]
        singles = []
        for r in reqs[:6]:
            t0 = time.perf_counter()
            engine.generate([r])
            singles.append(time.perf_counter() - t0)
        single = statistics.mean(singles)
        for n in (1, 4, 10, 20):
            longest = min(reqs[:n], key=lambda r: len(r.prefix))  # the request that sets the step count
            t0 = time.perf_counter()
            engine.generate([longest])
            t_longest = time.perf_counter() - t0
            t0 = time.perf_counter()
            engine.generate(reqs[:n])
            dt = time.perf_counter() - t0
            st = engine.last_call
            share = prefix_sharing(root, [r.prefix for r in reqs[:n]])
            rows.append(
                {
                    "root_len": len(root),
                    "requests": n,
                    "seconds": dt,
                    "x_single": dt / single,
                    "x_longest_single": dt / t_longest,
                    "new_tokens": st.decode_tokens,
                    "prefill_computed": st.prefill_tokens,
                    "prefill_cached": st.cached_tokens,
                    "steps": st.forward_steps,
                    "radix_segments": share.segments,
                    "unique_prefix_tokens": share.unique_prefix_tokens,
                }
            )
            print(
                f"A root={len(root):4d} N={n:2d} {dt:6.2f}s  "
                f"x{dt / single:4.2f} of a mean single request ({single:.2f}s)"
                f"  x{dt / t_longest:4.2f} of its longest request alone ({t_longest:.2f}s)  new={st.decode_tokens:4d}"
                f"  steps={st.forward_steps}  prefill computed={st.prefill_tokens} cached={st.cached_tokens}"
                f"  batch radix: {share.segments} segments over {share.unique_prefix_tokens} unique prefix tokens",
                flush=True,
            )
    return rows


def part_b(engine, args) -> list[dict]:
    return compare_rules(engine, [engine.chat_prompt(p) for p in PROMPTS[: args.prompts]], args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--part", default="AB")
    ap.add_argument("--T", type=int, default=48, help="response length (one block)")
    ap.add_argument("--K", type=int, default=20, help="MH transitions")
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[10, 20], help="N_pf values")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    engine = embedded_engine(args.model)
    print(
        f"model={args.model} T={args.T} K={args.K} alpha={args.alpha} N_pf={args.budgets} threads={args.threads}",
        flush=True,
    )
    print(machine(), flush=True)
    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if "A" in args.part:
        out["A"] = part_a(engine, args)
    if "B" in args.part:
        out["B"] = part_b(engine, args)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
