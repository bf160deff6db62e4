"""PreSTO under load (issue 28, item 3): many chains in flight on one CPU server.

For 1, 2, 4, 8 and 16 chains in flight over the same prompts: sequential PowerMH, PreSTO
step with the per-chain cost-aware budget (each chain plans and calls alone, the server
batches the concurrent calls), and PreSTO step with the shared scheduler
(:mod:`presto_sgl.scheduling.scheduler`: one merged call per round, requests per chain from a
call-time model of the merged calls). Per run: transitions per second (wall time,
extensions included), p50 / p90 latency per prompt, transitions per call, merged calls.
``--kernels`` adds EntropyCut and MultiTryMH (sequential and scheduled PreSTO step).

"shared" is the default scheduler, which on a server engine lets each chain plan and call alone
(issue 39: the per-chain rule); "load-cap" weighs every chain's offer against the server's load
(``Scheduler(share_from=1)``, the CLI's ``--load-cap-from 1``; the default before issue 39).

Chains: SmolLM2-135M-Instruct, reasoning-gym one-digit arithmetic chat prompts, T = 64 in
two blocks of 32, K = 10 per block, alpha 4, tau 1/4, N_pf = 20. The server is started
here (float32, scripts/sglang_server.sh / vllm_server.sh) and runs alone.

    python -m benchmarks.scheduler_load --server sglang --prompts 16 --inflight 1,2,4,8,16 \\
        --json benchmarks/results/scheduler/sglang.json
    python -m benchmarks.scheduler_load --report-only benchmarks/results/scheduler/sglang.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.compare import machine
from benchmarks.load import DATASET
from presto_sgl import sampling_configs
from presto_sgl.samplers import Sampler
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.scheduling.scheduler import Scheduler
from presto_sgl.tasks.registry import load_task
from tests.support.servers import server_script

POWER: dict[str, Any] = dict(alpha=4.0, max_new_tokens=64, block_size=32, steps=10)
BUDGET = 20
SEED = 28
MODES: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {  # name: (sampling_configs, Scheduler options)
    "sequential": (dict(rule="sequential"), None),
    "step-cost per-chain": (dict(rule="step", budget=BUDGET, cost_aware=True), None),
    "step-cost shared": (dict(rule="step", budget=BUDGET, cost_aware=True), {}),
    "step-cost load-cap": (dict(rule="step", budget=BUDGET, cost_aware=True), {"share_from": 1}),
}
SERVERS = {
    "sglang": ("sglang_server.sh", ("--dtype", "float32", "--batched-attention", "--cdf-sampling", "--timeout", "900")),
    "vllm": ("vllm_server.sh", ("--dtype", "float32", "--kv-cache-gib", "2", "--timeout", "900")),
}


@contextmanager
def server(kind: str, port: int):
    script, flags = SERVERS[kind]
    server_script(script, "start", "--port", str(port), *flags)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server_script(script, "stop", "--port", str(port))


def engine_of(kind: str, url: str):
    if kind == "sglang":
        from presto_sgl.engines.sglang.http import SGLangEngine

        return SGLangEngine(url, timeout_s=900)
    from presto_sgl.engines.vllm.http import VLLMEngine

    return VLLMEngine(url, timeout_s=900)


def prompts_of(engine, n: int) -> list[list[int]]:
    """The first ``n`` distinct chat prompts of the task, by the served model's tokenizer."""
    _, problems = load_task(DATASET, limit=4 * n, seed=SEED)
    out: list[list[int]] = []
    for p in problems:
        ids = list(engine.text.prompt_ids(p.prompt, chat=True))
        if ids not in out:
            out.append(ids)
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} distinct prompts in {DATASET}")


def run_one(kind: str, url: str, prompts, mode: str, inflight: int, kernel: str = "powermh") -> dict:
    options, scheduling = MODES[mode]
    engine = engine_of(kind, url)
    cfg, presto = sampling_configs(method=kernel, **options, **POWER)
    sampler = Sampler(engine, cfg, presto)
    scheduler = Scheduler.for_method(sampler, **scheduling) if scheduling is not None else None
    latency: dict[int, float] = {}

    def timed(prompt, *, seed, prompt_id, **kw):
        t0 = time.perf_counter()
        result = sampler.run(prompt, seed=seed, prompt_id=prompt_id, **kw)
        latency[prompt_id] = time.perf_counter() - t0
        return result

    t0 = time.perf_counter()
    results = run_prompts(timed, prompts, seed=SEED, workers=inflight, scheduler=scheduler)
    wall = time.perf_counter() - t0
    transitions = sum(r.metrics.transitions for r in results)
    mh_calls = sum(r.metrics.model_calls for r in results)
    lat = sorted(latency.values())
    out = {
        "server": kind,
        "mode": mode,
        "kernel": kernel,
        "inflight": inflight,
        "prompts": len(prompts),
        "wall_s": round(wall, 2),
        "transitions": transitions,
        "transitions_per_s": round(transitions / wall, 3),
        "chain_mh_calls": mh_calls,
        "transitions_per_call": round(transitions / mh_calls, 3),
        "requests": sum(r.metrics.requests_issued for r in results),
        "latency_p50_s": round(statistics.median(lat), 2),
        "latency_p90_s": round(lat[int(0.9 * (len(lat) - 1) + 0.5)], 2),
        "latency_s": [round(latency[i], 2) for i in range(len(prompts))],
    }
    if scheduler is not None and scheduler.stats.calls:  # (none: every chain called alone)
        s = scheduler.stats
        out |= {
            "dispatch": scheduler.dispatch,
            "merged_calls": s.calls,
            "rows_sent": s.rows,
            "rows_offered": s.offered_rows,
            "chains_per_call_median": statistics.median(s.chains_per_call),
            "time_per_merged_call_s": round(s.call_s / max(1, s.calls), 3),
            "theta": [round(float(x), 5) for x in scheduler.time_model.theta],
            "taken": [list(t) for t in s.taken],
            "load_model": {"a": scheduler.load.a, "b": scheduler.load.b},
        }
    return out


