"""``presto-sgl serve`` under load on a real CPU SGLang server (issue 14): latency
percentiles, throughput, and that every request completed or failed cleanly.

``presto-sgl serve --engine sglang`` runs as a subprocess in front of one float32 SGLang
server (``--batched-attention --cdf-sampling``; started here unless ``--url``); clients are
``openai`` clients on threads (no retries), all on 127.0.0.1. The phases:

- ``closed``: C clients (``--clients``, default 1 and 8) split the N prompts and send them
  back to back as chat completions, rule ``sequential`` and ``step`` (a request field):
  latency p50 / p90 / p99 / max, requests and transitions per second, MH calls per
  request, transitions per MH call; step against sequential at the same C.
- ``overload``: 24 clients x 3 requests into a second server with ``--concurrency 4
  --queue-size 4``: each request must be served in full (200) or refused (429) -- nothing
  else -- and nothing may be left running (``/health``).
- ``disconnect``: 8 clients hang up 2 s into their request: every chain must be cancelled
  (``/health``: running 0, cancelled 8) and the backend calls must stop.

    python -m benchmarks.serve_load --json benchmarks/results/serve/serve_load.json
    python -m benchmarks.serve_load --report-only benchmarks/results/serve/serve_load.json

Chains: SmolLM2-135M-Instruct, reasoning-gym one-digit arithmetic prompts (their text, the
chat template applied by the endpoint), T = 32 in two blocks of 16, K = 4 per block,
alpha 4, N_pf = 20; request i has seed i.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import openai

from benchmarks.compare import machine
from benchmarks.load import DATASET, SEED, sglang_server
from presto_sgl.tasks.registry import load_task
from tests.support.servers import free_port
from tests.support.serving import client, health, serve_cli, wait_for

SERVE = (
    "--engine",
    "sglang",
    "--alpha",
    "4",
    "--max-new-tokens",
    "32",
    "--block-size",
    "16",
    "--steps",
    "4",
    "--budget",
    "20",
    "--request-timeout",
    "1800",
)


def questions(n: int) -> list[str]:
    _, problems = load_task(DATASET, limit=4 * n, seed=SEED)
    out = list(dict.fromkeys(p.prompt for p in problems))[:n]
    if len(out) < n:
        raise SystemExit(f"only {len(out)} distinct prompts in {DATASET}")
    return out


def ask(url: str, model: str, text: str, seed: int, rule: str, timeout_s: float = 1800.0) -> dict:
    """One chat completion: its status and latency, and the chain's metrics when served."""
    t0 = time.perf_counter()
    try:
        r = client(url, timeout_s).chat.completions.create(
            model=model, messages=[{"role": "user", "content": text}], seed=seed, extra_body={"rule": rule}
        )
    except openai.APIStatusError as exc:
        return {
            "status": exc.status_code,
            "error": exc.body.get("type") if isinstance(exc.body, dict) else None,
            "latency_s": time.perf_counter() - t0,
        }
    except openai.APITimeoutError:
        return {"status": "client timeout", "latency_s": time.perf_counter() - t0}
    extra = r.choices[0].model_extra
    assert extra is not None, "the server's reply has no presto field"
    m = extra["presto"]["metrics"]
    return {
        "status": 200,
        "latency_s": time.perf_counter() - t0,
        "transitions": m["transitions"],
        "model_calls": m["model_calls"],
        "call_time_s": m["call_time_s"],
        "text": r.choices[0].message.content,
    }


def clients(n: int, jobs: list, run) -> list[dict]:
    """``jobs`` split over ``n`` client threads, each running its share back to back."""
    out: list[dict] = [{}] * len(jobs)

    def worker(w: int) -> None:
        for i in range(w, len(jobs), n):
            out[i] = run(*jobs[i])

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    q = statistics.quantiles(values, n=100, method="inclusive") if len(values) > 1 else [values[0]] * 99
    return {"p50": q[49], "p90": q[89], "p99": q[98], "max": max(values), "min": min(values)}


def summarize(results: list[dict], wall_s: float) -> dict:
    served = [r for r in results if r.get("status") == 200]
    trans = sum(r["transitions"] for r in served)
    calls = sum(r["model_calls"] for r in served)
    return {
        "requests": len(results),
        "statuses": dict(Counter(str(r.get("status")) for r in results)),
        "wall_s": wall_s,
        "latency_s": percentiles([r["latency_s"] for r in served]),
        "requests_per_s": len(served) / wall_s,
        "transitions_per_s": trans / wall_s,
        "mh_calls_per_request": calls / len(served) if served else 0.0,
        "transitions_per_mh_call": trans / calls if calls else 0.0,
    }


