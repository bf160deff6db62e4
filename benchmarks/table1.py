"""Paper Table 1 (b)(c) analog: sequential vs PreSTO for PowerMH, EntropyCut and MultiTryMH.

For each sampler, on the same prompts and keys in one run: sequential (path keys) vs
`bfs` and `predictive`; sequential (step keys) vs `step` and `step` + cost-aware. Per
method: model calls, transitions per call, requests per call, time per call, cumulative
call time per prompt, speedup over the sequential sampler with the same keys (paper
Eq. 20, ratio of mean cumulative call times) and its median and range over prompts,
and whether each PreSTO chain ended in the sequential chain's tokens (seeded engines).

N_pf counts decisions: a MultiTryMH decision sends its m candidates and m - 1 reference
draws (2m - 1 requests) in the same call. Every sequential MultiTryMH step reuses the
log-probabilities of its sampling pass (no rescoring; `--rescore` adds the paper's
baseline, which rescores every draw at every temperature of the set).

    python -m benchmarks.table1 --engine embedded [--prompts 10] [--json out.json]
    bash scripts/sglang_server.sh start && python -m benchmarks.table1 --engine sglang --url http://127.0.0.1:30000
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

SAMPLERS = ("powermh", "entropycut", "multitry")


def methods(kernel: str, budgets: list[int], step_budgets: list[int], rules: list[str]) -> list[Method]:
    path = [Method(r, "path", r, b, kernel=kernel) for r in ("bfs", "predictive") if r in rules for b in budgets]
    step = [Method("step", "step", "step", b, kernel=kernel) for b in step_budgets if "step" in rules]
    cost = [
        Method("step+cost", "step", "step", b, cost_aware=True, kernel=kernel)
        for b in step_budgets[-1:]
        if "step+cost" in rules
    ]
    seq_path = [Method("sequential", "path", kernel=kernel)] if path else []
    seq_step = [Method("sequential", "step", kernel=kernel)] if step or cost else []
    return [*seq_path, *path, *seq_step, *step, *cost]


def rescoring_rows(engine, prompts, args, rows: list[dict]) -> list[dict]:
    """Sequential MultiTryMH with rescoring (the paper's baseline), and every MultiTryMH row's
    speedup over it (ratio of mean cumulative call times, same keys)."""
    from benchmarks.rescoring import RescoringEngine

    seq = [Method("sequential (rescoring)", k, kernel="multitry") for k in ("path", "step")]
    out = []
    for m in seq:
        (row,) = compare_rules(RescoringEngine(engine), prompts, args, [m])
        out.append({"kernel": "multitry", **row})
        for r in rows:
            if r["kernel"] == "multitry" and r["keys"] == m.keying:
                r["speedup_vs_rescoring"] = row["call_time_per_prompt_s"] / r["call_time_per_prompt_s"]
        row["speedup_vs_rescoring"] = 1.0
    for r in rows + out:
        if "speedup_vs_rescoring" in r:
            print(
                f"vs rescoring: {r['rule']:24s} {r['keys']:4s} N_pf={r['budget']:2d} {r['speedup_vs_rescoring']:.2f}x"
            )
    return out


def table(rows: list[dict]) -> str:
    return markdown_table(
        rows,
        [
            ("sampler", lambda r: r["kernel"]),
            *RULE_COLUMNS,
            (
                "per-prompt median (range)",
                lambda r: f"{r['speedup_median']:.2f} ({r['speedup_min']:.2f}-{r['speedup_max']:.2f})",
            ),
            ("same as sequential", lambda r: r["same_final_tokens"]),
        ],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_args(ap, T=32, K=12)
    ap.add_argument("--samplers", type=lambda t: t.split(","), default=list(SAMPLERS))
    ap.add_argument("--rules", type=lambda t: t.split(","), default=["bfs", "predictive", "step", "step+cost"])
    ap.add_argument("--beta", type=float, default=4.0, help="EntropyCut's cut-law power")
    ap.add_argument("--tries", type=int, default=4, help="MultiTryMH's candidates per transition")
    ap.add_argument(
        "--try-temperatures", type=lambda t: tuple(float(x) for x in t.split(",")), default=(0.25, 0.5, 1.0)
    )
    ap.add_argument(
        "--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[8], help="N_pf of bfs/predictive"
    )
    ap.add_argument(
        "--step-budgets",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[8, 20],
        help="N_pf of step (the last one also for step+cost)",
    )
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument(
        "--rescore",
        action="store_true",
        help="embedded engine: also run the paper's sequential MultiTryMH, which rescores every draw at "
        "every temperature, and give PreSTO's speedup over it",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bad = [s for s in args.samplers if s not in SAMPLERS]
    if bad:
        ap.error(f"--samplers: unknown {bad}; choose from {list(SAMPLERS)}")
    engine = make_engine(args)
    print(
        f"engine={args.engine} T={args.T} K={args.K} alpha={args.alpha} beta={args.beta} tries={args.tries} "
        f"try_temperatures={args.try_temperatures} N_pf={args.budgets} step N_pf={args.step_budgets} "
        f"prompts={args.prompts} seed={args.seed}",
        flush=True,
    )
    print(machine(), flush=True)
    t0 = time.perf_counter()
    prompts = [engine.chat_prompt(p) for p in PROMPTS[: args.prompts]]
    rows = []
    for kernel in args.samplers:
        for row in compare_rules(engine, prompts, args, methods(kernel, args.budgets, args.step_budgets, args.rules)):
            rows.append({"kernel": kernel, **row})
        print(f"-- {kernel} done at {time.perf_counter() - t0:.0f} s", flush=True)
    if args.rescore and "multitry" in args.samplers and args.engine == "embedded":
        rows += rescoring_rows(engine, prompts, args, rows)
    print(table(rows))
    print(f"total {time.perf_counter() - t0:.0f} s")
    if args.json:
        out = {"args": {k: str(v) for k, v in vars(args).items()}, "machine": machine(), "rows": rows}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
