"""Structured power sampling (issue 40): PreSTO under a JSON-schema constraint, against itself
unconstrained, on the same prompts.

For each of 10 chat prompts that ask for a small JSON object, four chains (same seed, K, T, B,
alpha): sequential PowerMH and PreSTO (the cost-aware step rule), each with the constraint
(``Constraint(json_schema=SCHEMA)``: proposals from q masked by the grammar, resumed at the
kept prefix) and without it, all under the EOS-terminated target. Reports per run: seconds per
prompt, MH calls, transitions per call, seconds per call, and the share of answers that are
valid JSON of the schema (``jsonschema``); then, paired by prompt, PreSTO's speedup over
sequential with and without the constraint, and their ratio (the bar: >= 0.8).

The constraint's cost per model call at equal length: per prompt, one call of R = 8 draws
under the constraint, then the same 8 draws unconstrained with each draw's length fixed to
the constrained one's (no stop token), alternated ``--repeats`` times; the ratio of the
medians (the bar: <= 1.10).

    python -m benchmarks.structured --engine embedded --json benchmarks/results/structured/embedded.json
    python -m benchmarks.structured --engine sglang --url http://127.0.0.1:30200 \\
        --json benchmarks/results/structured/sglang.json
    python -m benchmarks.structured --engine vllm --url http://127.0.0.1:30125 \\
        --json benchmarks/results/structured/vllm.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jsonschema

from benchmarks.compare import machine
from presto_sgl import PowerConfig, Sampler, sampling_configs
from presto_sgl.config import Target
from presto_sgl.constraints import Constraint
from presto_sgl.engines.base import Request

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["name", "year"],
}
THINGS = [
    "a famous university",
    "a car company",
    "a European city",
    "a classic novel",
    "a space mission",
    "a painting",
    "a programming language",
    "a bridge",
    "an Olympic games",
    "a rock band",
]
PROMPTS = [f"Reply with a JSON object with the name and the year of {t}." for t in THINGS]
RULES = {"seq": ("sequential", {}), "presto": ("step", {"cost_aware": True})}
FIELDS = ("seconds", "model_calls", "transitions_per_call", "time_per_call_s", "response_tokens")


def configs(rule: str, constrained: bool, ns: argparse.Namespace):
    name, extra = RULES[rule]
    cfg, presto = sampling_configs(
        name,
        alpha=ns.alpha,
        max_new_tokens=ns.max_new_tokens,
        block_size=ns.block_size,
        steps=ns.steps,
        ending="eos",
        **extra,
    )
    if constrained:
        t = cfg.target
        cfg = PowerConfig(
            Target(t.alpha, t.max_new_tokens, t.block_size, "eos", constraint=Constraint(json_schema=SCHEMA)),
            cfg.kernel,
        )
    return cfg, presto


def valid(engine, tokens) -> bool:
    text = engine.text.decode([t for t in tokens if t not in engine.text.stop_ids])
    try:
        jsonschema.validate(json.loads(text), SCHEMA)
    except (json.JSONDecodeError, jsonschema.ValidationError):
        return False
    return True


def chain(engine, prompt, rule: str, constrained: bool, ns) -> dict:
    t0 = time.perf_counter()
    r = Sampler(engine, *configs(rule, constrained, ns)).run(prompt, seed=ns.seed)
    seconds = time.perf_counter() - t0
    m = r.metrics
    return {
        "seconds": seconds,
        "model_calls": m.model_calls,
        "transitions": m.transitions,
        "transitions_per_call": m.transitions_per_call,
        "time_per_call_s": m.time_per_call_s,
        "tokens_decoded": m.tokens_decoded,
        "response_tokens": len(r.state.tokens),
        "valid": valid(engine, r.state.tokens),
        "text": engine.text.decode(r.state.tokens),
    }


def call_cost(engine, prompt, ns) -> dict:
    """Seconds of one call of R draws under the constraint and of the same draws unconstrained at
    the constrained lengths (medians over the repeats, alternated)."""
    c, stop = Constraint(json_schema=SCHEMA), engine.text.stop_ids
    tau = 1.0 / ns.alpha
    masked = [Request(prompt, ns.max_new_tokens, tau, 100 + i, stop=stop, constraint=c) for i in range(8)]
    lengths = [len(x.tokens) for x in engine.generate(masked)]  # warm the grammar cache and the KV
    plain = [Request(prompt, n, tau, 100 + i) for i, n in enumerate(lengths)]
    times: dict[str, list[float]] = {"constrained": [], "unconstrained": []}
    for _ in range(ns.repeats):
        for kind, reqs in (("constrained", masked), ("unconstrained", plain)):
            t0 = time.perf_counter()
            out = engine.generate(reqs)
            times[kind].append(time.perf_counter() - t0)
            if kind == "constrained":
                assert [len(x.tokens) for x in out] == lengths or not engine.capabilities.seeded
    return {k: statistics.median(v) for k, v in times.items()} | {"tokens": sum(lengths)}


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=["embedded", "sglang", "vllm"], default="embedded")
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ns = ap.parse_args()
    if ns.engine == "embedded":
        from presto_sgl.models import embedded_engine

        engine = embedded_engine("smollm2")
    elif ns.engine == "sglang":
        from presto_sgl.engines.sglang.http import SGLangEngine

        engine = SGLangEngine(ns.url)
    else:
        from presto_sgl.engines.vllm.http import VLLMEngine

        engine = VLLMEngine(ns.url)
    info = machine()
    print(info, flush=True)
    rows: list[dict] = []
    for i, question in enumerate(PROMPTS[: ns.prompts]):
        prompt = tuple(engine.chat_prompt(question))
        row: dict = {"prompt": question}
        for constrained in (True, False):
            for rule in RULES:
                key = f"{'json' if constrained else 'free'}-{rule}"
                row[key] = chain(engine, prompt, rule, constrained, ns)
                print(i, key, {k: v for k, v in row[key].items() if k != "text"}, flush=True)
        row["call_cost"] = call_cost(engine, prompt, ns)
        print(i, "call_cost", row["call_cost"], flush=True)
        rows.append(row)
    report = {"machine": info, "engine": ns.engine, "args": {k: str(v) for k, v in vars(ns).items()}, "rows": rows}
    speed = {c: [r[f"{c}-seq"]["seconds"] / r[f"{c}-presto"]["seconds"] for r in rows] for c in ("json", "free")}
    sums = {
        c: sum(r[f"{c}-seq"]["seconds"] for r in rows) / sum(r[f"{c}-presto"]["seconds"] for r in rows)
        for c in ("json", "free")
    }
    cost = [r["call_cost"]["constrained"] / r["call_cost"]["unconstrained"] for r in rows]
    report["summary"] = {
        "speedup_json": summary(speed["json"]),
        "speedup_free": summary(speed["free"]),
        "speedup_json_by_sums": sums["json"],
        "speedup_free_by_sums": sums["free"],
        "speedup_ratio_medians": statistics.median(speed["json"]) / statistics.median(speed["free"]),
        "speedup_ratio_by_sums": sums["json"] / sums["free"],
        "call_cost_ratio": summary(cost),
        "valid_json": {k: sum(r[k]["valid"] for r in rows) / len(rows) for k in rows[0] if "-" in k},
    }
    print("\n| run | s / prompt | MH calls | transitions / call | s / MH call | response tokens | valid JSON |")
    print("|---|---|---|---|---|---|---|")
    for k in ("json-seq", "json-presto", "free-seq", "free-presto"):
        cols = [summary([r[k][f] for r in rows]) for f in FIELDS]
        share = sum(r[k]["valid"] for r in rows)
        print(f"| {k} | {' | '.join(cols)} | {share}/{len(rows)} |")
    print(json.dumps(report["summary"], indent=1))
    if ns.json:
        ns.json.parent.mkdir(parents=True, exist_ok=True)
        ns.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