def phase_closed(url: str, model: str, texts: list[str], counts: list[int]) -> list[dict]:
    rows = []
    for c in counts:
        for rule in ("sequential", "step"):
            jobs = [(url, model, t, i, rule) for i, t in enumerate(texts)]
            t0 = time.perf_counter()
            results = clients(c, jobs, ask)
            rows.append({"clients": c, "rule": rule, **summarize(results, time.perf_counter() - t0)})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def phase_overload(backend: str, texts: list[str]) -> dict:
    with serve_cli(*SERVE, "--url", backend, "--concurrency", "4", "--queue-size", "4") as (url, _):
        model = client(url).models.list().data[0].id
        jobs = [(url, model, texts[i % len(texts)], i, "step") for i in range(72)]
        t0 = time.perf_counter()
        results = clients(24, jobs, ask)
        wall = time.perf_counter() - t0
        snap = health(url)["chains"]
    out = {
        **summarize(results, wall),
        "pool": snap,
        "clean": all(r["status"] in (200, 429) for r in results) and snap["running"] == 0 and snap["queued"] == 0,
        "refusals_typed": all(r.get("error") == "rate_limit_exceeded" for r in results if r["status"] == 429),
    }
    print(json.dumps(out), flush=True)
    return out


def phase_disconnect(url: str, model: str, texts: list[str]) -> dict:
    before = health(url)["chains"]
    jobs = [(url, model, t, 100 + i, "sequential", 2.0) for i, t in enumerate(texts[:8])]
    results = clients(8, jobs, ask)
    t0 = time.perf_counter()
    drained = wait_for(lambda: health(url)["chains"]["running"] == 0, timeout_s=60)
    drain_s = time.perf_counter() - t0
    calls = health(url)["backend_calls"]
    time.sleep(3)
    after = health(url)
    out = {
        "statuses": dict(Counter(str(r["status"]) for r in results)),
        "drained": drained,
        "drain_s": drain_s,
        "cancelled": after["chains"]["cancelled"] - before["cancelled"],
        "backend_calls_after_drain": after["backend_calls"] - calls,
    }
    print(json.dumps(out), flush=True)
    return out


def markdown(report: dict) -> str:
    lines = [
        f"Machine: {report['machine']}. {report['prompts']} prompts; {report['config']}.",
        "",
        "| clients | rule | served | latency p50 / p90 / p99 / max (s) | requests/s | transitions/s | "
        "MH calls/request | transitions/MH call | speedup vs sequential |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    seq = {r["clients"]: r for r in report["closed"] if r["rule"] == "sequential"}
    for r in report["closed"]:
        lat = r["latency_s"]
        speed = r["transitions_per_s"] / seq[r["clients"]]["transitions_per_s"] if r["clients"] in seq else float("nan")
        lines.append(
            f"| {r['clients']} | {r['rule']} | {r['statuses'].get('200', 0)}/{r['requests']} | "
            f"{lat['p50']:.1f} / {lat['p90']:.1f} / {lat['p99']:.1f} / {lat['max']:.1f} | "
            f"{r['requests_per_s']:.3f} | {r['transitions_per_s']:.2f} | {r['mh_calls_per_request']:.1f} | "
            f"{r['transitions_per_mh_call']:.2f} | {speed:.2f}x |"
        )
    o, d = report["overload"], report["disconnect"]
    lat = o["latency_s"]
    lines += [
        "",
        f"Overload (24 clients x 3 requests, --concurrency 4 --queue-size 4): statuses {o['statuses']}; "
        f"served latency p50 {lat['p50']:.1f} s, p99 {lat['p99']:.1f} s, max {lat['max']:.1f} s; every request "
        f"served or refused with a typed 429: {o['clean'] and o['refusals_typed']}; left running: "
        f"{o['pool']['running']}.",
        f"Disconnects (8 clients hang up after 2 s): client outcomes {d['statuses']}; chains cancelled "
        f"{d['cancelled']}; running 0 after {d['drain_s']:.1f} s: {d['drained']}; backend calls in the 3 s "
        f"after: {d['backend_calls_after_drain']}.",
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--url", default=None, help="an SGLang server to use (default: start one on a free port)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--report-only", metavar="JSON", default=None)
    args = ap.parse_args()
    if args.report_only:
        print(markdown(json.loads(Path(args.report_only).read_text())))
        return 0
    texts = questions(args.prompts)
    report = {"machine": machine(), "prompts": len(texts), "config": "T = 32, B = 16, K = 4, alpha 4, N_pf = 20"}
    with ExitStack() as stack:
        backend = args.url or stack.enter_context(sglang_server(free_port()))
        url, _ = stack.enter_context(serve_cli(*SERVE, "--url", backend, "--concurrency", "8"))
        model = client(url).models.list().data[0].id
        report["closed"] = phase_closed(url, model, texts, [int(c) for c in args.clients.split(",")])
        report["disconnect"] = phase_disconnect(url, model, texts)
        report["overload"] = phase_overload(backend, texts)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
