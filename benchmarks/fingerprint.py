"""Behaviour fingerprint: does a change keep every chain exactly as it was?

For each engine, rule, budget and prompt, records a digest of the final tokens with the
model calls and transitions of one seeded run (cost-aware: tokens and transitions only,
its calls depend on measured times). Run it before a change (``-o before.json``), then
after (``--compare before.json``): any difference is listed and the exit code is 1.

    python -m benchmarks.fingerprint -o before.json [--engines reference tiny smollm2]
    python -m benchmarks.fingerprint -o after.json --compare before.json

Engines: ``reference`` (V=32, 8 prompts, T=32, K=30, budgets 4/8/20), ``tiny`` (the
embedded engine on the committed tiny-adder model, 4 problems, T=16, K=6, budgets 4/10),
``smollm2`` (embedded SmolLM2, 3 chat prompts, T=16, K=8, budget 8; ~2 min on 2 cores).
Targets (``--targets``): ``fixed`` (keys without a target, so older fingerprints compare) and
``eos`` (keys ``ENGINE/eos/...``; the reference LM ends at token 0, the models at their EOS).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from presto_sgl import Sampler, sampling_configs

RULES = {"path": ("sequential", "bfs", "predictive"), "step": ("sequential", "step", "step+cost")}


def digest(tokens) -> str:
    return hashlib.sha1(repr(tuple(tokens)).encode()).hexdigest()[:10]


KERNELS: dict[str, dict[str, Any]] = {
    "powermh": {},
    "entropycut": {"beta": 4.0},
    "multitry": {"tries": 3, "try_temperatures": (0.25, 0.5, 1.0)},
}
"""Each MH kernel and its parameters (powermh's keys carry no kernel name: older fingerprints compare)."""


def runs(engine, prompts, label: str, budgets, kernels=tuple(KERNELS), **power) -> dict[str, list]:
    out: dict[str, list] = {}
    for kernel in kernels:
        out |= kernel_runs(
            engine,
            prompts,
            label if kernel == "powermh" else f"{label}/{kernel}",
            budgets,
            method=kernel,
            **KERNELS[kernel],
            **power,
        )
    return out


def kernel_runs(engine, prompts, label: str, budgets, **power) -> dict[str, list]:
    out: dict[str, list] = {}
    for keying, rules in RULES.items():
        for rule in rules:
            cost = rule == "step+cost"
            for budget in (1,) if rule == "sequential" else budgets:
                config, presto = sampling_configs(
                    "step" if cost else rule,
                    keying=keying,
                    budget=budget,
                    cost_aware=cost,
                    online=rule == "predictive" or cost,
                    **power,
                )
                sampler = Sampler(engine, config, presto)  # one sampler per method: learners carry over
                for i, prompt in enumerate(prompts):
                    m = sampler.run(prompt, seed=7, prompt_id=i)
                    key = f"{label}/{rule}-{keying}/{budget}/{i}"
                    out[key] = [digest(m.state.tokens), None if cost else m.metrics.model_calls, m.metrics.transitions]
    return out


def fingerprint(engines: list[str], targets: list[str]) -> dict[str, list]:
    result: dict[str, list] = {}
    for target in targets:
        result |= target_runs(engines, target)
    return result


def target_runs(engines: list[str], target: str) -> dict[str, list]:
    result: dict[str, list] = {}
    tag = "" if target == "fixed" else f"/{target}"
    if "reference" in engines:
        from presto_sgl.engines.reference import ReferenceEngine, ReferenceLM

        engine = ReferenceEngine(ReferenceLM(32, sharpness=2.0, seed=0), seeded=True, stop_ids=(0,))
        prompts = [[(3 * i + j) % 32 for j in range(8)] for i in range(8)]
        result |= runs(
            engine,
            prompts,
            f"reference{tag}",
            (4, 8, 20),
            alpha=4.0,
            max_new_tokens=32,
            block_size=16,
            steps=30,
            ending=target,
        )
    if "tiny" in engines:
        from presto_sgl.models import embedded_engine
        from presto_sgl.tasks.addition import make_problems

        engine = embedded_engine("tiny-adder", device="cpu")
        prompts = [engine.encode(p.prompt) for p in make_problems(4, seed=3)]
        result |= runs(
            engine, prompts, f"tiny{tag}", (4, 10), alpha=4.0, max_new_tokens=16, block_size=8, steps=6, ending=target
        )
    if "smollm2" in engines:
        from presto_sgl.models import embedded_engine

        engine = embedded_engine("smollm2", device="cpu")
        questions = ("What is the capital of France?", "Name three primary colors.", "Write a haiku about the sea.")
        prompts = [engine.chat_prompt(q) for q in questions]
        result |= runs(
            engine,
            prompts,
            f"smollm2{tag}",
            (8,),
            ("powermh",),
            alpha=4.0,
            max_new_tokens=16,
            block_size=16,
            steps=8,
            ending=target,
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", required=True, help="write the fingerprint (JSON) here")
    parser.add_argument("--engines", nargs="+", choices=("reference", "tiny", "smollm2"), default=["reference", "tiny"])
    parser.add_argument("--targets", nargs="+", choices=("fixed", "eos"), default=["fixed", "eos"])
    parser.add_argument("--compare", metavar="JSON", help="a fingerprint from before the change")
    args = parser.parse_args()
    result = fingerprint(args.engines, args.targets)
    Path(args.output).write_text(json.dumps(result, indent=0, sort_keys=True))
    print(f"{len(result)} runs fingerprinted -> {args.output}")
    if args.compare is None:
        return 0
    before = json.loads(Path(args.compare).read_text())
    common = sorted(set(before) & set(result))
    diff = [k for k in common if before[k] != result[k]]
    for k in diff:
        print(f"DIFF {k}: before {before[k]} after {result[k]}")
    print(f"compared {len(common)} runs: {len(diff)} differ ({len(set(before) ^ set(result))} in one file only)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
