"""PowerMH vs PreSTO on a real SGLang server (CPU, SmolLM2-135M), side by side in one run.

Part P -- the cost of scoring: one call of N suffix requests (N = 1, 10, 20) in two-pass
mode (decode at tau, then a prefill-only scoring call for log p0) and, when the server
loads the presto_raw_logprob plugin, in one-pass mode.
Part B -- sequential PowerMH vs PreSTO (`bfs`, `step`) at budgets 8, 10, 20 (see
benchmarks/compare.py), with each method's peak KV-pool use (sampled from /v1/loads every
0.25 s: tokens held by running requests) in a kv-peak column. A router URL works too.

    bash scripts/sglang_server.sh start            # bf16 by default; --dtype float32
    python -m benchmarks.sglang_server --url http://127.0.0.1:30000 [--json out.json]

Any SGLang server works, e.g. a stock one started by hub id (``--keys step`` runs only the
step-keyed pair: sequential and step).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.compare import PROMPTS, compare_rules, default_methods, machine
from presto_sgl.chain.keys import ChainKeys
from presto_sgl.engines.base import Request
from presto_sgl.engines.sglang.http import SGLangEngine


def part_p(url: str, args) -> list[dict]:
    rows = []
    modes = ["two-pass"] + (["one-pass"] if SGLangEngine(url).mode == "one-pass" else [])
    for mode in modes:
        eng = SGLangEngine(url, mode=mode)
        prompt = eng.chat_prompt(PROMPTS[0])
        (root,) = eng.generate([Request(tuple(prompt), args.T, 1 / args.alpha)])
        state = tuple(prompt) + root.tokens
        cuts = [ChainKeys(7).decision(1, k).cut(args.T) for k in range(20)]
        for n in (1, 10, 20):
            reqs = [Request(state[: len(prompt) + c], args.T - c, 1 / args.alpha) for c in cuts[:n]]
            t0 = time.perf_counter()
            eng.generate(reqs)
            dt = time.perf_counter() - t0
            rows.append({"mode": mode, "requests": n, "seconds": dt, "new_tokens": sum(r.max_new_tokens for r in reqs)})
            print(f"P {mode:8s} N={n:2d} {dt:6.2f}s new tokens={rows[-1]['new_tokens']}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--part", default="PB")
    ap.add_argument("--T", type=int, default=48)
    ap.add_argument("--K", type=int, default=20)
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[8, 10, 20])
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument(
        "--keys",
        choices=("path", "step", "both"),
        default="both",
        help="part B's keyings: path (sequential, bfs), step (sequential, step) or both",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engine = SGLangEngine(args.url)
    info = engine.server_info()
    print(machine(), flush=True)
    print(
        f"SGLang {args.url} model={engine.model_path} dtype={info.get('dtype')} mode={engine.mode} "
        f"preferred_sampling_params={info.get('preferred_sampling_params')} "
        f"T={args.T} K={args.K} alpha={args.alpha} N_pf={args.budgets}",
        flush=True,
    )
    out: dict = {
        "machine": machine(),
        "model": engine.model_path,
        "mode": engine.mode,
        "preferred_sampling_params": info.get("preferred_sampling_params"),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    if "P" in args.part:
        out["P"] = part_p(args.url, args)
    if "B" in args.part:
        methods = [m for m in default_methods(args.budgets) if args.keys in ("both", m.keying)]
        out["B"] = compare_rules(
            engine,
            [engine.chat_prompt(p) for p in PROMPTS[: args.prompts]],
            args,
            methods=methods,
            monitor=engine.monitor,
        )
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
