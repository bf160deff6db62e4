"""A run's machine-readable aggregate (``results.json``): accuracy, pass@k, the paper's
statistics and the chains' cost, from its records.

pass@k is the unbiased estimator of Chen et al. (2021): with n samples of a problem of which
c are correct, pass@k = 1 - C(n - c, k) / C(n, k), averaged over problems.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any


def pass_at_k(n: int, c: int, k: int) -> float:
    """The probability that at least one of k samples drawn without replacement from n, c of them
    correct, is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ks(n: int) -> list[int]:
    """The k reported for n samples: 1, 2, 4, ... up to n, and n."""
    out = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return out + ([n] if out[-1] != n else [])


def problem_of(record: dict[str, Any]) -> str:
    return str(record.get("problem", record["id"]))


def aggregate(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The aggregate of a run's records (one per problem and sample)."""
    by_problem: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_problem[problem_of(r)].append(r)
    graded = {
        p: [r["grade"]["correct"] for r in rs if r["grade"]["correct"] is not None] for p, rs in by_problem.items()
    }
    graded = {p: g for p, g in graded.items() if g}
    n = min((len(g) for g in graded.values()), default=0)
    out: dict[str, Any] = {
        "problems": len(by_problem),
        "records": len(records),
        "samples_per_problem": n if n else None,
        "graded_problems": len(graded),
    }
    if graded:
        flat = [x for g in graded.values() for x in g]
        out["accuracy"] = sum(flat) / len(flat)
        out["pass_at_k"] = {
            str(k): statistics.mean(pass_at_k(n, sum(g[:n]), k) for g in graded.values()) for k in ks(n)
        }
    for key in ("log_likelihood", "confidence"):
        vals = [r[key] for r in records if r.get(key) is not None]
        out[f"mean_{key}"] = statistics.mean(vals) if vals else None
    m = [r["metrics"] for r in records]
    calls = sum(x["model_calls"] for x in m)
    out["chains"] = {
        "model_calls": calls,
        "transitions": sum(x["transitions"] for x in m),
        "transitions_per_call": sum(x["transitions"] for x in m) / calls if calls else None,
        "call_time_s": sum(x["call_time_s"] for x in m),
        "median_call_time_s": statistics.median(x["call_time_s"] for x in m) if m else None,
    }
    return out


def write_results(path: str | Path, payload: dict[str, Any]) -> Path:
    path = Path(path)
    path.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path
