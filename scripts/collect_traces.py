"""Collect sequential PowerMH traces with SmolLM2 for fitting the eps-certainty predictor.

One JSONL trace per shard, one ``run`` per (prompt, seed), prompt id = the prompt's index
in PROMPTS (so every decision of a prompt shares a group in held-out evaluation). The
defaults are the benchmark settings (alpha 4, B = 16, 48 new tokens, K = 20, path keys);
a sequential chain scores every one of its decisions, ~30 s per prompt on 2 CPU cores.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/collect_traces.py -o traces/smollm2-0.jsonl --shard 0/2 &
    OMP_NUM_THREADS=1 .venv/bin/python scripts/collect_traces.py -o traces/smollm2-1.jsonl --shard 1/2
    .venv/bin/presto-sgl eval-predictor traces/smollm2-*.jsonl --features cut_fraction,log_suffix_fraction
    .venv/bin/presto-sgl fit-predictor traces/smollm2-*.jsonl --features cut_fraction,log_suffix_fraction \
        --note "what the traces are" -o presto_sgl/assets/certainty/default.json

The shipped default was fitted on prompts 0-5 (the runs were stopped when the budget of
collection time ran out; its "training" field says so); traces are not committed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from presto_sgl import Sampler, models, sampling_configs
from presto_sgl.chain.trace import TraceWriter
from presto_sgl.execution.context import RunContext

PROMPTS = [
    # benchmarks/compare.py
    "What is 17 + 25? Answer with the number.",
    "Name a prime number between 10 and 20.",
    "Complete the sentence: The capital of France is",
    "What is 6 times 7?",
    # more of the same kinds: arithmetic, facts, short writing, code, reasoning
    "What is 144 divided by 12?",
    "Is 91 a prime number? Explain briefly.",
    "Write one sentence about the ocean.",
    "Translate 'good morning' into Spanish.",
    "List three colors of the rainbow.",
    "Write a Python function that returns the square of a number.",
    "Why is the sky blue? Answer in one sentence.",
    "What is the largest planet in the solar system?",
    "If a train travels 60 km in one hour, how far does it go in 3 hours?",
    "Give a synonym for 'happy'.",
    "What is 9 squared?",
    "Summarize the plot of Romeo and Juliet in one sentence.",
    "How many days are in a leap year?",
    "Write a haiku about autumn.",
    "What does CPU stand for?",
    "Sort these numbers: 5, 2, 9, 1.",
    "Who wrote 'Pride and Prejudice'?",
    "What is the boiling point of water in Celsius?",
    "Explain what a noun is.",
    "Give me a tip for staying focused while studying.",
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="trace file (JSONL) to write")
    ap.add_argument("--shard", default="0/1", help="I/N: this process takes prompts i with i %% N == I (default 0/1)")
    ap.add_argument(
        "--prompts", type=int, default=len(PROMPTS), help=f"use the first N prompts (default {len(PROMPTS)})"
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="run seeds (default: 0)")
    ap.add_argument("--model", default="smollm2", help="embedded engine model (default: smollm2)")
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--steps", type=int, default=20, help="MH transitions per stage, K (default 20)")
    args = ap.parse_args(argv)
    index, count = (int(x) for x in args.shard.split("/"))
    if not 0 <= index < count:
        ap.error(f"--shard {args.shard!r} must be I/N with 0 <= I < N, e.g. 0/2")
    engine = models.embedded_engine(args.model)
    config, presto = sampling_configs(
        "sequential",
        keying="path",
        alpha=args.alpha,
        max_new_tokens=args.max_new_tokens,
        block_size=args.block_size,
        steps=args.steps,
    )
    sampler = Sampler(engine, config, presto)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as stream:
        trace = TraceWriter(stream)
        for i, text in enumerate(PROMPTS[: args.prompts]):
            if i % count != index:
                continue
            for seed in args.seeds:
                t0 = time.perf_counter()
                result = sampler.run(engine.chat_prompt(text), seed=seed, prompt_id=i, context=RunContext(trace=trace))
                m = result.metrics
                print(
                    f"prompt {i} seed {seed}: {m.transitions} transitions, accepted {m.accepted}, "
                    f"{time.perf_counter() - t0:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
