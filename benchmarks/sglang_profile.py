"""Where a call of N forks spends its time on the CPU SGLang server (issue: profile, then fix
what dominates).

The server runs with presto-sgl's timers (``--profile DIR``; presto_sgl/server_side/sglang/cpu/profile.py).
Per prompt, a root state of T tokens, then one call of N requests (N = 1, 4, 10, 20) at
keyed uniform cuts; around each call the client reads the server's cumulative timers and
splits the call's wall time into: attention (torch_native's per-request loops, decode and
extend), the rest of the model forward, sampling (with the one-pass plugin's log-softmax),
the rest of the scheduler's batch step, and what lies outside any batch step (scheduler
loop, tokenizer and detokenizer processes, HTTP). Median over the prompts.

    bash scripts/sglang_server.sh start --port 30123 --profile .cache/profile [--dtype float32] [--batched-attention]
    python -m benchmarks.sglang_profile --url http://127.0.0.1:30123 --profile .cache/profile --prompts 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.compare import PROMPTS, Column, machine, markdown_table
from presto_sgl.chain.keys import ChainKeys
from presto_sgl.engines.base import Request
from presto_sgl.engines.sglang.http import SGLangEngine
from presto_sgl.server_side.sglang.cpu.profile import read

FORKS = (1, 4, 10, 20)
PARTS = ("attention", "forward_other", "sampling", "step_other", "outside")


def settle(out: Path, timeout_s: float = 5.0) -> dict[str, float]:
    """The timers once they stop changing (the last batch step's dump has landed)."""
    last = read(out)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = read(out)
        if now == last:
            return now
        last = now
    return last


def split(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    attn = d.get("attention_decode", 0.0) + d.get("attention_extend", 0.0)
    fwd, smp, step = d.get("model_forward", 0.0), d.get("sampling", 0.0), d.get("batch_step", 0.0)
    return {
        "wall": wall,
        "attention": attn,
        "forward_other": fwd - attn,
        "sampling": smp,
        "step_other": step - fwd - smp,
        "outside": wall - step,
        "steps": d.get("n_batch_step", 0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--profile", type=Path, required=True, help="the server's --profile DIR")
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--alpha", type=float, default=4.0)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--label", default="", help="a name for this server setting in the table")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    engine = SGLangEngine(args.url)
    info = engine.server_info()
    label = args.label or f"{info.get('dtype')} {info.get('attention_backend')}"
    print(machine())
    print(
        f"SGLang {args.url} dtype={info.get('dtype')} mode={engine.mode} T={args.T} prompts={args.prompts}", flush=True
    )
    if not read(args.profile):
        raise SystemExit(f"no timers in {args.profile}: start the server with --profile {args.profile}")
    tau = 1 / args.alpha
    samples: dict[int, list[dict[str, float]]] = {n: [] for n in FORKS}
    for i, text in enumerate(PROMPTS[: args.prompts]):
        prompt = tuple(engine.chat_prompt(text))
        (root,) = engine.generate([Request(prompt, args.T, tau)])
        state = prompt + root.tokens
        cuts = [ChainKeys(100 + i).decision(1, k).cut(args.T) for k in range(max(FORKS))]
        for n in FORKS:
            reqs = [Request(state[: len(prompt) + c], args.T - c, tau) for c in cuts[:n]]
            before = settle(args.profile)
            t0 = time.perf_counter()
            engine.generate(reqs)
            wall = time.perf_counter() - t0
            samples[n].append(split(before, settle(args.profile), wall))
    rows = []
    for n in FORKS:
        med = {k: statistics.median(s[k] for s in samples[n]) for k in ("wall", *PARTS, "steps")}
        rows.append({"setting": label, "forks": n, **med})
        print(
            f"{label} N={n:2d} wall {med['wall']:.2f}s "
            + " ".join(f"{k}={med[k]:.2f}s ({med[k] / med['wall']:.0%})" for k in PARTS),
            flush=True,
        )
    cols: list[Column] = [
        ("setting", lambda r: r["setting"]),
        ("forks", lambda r: str(r["forks"])),
        ("call (s)", lambda r: f"{r['wall']:.2f}"),
        ("batch steps", lambda r: f"{r['steps']:.0f}"),
    ]

    def part(k: str) -> Column:
        return (k, lambda r: f"{r[k]:.2f} ({r[k] / r['wall']:.0%})")

    cols += [part(k) for k in PARTS]
    print(markdown_table(rows, cols))
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
