"""Sequential PowerMH vs PreSTO rules side by side on one engine (shared by the benchmarks).

Same prompts and keys for every method in one run: model calls, transitions per call,
time per call, cumulative model-call time, speedup (paper Eq. 20: ratio of mean
cumulative call times against the sequential sampler with the same keying), cached-token
share, acceptance, eps-certainty shares of the scored decisions (paper Fig. 4), and
whether each PreSTO chain ended with the sequential chain's tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from presto_sgl import Sampler, SampleResult, registry, sampling_configs
from presto_sgl.cli.options import answer_valid
from presto_sgl.fields import params_of
from presto_sgl.predictor.certainty import CLASSES, certainty_class

PROMPTS = [
    "What is 17 + 25? Answer with the number.",
    "Name a prime number between 10 and 20.",
    "Complete the sentence: The capital of France is",
    "What is 6 times 7?",
    "Name three primary colors.",
    "What is the largest planet in the solar system?",
    "Write one sentence about the sea.",
    "What is 9 minus 4? Answer with the number.",
    "Give a synonym for happy.",
    "How many days are in a week?",
    "What color is the sky on a clear day?",
    "Name an animal that can fly.",
]
"""Chat prompts shared by the SmolLM2 benchmarks."""


@dataclass(frozen=True)
class Method:
    """One sampler of a comparison: ``rule`` (``sequential`` PowerMH or a PreSTO rule) with
    ``keying``; the PreSTO settings are :func:`presto_sgl.sampling_configs`' arguments."""

    label: str
    keying: str
    rule: str = "sequential"
    budget: int = 1  # N_pf (1 for sequential: one request per call)
    predictor: str = "default"
    online: bool = False
    cost_aware: bool = False
    kernel: str = "powermh"  # the MH kernel (PowerConfig.kernel)

    @property
    def sequential(self) -> bool:
        return self.rule == "sequential"

    def sampler(self, engine, args):
        """The sampler of this method on ``engine`` (``args``: T, K, alpha; blocks of ``args.B``
        tokens, default one block of T; the kernel's own parameters, e.g. beta, tries, try_temperatures, when
        ``args`` has them; under ``args.constraint``, when set, with the EOS-terminated target)."""
        own = [p.name for p in params_of(registry.KERNELS[self.kernel].params)]
        kernel = {k: getattr(args, k) for k in own if hasattr(args, k)}
        config, presto = sampling_configs(
            self.rule,
            keying=self.keying,
            budget=self.budget,
            predictor=self.predictor,
            online=self.online,
            cost_aware=self.cost_aware,
            alpha=args.alpha,
            max_new_tokens=args.T,
            block_size=getattr(args, "B", args.T),
            steps=args.K,
            method=self.kernel,
            **kernel,
        )
        constraint = getattr(args, "constraint", None)
        if constraint is not None:  # structured: the EOS-terminated target under the constraint
            config = replace(config, target=replace(config.target, ending="eos", constraint=constraint))
        return Sampler(engine, config, presto)


def default_methods(budgets) -> list[Method]:
    """Sequential (path keys), bfs at each budget, sequential (step keys), step at each budget."""
    return [
        Method("sequential", "path"),
        *[Method("bfs", "path", "bfs", b) for b in budgets],
        Method("sequential", "step"),
        *[Method("step", "step", "step", b) for b in budgets],
    ]


