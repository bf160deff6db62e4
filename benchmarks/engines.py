"""Engines side by side (paper Case Study 6 / Table 11 analog): the embedded engine, an SGLang
server and a vLLM server, with the same prompts, sampler and keys, in one run.

Engines: ``embedded``, ``sglang`` (one pass, the plugin), ``vllm`` (one pass, the plugin) and
``vllm-two-pass`` (a stock server: decode, then a scoring request per draw).

Part F -- fork batching: per prompt, a root state of T tokens at tau = 1/alpha, then one
call of N requests (N = 1, 4, 10, 20) at keyed uniform cuts of it, and the batch's longest
request sent alone. Reported per N: median and range over the prompts of the call's time
and of its ratio to the longest request alone (the issue's bar: <= 2x at N = 20).
Part B -- sequential PowerMH vs each PreSTO rule per engine (benchmarks/compare.py):
calls per prompt, transitions per call, time per call, cumulative call time, speedup
(mean, and per-prompt median and range), cached-prefix share and, on the servers, peak KV
tokens (sampled from /v1/loads or /metrics).

    bash scripts/sglang_server.sh start --port 30123 && bash scripts/vllm_server.sh start --port 30125
    python -m benchmarks.engines --engines embedded,sglang,vllm --sglang-url http://127.0.0.1:30123 \\
        --vllm-url http://127.0.0.1:30125 --prompts 10 [--shape one|two] [--json out.json]

Shapes: ``one`` is the paper's single block scaled down (T = 64 in one block, K = 20);
``two`` is T = 64 in blocks of B = 32 with K = 10 per block.

``--structured``: Part B's structured row: the prompts of ``benchmarks/structured.py`` (a JSON
object with a thing's name and year), every chain under its schema (the EOS-terminated target,
proposals masked by each engine's own grammar, resumed at the kept prefix); the share of answers
that validate (``jsonschema``) is added to each row.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.compare import PROMPTS, RULE_COLUMNS, Method, compare_rules, machine, markdown_table
from presto_sgl.chain.keys import ChainKeys
from presto_sgl.engines.base import Request

SHAPES = {"one": (64, 64, 20), "two": (64, 32, 10)}  # (T, B, K per block)
FORKS = (1, 4, 10, 20)


def make(name: str, args: argparse.Namespace):
    if name == "embedded":
        from presto_sgl.models import embedded_engine

        return embedded_engine("smollm2")
    if name == "sglang":
        from presto_sgl.engines.sglang.http import SGLangEngine

        return SGLangEngine(args.sglang_url)
    if name in ("vllm", "vllm-two-pass"):
        from presto_sgl.engines.vllm.http import VLLMEngine

        if name == "vllm":
            return VLLMEngine(args.vllm_url)
        return VLLMEngine(args.vllm_stock_url, mode="two-pass")
    raise SystemExit(f"--engines: unknown engine {name!r} (embedded, sglang, vllm, vllm-two-pass)")


def spread(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs)}


def part_f(name: str, engine, prompts, args) -> list[dict]:
    tau = 1 / args.alpha
    times: dict[int, list[float]] = {n: [] for n in FORKS}
    ratios: dict[int, list[float]] = {n: [] for n in FORKS}
    for i, prompt in enumerate(prompts):
        (root,) = engine.generate([Request(tuple(prompt), args.T, tau, seed=i)])
        state = tuple(prompt) + root.tokens
        cuts = [ChainKeys(100 + i).decision(1, k).cut(args.T) for k in range(max(FORKS))]
        for n in FORKS:
            reqs = [
                Request(state[: len(prompt) + c], args.T - c, tau, seed=1000 * i + j) for j, c in enumerate(cuts[:n])
            ]
            t0 = time.perf_counter()
            engine.generate(reqs)
            dt = time.perf_counter() - t0
            longest = max(reqs, key=lambda r: r.max_new_tokens)
            t0 = time.perf_counter()
            engine.generate([longest])
            alone = time.perf_counter() - t0
            times[n].append(dt)
            ratios[n].append(dt / alone)
    rows: list[dict[str, Any]] = []
    for n in FORKS:
        rows.append({"engine": name, "forks": n, "time_s": spread(times[n]), "vs_longest_alone": spread(ratios[n])})
        t, r = rows[-1]["time_s"], rows[-1]["vs_longest_alone"]
        print(
            f"F {name:8s} N={n:2d} call {t['median']:6.2f}s ({t['min']:.2f}-{t['max']:.2f}) "
            f"x longest alone {r['median']:4.2f} ({r['min']:.2f}-{r['max']:.2f})",
            flush=True,
        )
    return rows


RULES = ("bfs", "bfs+cost", "predictive", "predictive+cost", "step", "step+cost")


def methods(rules: list[str], budget: int) -> list[Method]:
    """Sequential PowerMH per keying first, then each rule (``+cost``: the cost-aware budget)."""
    bad = [r for r in rules if r not in RULES]
    if bad:
        raise SystemExit(f"--rules: unknown {bad} (choose from {','.join(RULES)})")

    def method(r: str) -> Method:
        rule = r.removesuffix("+cost")
        return Method(r, "step" if rule == "step" else "path", rule, budget, cost_aware=r.endswith("+cost"))

    path = [method(r) for r in RULES if r in rules and not r.startswith("step")]
    step = [method(r) for r in RULES if r in rules and r.startswith("step")]
    return ([Method("sequential", "path"), *path] if path else []) + (
        [Method("sequential", "step"), *step] if step else []
    )


F_COLUMNS = [
    ("engine", lambda r: r["engine"]),
    ("forks", lambda r: str(r["forks"])),
    ("call (s), median (range)", lambda r: "{median:.2f} ({min:.2f}-{max:.2f})".format(**r["time_s"])),
    ("x longest alone, median (range)", lambda r: "{median:.2f} ({min:.2f}-{max:.2f})".format(**r["vs_longest_alone"])),
]
B_COLUMNS = [
    ("engine", lambda r: r["engine"]),
    *RULE_COLUMNS,
    (
        "speedup per prompt, median (range)",
        lambda r: f"{r['speedup_median']:.2f} ({r['speedup_min']:.2f}-{r['speedup_max']:.2f})",
    ),
    ("cached", lambda r: f"{r['cached_share']:.0%}"),
    ("KV peak (tokens)", lambda r: str(r.get("kv_tokens_peak", "-"))),
    ("same as seq.", lambda r: r["same_final_tokens"]),
    ("valid", lambda r: r.get("valid", "-")),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", default="embedded,sglang,vllm")
    ap.add_argument("--sglang-url", default="http://127.0.0.1:30000")
    ap.add_argument("--vllm-url", default="http://127.0.0.1:8000", help="vLLM with the presto_onepass plugin")
    ap.add_argument(
        "--vllm-stock-url",
        default="http://127.0.0.1:8001",
        help="engine vllm-two-pass: a stock vLLM (scripts/vllm_server.sh start --stock)",
    )
    ap.add_argument("--shape", choices=sorted(SHAPES), default="one")
    ap.add_argument("--part", default="FB", help="F (fork batching), B (rules), or both")
    ap.add_argument(
        "--rules", default=",".join(RULES), help=f"PreSTO rules to compare (default: all of {','.join(RULES)})"
    )
    ap.add_argument("--budget", type=int, default=20, help="N_pf of every PreSTO rule")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=10086)
    ap.add_argument("--structured", action="store_true", help="under benchmarks/structured.py's JSON schema")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    questions = PROMPTS
    if args.structured:
        from benchmarks import structured
        from presto_sgl.constraints import Constraint

        args.constraint, questions = Constraint(json_schema=structured.SCHEMA), structured.PROMPTS
    if args.prompts > len(questions):
        ap.error(f"--prompts: at most {len(questions)}")
    args.T, args.B, args.K = SHAPES[args.shape]
    print(machine())
    print(
        f"shape={args.shape} T={args.T} B={args.B} K={args.K} alpha={args.alpha} N_pf={args.budget} "
        f"prompts={args.prompts}",
        flush=True,
    )
    out: dict = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()}, "F": [], "B": []}
    for name in args.engines.split(","):
        engine = make(name, args)
        print(
            f"engine {name}: {type(engine).__name__} mode={getattr(engine, 'mode', '-')} "
            f"seeded={engine.capabilities.seeded}",
            flush=True,
        )
        prompts = [engine.chat_prompt(p) for p in questions[: args.prompts]]
        if "F" in args.part:
            out["F"] += part_f(name, engine, prompts, args)
        if "B" in args.part:
            rows = compare_rules(
                engine,
                prompts,
                args,
                methods(args.rules.split(","), args.budget),
                monitor=getattr(engine, "monitor", None),
            )
            out["B"] += [{"engine": name, "structured": args.structured, **r} for r in rows]
        if args.json:
            args.json.write_text(json.dumps(out, indent=2))
    if out["F"]:
        print(markdown_table(out["F"], F_COLUMNS))
    if out["B"]:
        print(markdown_table(out["B"], B_COLUMNS))


if __name__ == "__main__":
    main()
