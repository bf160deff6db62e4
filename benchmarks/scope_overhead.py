"""What the power-sampling switch costs a program outside its scope: one plain ``sgl.gen``
program on a real SGLang server, timed in a process that never imports presto-sgl and in one
that installed the switch's interpreter hooks (``power_sampling`` entered and left once), side
by side in one run (the two alternate, ``--rounds`` times each, in turn first; the server's
prefix cache flushed before each).

    bash scripts/sglang_server.sh start --dtype float32
    .venv-sglang/bin/python -m benchmarks.scope_overhead --url http://127.0.0.1:30000 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

QUESTIONS = [f"What is {a} + {b}? Answer briefly." for a, b in ((2, 3), (7, 8), (4, 9), (12, 5), (6, 6), (3, 14))]
QUESTIONS += [f"Name a {thing}." for thing in ("color", "fruit", "planet", "metal", "river", "tree")]


def child(url: str, hooked: bool) -> list[float]:
    """Seconds per program run, one per question (after one warm-up run)."""
    import sglang as sgl

    if hooked:
        from presto_sgl.program import power_sampling

        with power_sampling():
            pass  # the hooks stay installed; the programs below run outside any scope

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=16, temperature=0))

    backend = sgl.RuntimeEndpoint(url)
    qa.run(question=QUESTIONS[0], backend=backend)
    out = []
    for q in QUESTIONS:
        t0 = time.perf_counter()
        state = qa.run(question=q, backend=backend)
        state.sync()
        out.append(time.perf_counter() - t0)
        assert "config" not in (state.get_meta_info("answer") or {}), "a program outside the scope was power-sampled"
    if hooked:
        assert "presto_sgl" in sys.modules
    else:
        assert not any(m.startswith("presto_sgl") for m in sys.modules), "the plain child imported presto-sgl"
    return out


def flush(url: str) -> None:
    """Empty the server's prefix cache (SGLang's ``/flush_cache``)."""
    import urllib.request

    urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/flush_cache", method="POST"), timeout=60).read()


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
        "n": len(values),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:30000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--child", choices=("plain", "hooked"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.url, args.child == "hooked")))
        return
    times: dict[str, list[float]] = {"plain": [], "hooked": []}
    for r in range(args.rounds):
        for variant in ("plain", "hooked") if r % 2 == 0 else ("hooked", "plain"):
            flush(args.url)  # neither variant starts from the other's cached prefixes
            cmd = [sys.executable, "-m", "benchmarks.scope_overhead", "--url", args.url, "--child", variant]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=dict(os.environ))
            times[variant] += json.loads(done.stdout.strip().splitlines()[-1])
    from benchmarks.compare import machine

    ratios = [h / p for p, h in zip(times["plain"], times["hooked"])]
    report = {
        "machine": machine(),
        "questions": len(QUESTIONS),
        "rounds": args.rounds,
        "plain_s": summary(times["plain"]),
        "hooked_s": summary(times["hooked"]),
        "hooked_over_plain": summary(ratios),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