def compare_rules(engine, prompts, args, methods: list[Method] | None = None, monitor=None) -> list[dict]:
    """``args``: T, K, alpha, seed, budgets. Each keying's sequential method must come first.

    ``monitor`` (e.g. ``SGLangEngine.monitor``): a context-manager factory around each
    method's runs; its ``summary()`` adds the server's KV-pool peak to the row."""
    rows = []
    seq_states: dict[str, list] = {}
    seq_time: dict[str, float] = {}
    seq_prompt_times: dict[str, list[float]] = {}
    for m in methods or default_methods(args.budgets):
        results: list[SampleResult] = []
        classes: Counter[int] = Counter()

        def count(stage, k, state, tr, classes=classes):
            classes[certainty_class(tr.log_accept)] += 1

        # One sampler per method over all prompts, as a user samples a dataset: what a
        # planner learns online (time-per-call model, predictor refits) carries over.
        sampler = m.sampler(engine, args)
        with monitor() if monitor is not None else contextlib.nullcontext() as server:
            for i, p in enumerate(prompts):
                results.append(sampler.run(p, seed=args.seed, prompt_id=i, on_transition=count))
        ms = [r.metrics for r in results]
        calls = sum(x.model_calls for x in ms)
        call_time = statistics.mean(x.call_time_s for x in ms)
        if m.sequential:
            seq_states[m.keying] = [r.state for r in results]
            seq_time[m.keying] = call_time
            seq_prompt_times[m.keying] = [x.call_time_s for x in ms]
        per_prompt = [s / x.call_time_s for s, x in zip(seq_prompt_times[m.keying], ms)]
        same = [r.state.tokens == s.tokens for r, s in zip(results, seq_states[m.keying])]
        same_str = f"{sum(same)}/{len(same)}" if engine.capabilities.seeded else "n/a (unseeded engine)"
        scored = sum(classes.values())
        row = {
            "rule": m.label,
            "keys": m.keying,
            "budget": m.budget,
            "calls_per_prompt": calls / len(ms),
            "transitions_per_call": sum(x.transitions for x in ms) / calls,
            "requests_per_call": sum(x.requests_issued for x in ms) / calls,
            "time_per_call_s": sum(x.call_time_s for x in ms) / calls,
            "call_time_per_prompt_s": call_time,
            "speedup": seq_time[m.keying] / call_time,
            "speedup_median": statistics.median(per_prompt),
            "speedup_min": min(per_prompt),
            "speedup_max": max(per_prompt),
            "cached_share": sum(x.cached_tokens for x in ms) / max(1, sum(x.prefill_tokens for x in ms)),
            "acceptance": sum(x.accepted for x in ms) / sum(x.transitions for x in ms),
            "certainty_shares": {CLASSES[c]: classes[c] / scored for c in range(3)},
            "coordinator_ms_per_call": 1e3 * sum(x.coordinator_time_s for x in ms) / calls,
            "same_final_tokens": same_str,
        }
        constraint = getattr(args, "constraint", None)
        if constraint is not None:  # answers that validate, checked apart from the grammar that masked them
            answers = [(engine.text.answer(r.state.tokens), r.state.length) for r in results]
            ok = [answer_valid(constraint, a.text, a.eos_index, n) for a, n in answers]
            row["valid"] = f"{sum(bool(v) for v in ok)}/{len(ok)}"
        kv = ""
        if server is not None:
            s = server.summary()
            row.update(kv_tokens_peak=s.kv_tokens_peak, kv_usage_peak=s.kv_usage_peak)
            kv = f" kv-peak={s.kv_tokens_peak}"
        rows.append(row)
        print(
            f"B {m.kernel:10s} {m.label:12s} {m.keying:4s} N_pf={row['budget']:2d} "
            f"calls/prompt={row['calls_per_prompt']:5.1f} "
            f"trans/call={row['transitions_per_call']:5.2f} req/call={row['requests_per_call']:5.2f} "
            f"time/call={row['time_per_call_s']:5.2f}s call time/prompt={call_time:6.1f}s "
            f"speedup={row['speedup']:4.2f} (per prompt median {row['speedup_median']:4.2f}, "
            f"{row['speedup_min']:4.2f}-{row['speedup_max']:4.2f}) "
            f"cached={row['cached_share']:.0%} acc={row['acceptance']:.0%} "
            f"coord={row['coordinator_ms_per_call']:.1f}ms same-as-sequential={row['same_final_tokens']}{kv}",
            flush=True,
        )
    return rows


def add_engine_args(ap: argparse.ArgumentParser, T: int, K: int) -> None:
    """The engine and chain-shape flags every comparison script takes."""
    ap.add_argument("--engine", choices=("embedded", "sglang"), default="embedded")
    ap.add_argument("--model", default="smollm2", help="embedded engine model")
    ap.add_argument("--url", default="http://127.0.0.1:30000", help="sglang server or router URL")
    ap.add_argument("--T", type=int, default=T, help="response length (one block)")
    ap.add_argument("--K", type=int, default=K, help="MH transitions")
    ap.add_argument("--alpha", type=float, default=4.0)


def make_engine(args: argparse.Namespace):
    """The engine of ``--engine`` (embedded SmolLM2 or an SGLang server at ``--url``)."""
    if args.engine == "embedded":
        from presto_sgl.models import embedded_engine

        return embedded_engine(args.model)
    from presto_sgl.engines.sglang.http import SGLangEngine

    return SGLangEngine(args.url)


Column = tuple[str, Callable[[dict], str]]


def markdown_table(rows: Sequence[dict], columns: Sequence[Column]) -> str:
    """A Markdown table of ``rows``: one (header, format) pair per column."""
    head = "| " + " | ".join(h for h, _ in columns) + " |\n|" + "---|" * len(columns)
    return "\n".join([head, *("| " + " | ".join(f(r) for _, f in columns) + " |" for r in rows)])


RULE_COLUMNS: list[Column] = [
    ("rule", lambda r: r["rule"]),
    ("keys", lambda r: r["keys"]),
    ("N_pf", lambda r: str(r["budget"])),
    ("calls/prompt", lambda r: f"{r['calls_per_prompt']:.1f}"),
    ("trans/call", lambda r: f"{r['transitions_per_call']:.2f}"),
    ("req/call", lambda r: f"{r['requests_per_call']:.2f}"),
    ("time/call (s)", lambda r: f"{r['time_per_call_s']:.2f}"),
    ("call time/prompt (s)", lambda r: f"{r['call_time_per_prompt_s']:.1f}"),
    ("speedup", lambda r: f"{r['speedup']:.2f}"),
]
"""The columns of a :func:`compare_rules` row that every table shows."""


def machine() -> str:
    """CPU model, the SIMD flags that matter for torch, and the thread count."""
    import torch

    model, flags = platform.processor() or "?", set()
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "model name":
            model = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
            break
    simd = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return (
        f"cpu={model} flags={','.join(simd) or 'none'} cores={os.cpu_count()} torch_threads={torch.get_num_threads()}"
    )
