"""Paper Table 10, on our engines: planning rules side by side at equal budgets, one run.

Sequential PowerMH (path keys) vs `bfs` (the paper's default) and `predictive` (the
DP of Eq. 19 with the eps-certainty predictor); sequential PowerMH (step keys) vs
`step` and `step` + cost-aware budget; at N_pf = 8, 10, 12, 16, 20 (for cost-aware,
N_pf is the most it may request). Per method: model calls, transitions per call,
requests per call, time per call, cumulative call time per prompt, speedup over the
sequential sampler with the same keys (paper Eq. 20), and the eps-certainty shares of
the scored decisions (paper Fig. 4).

    python -m benchmarks.table10 --engine embedded [--prompts 2] [--json out.json]
    bash scripts/sglang_server.sh start && python -m benchmarks.table10 --engine sglang --url http://127.0.0.1:30000
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from benchmarks.compare import (
    PROMPTS,
    RULE_COLUMNS,
    Method,
    add_engine_args,
    compare_rules,
    machine,
    make_engine,
    markdown_table,
)


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
    return markdown_table(
        rows,
        [
            *RULE_COLUMNS,
            ("coord ms/call", lambda r: f"{r['coordinator_ms_per_call']:.1f}"),
            ("same as sequential", lambda r: r["same_final_tokens"]),
        ],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_args(ap, T=48, K=20)
    ap.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[8, 10, 12, 16, 20])
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--predictor", default="default", help="eps-certainty predictor: default or a saved file")
    ap.add_argument("--online", action="store_true", help="refit the predictor online during each run")
    ap.add_argument(
        "--family",
        choices=("all", "path", "step"),
        default="all",
        help="path: sequential/bfs/predictive only; step: sequential/step/step+cost only",
    )
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engine = make_engine(args)
    print(
        f"engine={args.engine} T={args.T} K={args.K} alpha={args.alpha} N_pf={args.budgets} "
        f"prompts={args.prompts} predictor={args.predictor} online={args.online}",
        flush=True,
    )
    print(machine(), flush=True)
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
