"""Cost-aware path rules prompt by prompt (issue 28, item 5): is any prompt slower than sequential?

Runs ``presto-sgl run`` on HumanEval prompts against a running server (T = 64 in two blocks
of 32, K = 10, N_pf 20, one chain at a time, traces on), once per spec, and reports each
run's MH call time per prompt against the baselines two ways:

- direct: a baseline run's time on the prompt over this run's. The two chains differ
  (other keys; and a CPU server is not bit-reproducible from run to run: an extension can
  sample another token at a near-tie), so this ratio carries the chains' luck: how many
  tokens their cuts regenerate, how often they accept.
- same chain: this run's own chain priced as sequential PowerMH would run it (one
  one-row call per realized decision, t = a + b (T - c) fitted on the baselines' calls)
  over this run's time. This is the planner's effect alone; on a baseline run itself it
  shows the server's own spread.

    python -m benchmarks.pathcost_prompts --url http://127.0.0.1:30131 --out /tmp/pathcost \\
        [--specs "seq:--rule sequential,bfs-cost:--rule bfs --cost-aware"] [--baselines seq] \\
        [--json benchmarks/results/pathcost/humaneval_sglang.json]

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

import numpy as np

from benchmarks.compare import machine
from presto_sgl import read_trace

SPECS = "seq:--rule sequential,seq-path:--rule sequential --keying path,bfs-cost:--rule bfs --cost-aware"
SHAPE = ["--max-new-tokens", "64", "--block-size", "32", "--steps", "10", "--budget", "20"]


def run(name: str, args: str, ns: argparse.Namespace) -> float | None:
    out = Path(ns.out) / name
    if out.exists():
        return None
    cmd = [
        sys.executable,
        "-m",
        "presto_sgl",
        "run",
        "--dataset",
        "humaneval",
        "--limit",
        str(ns.prompts),
        "--engine",
        ns.server,
        "--url",
        ns.url,
        *SHAPE,
        "--workers",
        "1",
        "--scheduler",
        "off",
        "--traces",
        "--no-rescore",
        "--no-progress",
        *args.split(),
        "--out",
        str(out),
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    return time.perf_counter() - t0


def traces(run_dir: Path) -> dict[str, list[dict]]:
    return {f.stem: read_trace(f.open()) for f in sorted((run_dir / "traces").glob("*.jsonl"))}


def mh_time(records: list[dict]) -> float:
    return sum(r["time_s"] for r in records if r["type"] == "call" and r["kind"] == "mh")


def sequential_law(baselines: list[dict[str, list[dict]]]) -> tuple[float, float]:
    """t = a + b * new tokens by least squares over the baselines' one-row MH calls."""
    X, y = [], []
    for runs in baselines:
        for records in runs.values():
            for r in records:
                if r["type"] == "call" and r["kind"] == "mh" and len(r["requests"]) == 1:
                    X.append([1.0, r["requests"][0]["new_tokens"]])
                    y.append(r["time_s"])
    a, b = np.linalg.lstsq(np.array(X), np.array(y), rcond=None)[0]
    return float(a), float(b)


def same_chain(records: list[dict], law: tuple[float, float]) -> float:
    nodes = [r for r in records if r["type"] == "node"]
    return sum(law[0] + law[1] * (n["length"] - n["cut"]) for n in nodes) / mh_time(records)


def summary(values: list[float]) -> dict:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "per_prompt": [round(v, 3) for v in values],
    }


def report(ns: argparse.Namespace, names: list[str], wall: dict) -> dict:
    runs = {n: traces(Path(ns.out) / n) for n in names}
    bases = ns.baselines.split(",")
    law = sequential_law([runs[b] for b in bases])
    rows = []
    for n in names:
        row = {
            "run": n,
            "wall_s": wall.get(n),
            "mh_s": round(sum(mh_time(r) for r in runs[n].values()), 1),
            "same_chain": summary([same_chain(r, law) for r in runs[n].values()]),
        }
        for b in bases:
            prompts = [p for p in runs[n] if p in runs[b]]
            row[f"vs {b}"] = summary([mh_time(runs[b][p]) / mh_time(runs[n][p]) for p in prompts])
            row[f"vs {b} by sums"] = round(
                sum(mh_time(runs[b][p]) for p in prompts) / sum(mh_time(runs[n][p]) for p in prompts), 3
            )
        rows.append(row)
    return {
        "cpu": machine(),
        "prompts": ns.prompts,
        "server": ns.server,
        "sequential_law_s": [round(x, 4) for x in law],
        "rows": rows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--server", choices=("sglang", "vllm"), default="sglang")
    ap.add_argument("--out", required=True, help="folder of the run directories (kept; traces are large)")
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--specs", default=SPECS, help="name:run arguments, comma-separated")
    ap.add_argument("--baselines", default="seq,seq-path")
    ap.add_argument("--json")
    ns = ap.parse_args()
    os.environ.setdefault("HF_HOME", str(Path(".cache/hf").resolve()))
    specs = [s.split(":", 1) for s in ns.specs.split(",")]
    wall = {}
    for name, args in specs:
        seconds = run(name, args, ns)
        if seconds is not None:
            wall[name] = round(seconds, 1)
    result = report(ns, [n for n, _ in specs], wall)
    print(result["cpu"])
    print(f"sequential law: t = {result['sequential_law_s'][0]} + {result['sequential_law_s'][1]} * new tokens (s)")
    for row in result["rows"]:
        s = row["same_chain"]
        direct = "; ".join(
            f"{k} {row[k]['median']} ({row[k]['min']}-{row[k]['max']}), by sums {row[k + ' by sums']}"
            for k in row
            if k.startswith("vs ") and not k.endswith("sums")
        )
        print(f"{row['run']}: MH {row['mh_s']} s; same chain {s['median']} ({s['min']}-{s['max']}); {direct}")
    if ns.json:
        Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
        Path(ns.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
