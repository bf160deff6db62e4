"""The EOS-terminated target against the fixed-length one (issue 29): tokens, time, PreSTO's gain.

Runs ``presto-sgl run`` on one task once per (target, rule): the fixed-length target
(``--ending fixed``, the paper's) and the EOS-terminated one (``--ending eos``), each with
sequential PowerMH and with PreSTO (the cost-aware step rule), same K, T, blocks, seed and
prompts, one chain at a time. Reports per run: tokens the engine decoded per prompt, wall
time per prompt, transitions per MH call, accuracy; then, paired by prompt, fixed over eos
(tokens, time) and PreSTO's speedup over sequential within each target; and the paired
TOST of the answer's log-likelihood and confidence (the tokens up to and including the first
stop token: the fixed-length answers cut at EOS) of eos against fixed, per rule.

    python -m benchmarks.eos_target --engine embedded \\
        --max-new-tokens 128 --block-size 32 --out /tmp/eos-gym --json benchmarks/results/eos/gym_embedded.json
    python -m benchmarks.eos_target --engine sglang --url http://127.0.0.1:30131 --dataset humaneval \\
        --max-new-tokens 256 --block-size 64 --out /tmp/eos-he --json benchmarks/results/eos/humaneval_sglang.json

A run directory that already exists under --out is reported, not rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.compare import machine
from presto_sgl.evaluation.equivalence import compare_runs, load_records

RULES = {"seq": ["--rule", "sequential"], "presto": ["--rule", "step", "--cost-aware"]}
TARGETS = ("fixed", "eos")
STATISTICS = ("answer_log_likelihood", "answer_confidence")


def run(target: str, rule: str, ns: argparse.Namespace) -> Path:
    out = Path(ns.out) / f"{target}-{rule}"
    if out.exists():
        return out
    engine = ["--engine", ns.engine] + (["--url", ns.url] if ns.url else [])
    cmd = [
        sys.executable,
        "-m",
        "presto_sgl",
        "run",
        "--dataset",
        ns.dataset,
        "--limit",
        str(ns.prompts),
        *engine,
        "--max-new-tokens",
        str(ns.max_new_tokens),
        "--block-size",
        str(ns.block_size),
        "--steps",
        str(ns.steps),
        "--budget",
        str(ns.budget),
        "--seed",
        str(ns.seed),
        "--workers",
        "1",
        "--no-progress",
        "--ending",
        target,
        *RULES[rule],
        "--out",
        str(out),
    ]
    print(" ".join(cmd), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    print(f"{target}-{rule}: {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "sum": round(sum(values), 3),
    }


def report(ns: argparse.Namespace, dirs: dict[tuple[str, str], Path]) -> dict:
    recs = {key: load_records(d) for key, d in dirs.items()}
    ids = sorted(set.intersection(*(set(r) for r in recs.values())), key=lambda i: (len(i), i))
    tokens = {k: [recs[k][i]["metrics"]["tokens_decoded"] for i in ids] for k in recs}
    seconds = {k: [recs[k][i]["wall_s"] for i in ids] for k in recs}
    rows = []
    for (target, rule), r in recs.items():
        calls = sum(r[i]["metrics"]["model_calls"] for i in ids)  # MH calls (extensions apart)
        mh = sum(r[i]["metrics"]["transitions"] for i in ids)
        rows.append(
            {
                "target": target,
                "rule": rule,
                "tokens": summary(tokens[target, rule]),
                "seconds": summary(seconds[target, rule]),
                "transitions_per_call": round(mh / max(1, calls), 3),
                "time_per_call_s": round(sum(r[i]["metrics"]["call_time_s"] for i in ids) / max(1, calls), 3),
                "response_tokens": summary([len(r[i]["response_ids"]) for i in ids]),
                "accuracy": round(sum(r[i]["grade"]["correct"] for i in ids) / len(ids), 3),
            }
        )

    def ratios(a: list[float], b: list[float]) -> dict:
        per = [x / y for x, y in zip(a, b)]
        return {**summary(per), "by_sums": round(sum(a) / sum(b), 3)}

    paired = {}
    for rule in RULES:
        paired[f"fixed/eos tokens, {rule}"] = ratios(tokens["fixed", rule], tokens["eos", rule])
        paired[f"fixed/eos time, {rule}"] = ratios(seconds["fixed", rule], seconds["eos", rule])
    for target in TARGETS:
        paired[f"presto speedup, {target}"] = ratios(seconds[target, "seq"], seconds[target, "presto"])
    tost = {}
    # confidence needs p0 entropies from the rescoring pass (embedded, reference; not a server's scoring pass)
    have = [s for s in STATISTICS if all(r[i].get(s) is not None for r in recs.values() for i in ids)]
    for rule in RULES:
        tests = compare_runs(dirs["fixed", rule], dirs["eos", rule], statistics=have)
        tost[rule] = [
            {
                "statistic": t.statistic,
                "mean_fixed": round(t.mean_a, 4),
                "mean_eos": round(t.mean_b, 4),
                "diff": round(t.diff, 4),
                "ci90": [round(x, 4) for x in t.ci90],
                "margin": round(t.margin, 4),
                "p_holm": round(t.p_holm, 4),
                "equivalent": t.equivalent,
            }
            for t in tests
        ]
    return {
        "cpu": machine(),
        "engine": ns.engine,
        "dataset": ns.dataset,
        "prompts": len(ids),
        "shape": {"T": ns.max_new_tokens, "B": ns.block_size, "K": ns.steps, "budget": ns.budget},
        "rows": rows,
        "paired": paired,
        "tost": tost,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", default="embedded")
    ap.add_argument("--url")
    ap.add_argument("--dataset", default="reasoning-gym:basic_arithmetic:max_terms=2,max_digits=1,operators=('+','-')")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help="folder of the run directories")
    ap.add_argument("--json")
    ns = ap.parse_args()
    os.environ.setdefault("HF_HOME", str(Path(".cache/hf").resolve()))
    dirs = {(target, rule): run(target, rule, ns) for target in TARGETS for rule in RULES}
    result = report(ns, dirs)
    print(result["cpu"])
    for row in result["rows"]:
        t, s = row["tokens"], row["seconds"]
        print(
            f"{row['target']:5} {row['rule']:6} tokens/prompt {t['median']} ({t['min']}-{t['max']})  s/prompt "
            f"{s['median']} ({s['min']}-{s['max']}), total {s['sum']}  tr/call {row['transitions_per_call']}  "
            f"response tokens {row['response_tokens']['median']}  accuracy {row['accuracy']}"
        )
    for name, r in result["paired"].items():
        print(f"{name}: median {r['median']} ({r['min']}-{r['max']}), by sums {r['by_sums']}")
    for rule, tests in result["tost"].items():
        for t in tests:
            print(
                f"TOST {rule} {t['statistic']}: fixed {t['mean_fixed']} eos {t['mean_eos']} diff {t['diff']} "
                f"ci90 {t['ci90']} margin {t['margin']} p_holm {t['p_holm']} equivalent {t['equivalent']}"
            )
    if ns.json:
        Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