def row(r: dict) -> str:
    extra = (
        f" scheduler: {r['dispatch']}, {r['merged_calls']} calls ({r['time_per_merged_call_s']} s, "
        f"{r['chains_per_call_median']} chains each), rows sent {r['rows_sent']}/{r['rows_offered']} offered"
        if "merged_calls" in r
        else ""
    )
    return (
        f"{r['server']:6} {r['kernel']:10} {r['mode']:20} x{r['inflight']:<2} {r['transitions_per_s']:7.3f} tr/s  "
        f"p50 {r['latency_p50_s']:6.1f} s  p90 {r['latency_p90_s']:6.1f} s  {r['transitions_per_call']:5.2f} tr/call"
        f"  wall {r['wall_s']:.0f} s{extra}"
    )


def report(data: dict) -> str:
    runs = data["runs"]
    lines = [
        f"machine: {data['machine']}",
        "",
        "| server | kernel | in flight | mode | transitions/s | vs sequential | p50 latency s (vs seq) | p90 latency s "
        "| per-prompt speedup, median (range) | tr/call |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        seq = next(
            (
                s
                for s in runs
                if s["mode"] == "sequential"
                and s["inflight"] == r["inflight"]
                and s["kernel"] == r["kernel"]
                and s["server"] == r["server"]
            ),
            None,
        )
        ratio = f"{r['transitions_per_s'] / seq['transitions_per_s']:.2f}x" if seq else "-"
        lat = (
            f"{r['latency_p50_s']} ({r['latency_p50_s'] / seq['latency_p50_s']:.2f}x)"
            if seq
            else str(r["latency_p50_s"])
        )
        per = "-"
        if seq and seq is not r:
            sp = [a / b for a, b in zip(seq["latency_s"], r["latency_s"], strict=True)]
            per = f"{statistics.median(sp):.2f} ({min(sp):.2f}-{max(sp):.2f})"
        lines.append(
            f"| {r['server']} | {r['kernel']} | {r['inflight']} | {r['mode']} | {r['transitions_per_s']:.3f} | "
            f"{ratio} | {lat} | {r['latency_p90_s']} | {per} | {r['transitions_per_call']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", choices=tuple(SERVERS), default="sglang")
    ap.add_argument("--port", type=int, default=30131)
    ap.add_argument("--url", default=None, help="a server already up (not started or stopped here)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--inflight", default="1,2,4,8,16")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--kernels", default="", help="e.g. entropycut,multitry: sequential and shared, at --kernel-inflight"
    )
    ap.add_argument("--kernel-inflight", default="1,8")
    ap.add_argument("--json", type=Path, default=None, help="results file (appended run by run)")
    ap.add_argument("--report-only", type=Path, default=None)
    args = ap.parse_args()
    if args.report_only:
        print(report(json.loads(args.report_only.read_text())))
        return
    data: dict[str, Any] = {"machine": machine(), "power": POWER, "budget": BUDGET, "runs": []}
    if args.json and args.json.exists():
        data["runs"] = json.loads(args.json.read_text())["runs"]
    print(data["machine"], flush=True)
    plan = [("powermh", m, int(n)) for n in args.inflight.split(",") if n for m in args.modes.split(",")]
    plan += [
        (k, m, int(n))
        for k in args.kernels.split(",")
        if k
        for n in args.kernel_inflight.split(",")
        for m in ("sequential", "step-cost shared")
    ]
    with server(args.server, args.port) if args.url is None else _given(args.url) as url:
        prompts = prompts_of(engine_of(args.server, url), args.prompts)
        for kernel, mode, n in plan:
            r = run_one(args.server, url, prompts, mode, n, kernel)
            print(row(r), flush=True)
            data["runs"].append(r)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(data, indent=1) + "\n")
    print(report(data))


@contextmanager
def _given(url: str):
    yield url


if __name__ == "__main__":
    main()
