"""``presto-sgl report RUN_DIR... --out DIR``: a Markdown report with tables and PNG figures.

Runs are grouped by setting (dataset, seed, model, engine, chat, method, alpha, tau, T, B, K,
keys); in each group the sequential run is the reference of every PreSTO run. Figures (paper analogs):
accuracy vs time per prompt for every method (Fig. 20), speedup vs prefetch budget
(Fig. 5 / Table 2), calls reduction vs time-per-call ratio (Fig. 1), the eps-certainty
histogram of acceptance decisions (Fig. 15, from ``--traces``) and one prefetched tree
with the realized path (Fig. 21, from a trace). Generation time = MH call time + block
extension time (baselines: their calls), from the records' metrics.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..execution.resume import current_record
from .equivalence import load_records
from .results import aggregate, write_results

SETTING = (
    "dataset",
    "seed",
    "model",
    "engine",
    "chat",
    "method",
    "alpha",
    "tau",
    "max_new_tokens",
    "block_size",
    "steps",
    "keying",
)


@dataclass
class Run:
    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def label(self) -> str:
        c = self.config
        if c.get("label"):
            return c["label"]
        if self.sequential:
            return f"{c['method']} sequential ({c['keying']} keys)"
        if self.presto:
            return f"{c['method']} PreSTO {c['rule']}{' +cost' if c.get('cost_aware') else ''} N_pf={c['budget']}"
        extra = {"bestofn": f" N={c.get('best_of')}", "powersmc": f" P={c.get('particles')}"}.get(c["method"], "")
        return c["method"] + extra

    @property
    def sequential(self) -> bool:
        """An MH run, one model call per transition."""
        return self.config.get("rule") == "sequential"

    @property
    def presto(self) -> bool:
        """An MH run by a PreSTO rule."""
        return self.config.get("rule") not in (None, "sequential")

    @property
    def setting(self) -> tuple:
        return tuple(self.config.get(k) for k in SETTING)

    def gen_time(self) -> list[float]:
        return [r["metrics"]["call_time_s"] + r["metrics"]["extend_time_s"] for r in self.records]

    def accuracy(self) -> tuple[float, float, float, int] | None:
        graded = [r["grade"]["correct"] for r in self.records if r["grade"]["correct"] is not None]
        return (*wilson(sum(graded), len(graded)), len(graded)) if graded else None


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float, float]:
    """(p, low, high): the proportion and its Wilson 95% interval."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, max(0.0, centre - half), min(1.0, centre + half)


def load_run(path: str | Path) -> Run:
    path = Path(path)
    try:
        manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except OSError:
        raise ValueError(f"{str(path)!r}: no manifest.json (a `presto-sgl run --out` directory)") from None
    return Run(path, current_record(manifest["config"]), list(load_records(path).values()))


def speedups(runs: list[Run]) -> list[dict[str, Any]]:
    """One row per PreSTO run with a sequential run of the same setting: per-prompt medians."""
    seq = {r.setting: r for r in runs if r.sequential}
    rows = []
    for r in runs:
        base = seq.get(r.setting)
        if not r.presto or base is None:
            continue
        a = {x["id"]: x["metrics"] for x in base.records}
        pairs = [(a[x["id"]], x["metrics"]) for x in r.records if x["id"] in a]
        if not pairs:
            continue
        rows.append(
            {
                "run": r,
                "base": base,
                "n": len(pairs),
                "speedup": [
                    (s["call_time_s"] + s["extend_time_s"]) / (p["call_time_s"] + p["extend_time_s"]) for s, p in pairs
                ],
                "calls_reduction": [s["model_calls"] / p["model_calls"] for s, p in pairs],
                "time_per_call_ratio": [p["time_per_call_s"] / s["time_per_call_s"] for s, p in pairs],
            }
        )
    return rows


def certainty_counts(run: Run) -> dict[str, int] | None:
    """The run's MH decisions (from its ``traces/``) by eps-certainty class, or None without traces."""
    from ..predictor.certainty import CLASSES, certainty_class

    folder = run.path / "traces"
    if not folder.is_dir():
        return None
    counts = dict.fromkeys(CLASSES, 0)
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("type") == "node":
                counts[CLASSES[certainty_class(rec["log_accept"])]] += 1
    return counts


