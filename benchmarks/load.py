"""Many chains, faults and two workers against real CPU SGLang servers (issue 13, item 4).

Every server runs on 127.0.0.1 with a counting proxy in front of it
(:mod:`tests.support.wiretap`): the wire's own count of the ``/generate`` items each
chain had answered, held against the requests its trace records. The parts:

- ``throughput``: sequential PowerMH and PreSTO step, 1, 4 and 8 chains in flight through
  one sampler (``presto_sgl.scheduling.runner.run_prompts``), no faults: transitions per second,
  calls, time per call.
- ``faults``: PreSTO step, 8 chains in flight, the server killed (SIGKILL of its process
  group) and restarted twice during the run. Every chain must complete; no request may
  be lost or duplicated (per chain, the multiset of (prefix length, new tokens) the server
  answered equals the trace's); every ``state`` record of every trace -- each state a chain
  was in -- must be what a float32 forward of the model scores (no chain advanced on
  partial data).
- ``law``: the faulted run against the single-chain runs (PreSTO step and sequential, 1 in
  flight): per prompt, the final state's mean log p0 and the accepted count; a sign-flip
  permutation test of the paired differences (the server is unseeded, so runs agree in
  law, not in tokens).
- ``router``: two workers behind ``sglang-router`` (``cache_aware``, ``round_robin``, and
  ``manual`` with the engine's per-chain routing key), 8 chains in flight: every chain
  completes, the share of each chain's requests on its busiest worker, the cached-token
  share, transitions per second.

    python -m benchmarks.load --parts faults,router,throughput,law --prompts 32 \\
        --json benchmarks/results/load/load.json
    python -m benchmarks.load --parts router --pin --json benchmarks/results/load/router_pinned.json
    python -m benchmarks.load --report-only benchmarks/results/load/load.json

``--pin`` starts each router worker on a core of its own (``taskset``): two CPU servers
sharing both cores contend for them.

One file (~370 lines) because its parts share the servers, the proxy's audit and the report.

Chains: SmolLM2-135M-Instruct, float32 servers (``--batched-attention --cdf-sampling``),
reasoning-gym one-digit arithmetic prompts (chat template), T = 32 in two blocks of 16,
K = 4 per block, alpha 4, tau 1/4, N_pf = 20.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.compare import machine
from presto_sgl import sampling_configs
from presto_sgl.chain.trace import StateReplay, read_trace
from presto_sgl.engines.sglang.http import SGLangEngine
from presto_sgl.samplers import Sampler
from presto_sgl.scheduling.runner import run_prompts
from presto_sgl.tasks.registry import load_task
from tests.support.servers import free_port, kill_server, server_script
from tests.support.wiretap import Wiretap, asked

POWER = dict(alpha=4.0, max_new_tokens=32, block_size=16, steps=4)
BUDGET = 20
DATASET = "reasoning-gym:basic_arithmetic:max_terms=2,max_digits=1,operators=('+','-')"
SERVER_FLAGS = ("--dtype", "float32", "--batched-attention", "--cdf-sampling", "--timeout", "900")
SEED = 13


def prompts_of(n: int) -> list[list[int]]:
    """The first ``n`` distinct chat prompts of the task (none a prefix of another)."""
    _, problems = load_task(DATASET, limit=4 * n, seed=SEED)
    from presto_sgl.engines.text import ModelFolder
    from presto_sgl.models import materialize_smollm2

    tok = ModelFolder()  # the model folder's tokenizer and chat template, no server needed
    tok.model_path = str(materialize_smollm2())
    out: list[list[int]] = []
    for p in problems:
        ids = tok.chat_prompt(p.prompt)
        if ids not in out:
            out.append(ids)
        if len(out) == n:
            return out
    raise SystemExit(f"only {len(out)} distinct prompts in {DATASET}")


@contextmanager
def sglang_server(port: int, cpu: int | None = None):
    """A server on ``port``; with ``cpu``, pinned to that core (``taskset``: its threads follow)."""
    server_script("sglang_server.sh", "start", "--port", str(port), *SERVER_FLAGS, cpu=cpu)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server_script("sglang_server.sh", "stop", "--port", str(port))


def sampler_of(engine: SGLangEngine, rule: str):
    cfg, presto = sampling_configs(rule=rule, budget=BUDGET, **POWER)
    return Sampler(engine, cfg, presto)


def run_chains(url: str, taps: list[Wiretap], prompts, rule: str, workers: int, traces: Path, during=None) -> dict:
    """``prompts`` through one sampler, ``workers`` chains in flight; the wire audited against the traces."""
    engine = SGLangEngine(url, restart_timeout_s=900, max_retries=4)
    sampler = sampler_of(engine, rule)
    traces.mkdir(parents=True, exist_ok=True)
    before = [Counter(t.answered) for t in taps]
    finished = threading.Event()
    side = threading.Thread(target=during, args=(finished,), daemon=True) if during else None
    t0 = time.perf_counter()
    if side:
        side.start()
    try:
        results = run_prompts(sampler.run, prompts, seed=SEED, workers=workers, trace_dir=traces)
    finally:
        finished.set()
    wall = time.perf_counter() - t0
    if side:
        side.join()
    transitions = sum(r.metrics.transitions for r in results)
    mh_calls = sum(r.metrics.model_calls for r in results)  # MH calls; block extensions are extend_calls
    traced = [records(traces, i) for i in range(len(prompts))]
    call_time = [c["time_s"] for recs in traced for c in recs if c["type"] == "call" and c["kind"] == "mh"]
    out = {
        "rule": rule,
        "workers": workers,
        "prompts": len(prompts),
        "wall_s": round(wall, 2),
        "transitions": transitions,
        "transitions_per_s": round(transitions / wall, 3),
        "calls": mh_calls + sum(r.metrics.extend_calls for r in results),
        "mh_calls": mh_calls,
        "transitions_per_mh_call": round(transitions / mh_calls, 3),
        "time_per_mh_call_s": round(statistics.median(call_time), 3),
        "reconnects": engine.stats.reconnects,
        "retried_requests": engine.stats.retries,
        "complete": sum(
            r.metrics.transitions == 2 * POWER["steps"] and r.state.length == POWER["max_new_tokens"] for r in results
        ),
        "audit": {
            **audit(traced, taps, before),
            "cached_share": round(
                sum(r.metrics.cached_tokens for r in results) / max(1, sum(r.metrics.prefill_tokens for r in results)),
                4,
            ),
        },
        "final": [final_stats(r) for r in results],
    }
    return out


def records(traces: Path, i: int) -> list[dict]:
    with open(traces / f"prompt-{i}.jsonl", encoding="utf-8") as f:
        return read_trace(f)


def audit(traced: list[list[dict]], taps: list[Wiretap], before: list[Counter]) -> dict:
    """Per chain (its trace's records in ``traced``): the (prefix length, new tokens) multiset
    the servers answered during this run against the trace's requests; and how each chain's
    requests spread over the workers."""
    n = len(traced)
    mismatched, spread = [], []
    wire: dict[int, list[Counter]] = {i: [Counter() for _ in taps] for i in range(n)}
    for w, (tap, old) in enumerate(zip(taps, before, strict=True)):
        for (chain, plen, new), count in (tap.answered - old).items():
            wire[chain][w][(plen, new)] += count
    for i in range(n):
        want = asked(traced[i])
        got = sum(wire[i], Counter())
        if got != want:
            mismatched.append({"chain": i, "lost": sum((want - got).values()), "extra": sum((got - want).values())})
        per_worker = [sum(c.values()) for c in wire[i]]
        spread.append(max(per_worker) / max(1, sum(per_worker)))
    per_worker = [sum(sum(wire[i][w].values()) for i in range(n)) for w in range(len(taps))]
    return {
        "chains_mismatched": mismatched,
        "requests": sum(per_worker),
        "requests_per_worker": per_worker,
        "lost_bodies": sum(t.lost for t in taps),
        "busiest_worker_share_median": statistics.median(spread),
        "busiest_worker_share_min": min(spread),
    }


def final_stats(result) -> dict:
    s = result.state
    return {"mean_logp": sum(s.logp) / len(s.logp), "accepted": result.metrics.accepted}


def rescore_states(traces: Path, prompts) -> dict:
    """Every ``state`` record of every trace against a float32 forward of its tokens."""
    import torch
    from transformers import AutoModelForCausalLM

    from presto_sgl.models import materialize_smollm2
    from tests.support.forward import TOL, reference

    model = AutoModelForCausalLM.from_pretrained(materialize_smollm2(), dtype=torch.float32).eval()
    worst, n = 0.0, 0
    for i, prompt in enumerate(prompts):
        replay = StateReplay(tuple(prompt))
        for rec in records(traces, i):
            if rec["type"] != "state":
                continue
            state = replay.apply(rec)
            _, logp = reference(model, state.prompt, state.tokens, 1.0)
            worst = max(worst, max(abs(a - b) for a, b in zip(logp, state.logp, strict=True)))
            n += 1
    return {"states": n, "max_abs_logp_error": worst, "tolerance": TOL, "ok": worst < TOL}


def paired_test(a: list[float], b: list[float], draws: int = 20000) -> dict:
    """Sign-flip permutation test of the mean paired difference (two-sided p-value)."""
    d = [x - y for x, y in zip(a, b, strict=True)]
    obs = abs(sum(d))
    rng = random.Random(0)
    hits = sum(abs(sum(x if rng.random() < 0.5 else -x for x in d)) >= obs - 1e-12 for _ in range(draws))
    sd = statistics.stdev(d) if len(d) > 1 else 0.0
    return {"mean_diff": statistics.fmean(d), "sd_diff": sd, "p": (hits + 1) / (draws + 1), "n": len(d)}


def part_throughput(prompts, port: int, tmp: Path) -> list[dict]:
    out = []
    with sglang_server(port) as url, Wiretap(url, prompts) as tap:
        for rule in ("sequential", "step"):
            for workers in (1, 4, 8):
                r = run_chains(tap.url, [tap], prompts, rule, workers, tmp / f"tp-{rule}-{workers}")
                print(row(r), flush=True)
                out.append(r)
    return out


def part_faults(prompts, port: int, tmp: Path, kills: int = 2) -> dict:
    with sglang_server(port) as url, Wiretap(url, prompts) as tap:
        # kill at 1/3 and 2/3 of the items the run asks (measured: ~11 per chain)
        expected = len(prompts) * 11
        marks = [expected * (j + 1) // (kills + 1) for j in range(kills)]
        events: list[dict] = []

        def killer(finished: threading.Event) -> None:
            for mark in marks:
                while sum(tap.answered.values()) < mark:
                    if finished.wait(0.05):
                        return
                t0 = time.perf_counter()
                kill_server("sglang_server.sh", port)
                server_script("sglang_server.sh", "start", "--port", str(port), *SERVER_FLAGS)
                events.append({"after_items": mark, "down_s": round(time.perf_counter() - t0, 1)})

        r = run_chains(tap.url, [tap], prompts, "step", 8, tmp / "faults", during=killer)
        r["kills"] = events
        r["rescored"] = rescore_states(tmp / "faults", prompts)
        print(row(r), "kills", events, "rescored", r["rescored"], flush=True)
        return r


def part_law(faults: dict, throughput: list[dict]) -> dict:
    alone = {r["rule"]: r for r in throughput if r["workers"] == 1}
    out = {}
    for name, ref in (("step, 1 in flight", alone["step"]), ("sequential, 1 in flight", alone["sequential"])):
        out[name] = {
            stat: paired_test([f[stat] for f in faults["final"]], [f[stat] for f in ref["final"]])
            for stat in ("mean_logp", "accepted")
        }
    print(json.dumps(out, indent=1), flush=True)
    return out


def part_router(prompts, ports: tuple[int, int], router_port: int, tmp: Path, pin: bool = False) -> list[dict]:
    """``pin``: each worker on a core of its own (two servers sharing both cores contend)."""
    out = []
    with ExitStack() as stack:
        urls = [stack.enter_context(sglang_server(p, cpu=j if pin else None)) for j, p in enumerate(ports)]
        taps = [stack.enter_context(Wiretap(u, prompts)) for u in urls]
        for policy in ("cache_aware", "round_robin", "manual"):
            workers = [a for t in taps for a in ("--worker-url", t.url)]
            server_script("sglang_router.sh", "start", "--port", str(router_port), *workers, "--policy", policy)
            try:
                r = run_chains(f"http://127.0.0.1:{router_port}", taps, prompts, "step", 8, tmp / f"router-{policy}")
            finally:
                server_script("sglang_router.sh", "stop", "--port", str(router_port))
            r["policy"], r["pinned"] = policy, pin
            print(row(r), flush=True)
            out.append(r)
    return out


def row(r: dict) -> str:
    a = r["audit"]
    return (
        f"{r.get('policy', '')} {r['rule']} x{r['workers']}: {r['complete']}/{r['prompts']} complete, "
        f"{r['transitions_per_s']} trans/s, {r['calls']} calls, {r['transitions_per_mh_call']} trans/MH call, "
        f"{r['time_per_mh_call_s']} s/MH call, reconnects {r['reconnects']}, "
        f"wire mismatches {len(a['chains_mismatched'])}, "
        f"lost bodies {a['lost_bodies']}, busiest-worker share {a['busiest_worker_share_median']:.2f}, "
        f"cached {a['cached_share']:.1%}"
    )


def markdown(report: dict) -> str:
    """The RESULTS.md tables of a report."""
    out = [
        f"Machine: {report['machine']}. {report['prompts']} prompts; T = {report['power']['max_new_tokens']} in "
        f"blocks of {report['power']['block_size']}, K = {report['power']['steps']} per block, alpha "
        f"{report['power']['alpha']}, N_pf = {report['budget']}; float32 servers ({' '.join(report['server'][2:4])})."
    ]
    head = (
        "| run | chains complete | transitions/s | MH calls "
        "| transitions/MH call | time/MH call (median) | "
        "reconnects | requests on the wire | lost bodies | wire = trace "
        "| cached share |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )

    def line(name: str, r: dict) -> str:
        a = r["audit"]
        ok = "yes" if not a["chains_mismatched"] else f"**no: {len(a['chains_mismatched'])} chains**"
        return (
            f"| {name} | {r['complete']}/{r['prompts']} | {r['transitions_per_s']:.2f} | {r['mh_calls']} | "
            f"{r['transitions_per_mh_call']:.2f} | {r['time_per_mh_call_s']:.2f} "
            f"s | {r['reconnects']} | {a['requests']} | "
            f"{a['lost_bodies']} | {ok} | {a['cached_share']:.1%} |"
        )

    if "throughput" in report:
        out += ["", "**Throughput, one server, no faults**", "", head]
        out += [line(f"{r['rule']}, {r['workers']} in flight", r) for r in report["throughput"]]
        by = {(r["rule"], r["workers"]): r["transitions_per_s"] for r in report["throughput"]}
        ratios = ", ".join(f"{w} in flight {by[('step', w)] / by[('sequential', w)]:.2f}x" for w in (1, 4, 8))
        out += ["", f"PreSTO step over sequential, transitions per second: {ratios}."]
    if "faults" in report:
        f = report["faults"]
        kills = ", ".join(f"after {k['after_items']} answered items, back in {k['down_s']} s" for k in f["kills"])
        out += [
            "",
            "**Faults: the server SIGKILLed and restarted twice, 8 chains in flight (PreSTO step)**",
            "",
            head,
            line("step, 8 in flight, 2 kills", f),
            "",
            f"Kills: {kills}. "
            f"Every state record rescored by a float32 forward: {f['rescored']['states']} states, largest |log p0 "
            f"error| {f['rescored']['max_abs_logp_error']:.1e} (tolerance {f['rescored']['tolerance']:g}).",
        ]
    if "law" in report:
        out += [
            "",
            "**Law: the faulted 8-chain run against single-chain runs (paired by prompt, sign-flip permutation test)**",
            "",
            "| against | statistic | mean difference | sd of differences | p |",
            "|---|---|---|---|---|",
        ]
        for name, tests in report["law"].items():
            for stat, t in tests.items():
                out.append(f"| {name} | {stat} | {t['mean_diff']:+.4f} | {t['sd_diff']:.4f} | {t['p']:.3f} |")
    if "router" in report:
        out += [
            "",
            "**Two workers behind sglang-router, 8 chains in flight (PreSTO step)**",
            "",
            "| policy | workers | chains complete | transitions/s "
            "| time/MH call | wire = trace | a chain's requests on "
            "its busiest worker (median, min) | requests per worker | cached share |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["router"]:
            a = r["audit"]
            split = " / ".join(map(str, a["requests_per_worker"])) if "requests_per_worker" in a else "not recorded"
            out.append(
                f"| {r['policy']} | {'a core each' if r.get('pinned') else 'sharing both cores'} | "
                f"{r['complete']}/{r['prompts']} | {r['transitions_per_s']:.2f} | "
                f"{r['time_per_mh_call_s']:.2f} s | {'yes' if not a['chains_mismatched'] else 'no'} | "
                f"{a['busiest_worker_share_median']:.0%}, {a['busiest_worker_share_min']:.0%} | {split} | "
                f"{a['cached_share']:.1%} |"
            )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="throughput,faults,law,router")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--json", default=None)
    ap.add_argument("--pin", action="store_true", help="router part: pin each worker to a core of its own")
    ap.add_argument(
        "--report-only", metavar="JSON", default=None, help="print the tables of a saved report; run nothing"
    )
    args = ap.parse_args()
    if args.report_only:
        print(markdown(json.loads(Path(args.report_only).read_text())))
        return 0
    parts = args.parts.split(",")
    if "law" in parts and not {"throughput", "faults"} <= set(parts):
        raise SystemExit("--parts law needs throughput and faults in the same run")
    prompts = prompts_of(args.prompts)
    report: dict = {
        "machine": machine(),
        "power": POWER,
        "budget": BUDGET,
        "dataset": DATASET,
        "server": SERVER_FLAGS,
        "prompts": len(prompts),
    }
    print(report["machine"], flush=True)

    def save() -> None:  # after every part: a failure later keeps what was measured
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="presto-load-") as tmp:
        if "faults" in parts:  # first: it restarts servers, the part most likely to fail
            report["faults"] = part_faults(prompts, free_port(), Path(tmp))
            save()
        if "router" in parts:
            report["router"] = part_router(prompts, (free_port(), free_port()), free_port(), Path(tmp), args.pin)
            save()
        if "throughput" in parts:
            report["throughput"] = part_throughput(prompts, free_port(), Path(tmp))
            save()
        if "law" in parts:
            report["law"] = part_law(report["faults"], report["throughput"])
            save()
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
