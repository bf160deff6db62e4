"""Paper Table 10, on our engines: planning rules side by side at equal budgets, one run.

Sequential PowerMH (path keys) vs `bfs` (the paper's default) and `predictive` (the
DP of Eq. 19 with the eps-certainty predictor); sequential PowerMH (step keys) vs
`step` and `step` + cost-aware budget; at N_pf = 8, 10, 12, 16, 20 (for cost-aware,
N_pf is the most it may request). Per method: model calls, transitions per call,
requests per call, time per call, cumulative call time per prompt, speedup over the
sequential sampler with the same keys (paper Eq. 20), and the eps-certainty shares of
the scored decisions (paper Fig. 4).

    python benchmarks/table10.py --engine embedded [--prompts 2] [--json out.json]
    bash scripts/sglang_server.sh start && python benchmarks/table10.py --engine sglang --url http://127.0.0.1:30000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

from compare import PROMPTS, Method, compare_rules  # noqa: E402


def methods(budgets: list[int], predictor: str, online: bool) -> list[Method]:
    def m(label: str, keying: str, rule: str, b: int, **kw) -> Method:
        return Method(label, keying, rule, b, predictor=predictor, online=online, **kw)

    return [
        Method("sequential", "path"),
        *[m("bfs", "path", "bfs", b) for b in budgets],
        *[m("predictive", "path", "predictive", b) for b in budgets],
        Method("sequential", "step"),
        *[m("step", "step", "step", b) for b in budgets],
        *[m("step+cost", "step", "step", b, cost_aware=True) for b in budgets],
    ]


def table(rows: list[dict]) -> str:
    head = ("| rule | keys | N_pf | calls/prompt | trans/call | req/call | time/call (s) | call time/prompt (s) "
            "| speedup | coord ms/call | same as sequential |\n|" + "---|" * 11)
    lines = [head]
    for r in rows:
        lines.append(
            f"| {r['rule']} | {r['keys']} | {r['budget']} | {r['calls_per_prompt']:.1f} | {r['transitions_per_call']:.2f} "
            f"| {r['requests_per_call']:.2f} | {r['time_per_call_s']:.2f} | {r['call_time_per_prompt_s']:.1f} "
            f"| {r['speedup']:.2f} | {r['coordinator_ms_per_call']:.1f} | {r['same_final_tokens']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("embedded", "sglang"), default="embedded")
    ap.add_argument("--model", default="smollm2", help="embedded engine model")
    ap.add_argument("--url", default="http://127.0.0.1:30000", help="sglang server or router URL")
    ap.add_argument("--T", type=int, default=48, help="response length (one block)")
    ap.add_argument("--K", type=int, default=20, help="MH transitions")
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[8, 10, 12, 16, 20])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--predictor", default="default", help="eps-certainty predictor: default or a saved file")
    ap.add_argument("--online", action="store_true", help="refit the predictor online during each run")
    ap.add_argument("--family", choices=("all", "path", "step"), default="all",
                    help="path: sequential/bfs/predictive only; step: sequential/step/step+cost only")
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.engine == "embedded":
        from presto_sgl.models import embedded_engine

        engine = embedded_engine(args.model)
    else:
        from presto_sgl.engines.sglang.http import SGLangEngine

        engine = SGLangEngine(args.url)
    print(f"engine={args.engine} T={args.T} K={args.K} alpha={args.alpha} N_pf={args.budgets} "
          f"prompts={args.prompts} predictor={args.predictor} online={args.online}", flush=True)
    t0 = time.perf_counter()
    prompts = [engine.chat_prompt(p) for p in PROMPTS[: args.prompts]]
    chosen = [m for m in methods(args.budgets, args.predictor, args.online) if args.family in ("all", m.keying)]
    rows = compare_rules(engine, prompts, args, chosen)
    print(table(rows))
    for r in rows:
        if r["rule"] == "sequential":
            shares = "/".join(f"{100 * v:.0f}%" for v in r["certainty_shares"].values())
            print(f"eps-certain reject/uncertain/accept ({r['keys']} keys, sequential): {shares}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