def tost_section(rows: list[dict[str, Any]], out: Path, figs: list) -> list[str]:
    """Paired TOST (paper Case Study 3) of each PreSTO run against its sequential run."""
    from .equivalence import compare_runs, forest_plot

    tested, lines = [], []
    for x in rows:
        try:
            tested += [(x["run"].label, t) for t in compare_runs(x["base"].path, x["run"].path)]
        except ValueError as exc:  # too few prompts, or no confidence values
            lines.append(f"- {x['run'].label}: not tested ({exc})")
    if not tested:
        return lines
    table = [
        "",
        "## Equivalence with sequential (paired TOST, margin 0.2 SD, Holm per pair)",
        "",
        "| run | statistic | n | B - A | 90% CI | margin | p (Holm) | equivalent |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table += [
        f"| {label} | {t.statistic} | {t.n} | {t.diff:+.4f} | [{t.ci90[0]:+.4f}, {t.ci90[1]:+.4f}] | "
        f"{t.margin:.4f} | {t.p_holm:.4f} | {'yes' if t.equivalent else 'no'} |"
        for label, t in tested
    ]
    figs.append(forest_plot(tested, out / "tost_forest.png"))
    return table + lines


def _med(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def write_report(paths: list[str | Path], out: str | Path) -> Path:
    from . import figures

    runs = [load_run(p) for p in paths]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# presto-sgl report",
        "",
        f"Runs: {len(runs)}.",
        "",
        "## Methods",
        "",
        "| run | method | prompts | accuracy (95% CI) | generation "
        "time per prompt, median (range) s | model calls per prompt "
        "| KV tokens of a call, peak (median over prompts) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        acc = r.accuracy()
        acc_s = f"{acc[0]:.1%} ({acc[1]:.1%}-{acc[2]:.1%}), n={acc[3]}" if acc else "-"
        calls = statistics.mean(x["metrics"]["model_calls"] + x["metrics"]["extend_calls"] for x in r.records)
        kv = [x["metrics"]["kv_tokens_peak"] for x in r.records if "kv_tokens_peak" in x["metrics"]]
        kv_s = f"{statistics.median(kv):.0f}" if kv else "-"
        lines.append(
            f"| {r.path.name} | {r.label} | {len(r.records)} | {acc_s} | {_med(r.gen_time())} | {calls:.1f} | {kv_s} |"
        )
    figs = [figures.accuracy_vs_time(runs, out / "accuracy_vs_time.png")]
    rows = speedups(runs)
    if rows:
        lines += [
            "",
            "## PreSTO vs sequential (per prompt, median (range))",
            "",
            "| run | vs | prompts | speedup | calls reduction | time per call ratio |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {x['run'].label} | {x['base'].path.name} | {x['n']} | {_med(x['speedup'])} | "
            f"{_med(x['calls_reduction'])} | {_med(x['time_per_call_ratio'])} |"
            for x in rows
        ]
        figs += [
            figures.speedup_vs_budget(rows, out / "speedup_vs_budget.png"),
            figures.calls_vs_time_per_call(rows, out / "calls_vs_time_per_call.png"),
        ]
        lines += tost_section(rows, out, figs)
    counts = {r.label: c for r in runs if (c := certainty_counts(r))}
    if counts:
        figs.append(figures.certainty_histogram(counts, out / "certainty.png"))
    traces = [
        f
        for r in runs
        if r.presto and r.config.get("keying") == "path"
        for f in sorted((r.path / "traces").glob("*.jsonl"))
    ]
    if traces:
        figs.append(figures.prefetch_tree(traces, out / "prefetch_tree.png"))
    lines += ["", "## Figures", ""] + [f"![{f.stem}]({f.name})" for f in figs if f is not None]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_results(
        out / "results.json",
        {
            "runs": [{"run": str(r.path), "label": r.label, "config": r.config, **aggregate(r.records)} for r in runs],
            "speedups": [
                {
                    "run": str(x["run"].path),
                    "vs": str(x["base"].path),
                    "n": x["n"],
                    "median_speedup": statistics.median(x["speedup"]),
                }
                for x in rows
            ],
        },
    )
    return path
