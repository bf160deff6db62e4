"""The report's figures (matplotlib, Agg, PNG); each returns the path it wrote."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def accuracy_vs_time(runs: list[Any], path: Path) -> Path | None:
    """Paper Fig. 20 analog: accuracy (Wilson 95% CI) against median generation time per prompt."""
    points = [(r.label, statistics.median(r.gen_time()), acc) for r in runs if (acc := r.accuracy()) is not None]
    if not points:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.4 + 0.17 * len(points)))
    for label, t, (p, lo, hi, n) in points:
        ax.errorbar([t], [p], yerr=[[p - lo], [hi - p]], fmt="o", capsize=3, label=f"{label} (n={n})")
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))  # label the 2s and 5s between the decades
    ax.xaxis.set_minor_formatter(plain)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_xlabel("generation time per prompt, median (s, log scale)")
    ax.set_ylabel("accuracy (95% Wilson CI)")
    ax.set_title("Accuracy against time")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)  # below: points stay visible
    return _save(fig, plt, path)


def speedup_vs_budget(rows: list[dict[str, Any]], path: Path) -> Path:
    """Paper Fig. 5 analog: per-prompt speedup over sequential (median, range) per rule and budget."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    by_rule: dict[str, list[tuple[int, list[float]]]] = {}
    for x in rows:
        c = x["run"].config
        name = c.get("label") or f"{c['rule']}{' +cost' if c.get('cost_aware') else ''}"  # a labelled run apart
        by_rule.setdefault(name, []).append((c["budget"], x["speedup"]))
    for rule, pts in sorted(by_rule.items()):
        pts.sort()
        b = [p[0] for p in pts]
        med = [statistics.median(p[1]) for p in pts]
        lo = [m - min(p[1]) for m, p in zip(med, pts)]
        hi = [max(p[1]) - m for m, p in zip(med, pts)]
        ax.errorbar(b, med, yerr=[lo, hi], marker="o", capsize=3, label=rule)
    ax.axhline(1.0, color="grey", ls="--", lw=1)
    ax.set_xlabel("prefetch budget N_pf (requests per call)")
    ax.set_ylabel("speedup over sequential (per prompt: median, range)")
    ax.set_title("Speedup against budget")
    from matplotlib.ticker import FixedLocator, FuncFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted({b for pts in by_rule.values() for b, _ in pts})))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return _save(fig, plt, path)


def calls_vs_time_per_call(rows: list[dict[str, Any]], path: Path) -> Path:
    """Paper Fig. 1 analog: calls reduction against time-per-call ratio; speedup = x / y."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5.6, 5.0))
    top = 1.0
    for x in rows:
        cr, tr = statistics.median(x["calls_reduction"]), statistics.median(x["time_per_call_ratio"])
        top = max(top, cr, tr)
        ax.plot([tr], [cr], "o")
        ax.annotate(x["run"].label.split(" ", 1)[-1], (tr, cr), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.plot([1, top * 1.1], [1, top * 1.1], color="grey", ls="--", lw=1, label="speedup 1 (slower below)")
    ax.set_xlabel("time per call, PreSTO / sequential (median)")
    ax.set_ylabel("model calls, sequential / PreSTO (median)")
    ax.set_title("Fewer calls, each longer")
    ax.legend(fontsize=8)
    return _save(fig, plt, path)


def certainty_histogram(counts: dict[str, dict[str, int]], path: Path) -> Path:
    """Paper Fig. 15 analog: the share of MH decisions that are eps-certain (reject / accept)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 0.5 * len(counts) + 1.6))
    classes = ("reject", "uncertain", "accept")
    colors = {"reject": "tab:red", "uncertain": "tab:grey", "accept": "tab:green"}
    for y, (_label, c) in enumerate(counts.items()):
        total, left = sum(c.values()) or 1, 0.0
        for name in classes:
            share = c[name] / total
            ax.barh(y, share, left=left, color=colors[name], label=name if y == 0 else None)
            left += share
    ax.set_yticks(range(len(counts)), list(counts))
    ax.set_xlabel("share of MH decisions (eps = 0.01)")
    ax.set_title("eps-certainty of acceptance decisions")
    ax.legend(ncol=3, fontsize=8, loc="lower right")
    return _save(fig, plt, path)


def prefetch_tree(traces: list[Path], path: Path) -> Path | None:
    """Paper Fig. 21 analog: of the path-keyed traces' prefetching calls, the one whose walk
    went deepest (ties: the most requests), its requested decisions as a binary tree
    (1 = accept, 0 = reject) and the path MH took through it."""
    best: tuple | None = None
    for trace in traces:
        records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines() if line.strip()]
        calls = [r for r in records if r["type"] == "call" and r["kind"] == "mh"]
        if not calls or not isinstance(calls[0]["requests"][0]["decision"], str):
            continue  # step keys: no tree
        nodes: dict[int, list[dict]] = {}
        for n in records:
            if n["type"] == "node":
                nodes.setdefault(n["call"], []).append(n)
        for call in calls:
            walked = nodes.get(call["index"], [])
            score = (len(walked), len(call["requests"]))
            if best is None or score > best[0]:
                best = (score, call, walked)
    if best is None:
        return None
    _, call, walked = best
    asked = {r["decision"] for r in call["requests"]}
    root = min(asked, key=len)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.6))

    def xy(p: str) -> tuple[float, float]:
        rel, x, width = p[len(root) :], 0.0, 1.0
        for bit in rel:
            width /= 2
            x += width / 2 if bit == "1" else -width / 2
        return x, -len(rel)

    for p in asked - {root}:
        up = next(p[:i] for i in range(len(p) - 1, len(root) - 1, -1) if p[:i] in asked)  # root ends it
        (x0, y0), (x1, y1) = xy(up), xy(p)  # dashed: a decision whose parent was not requested (certain)
        ax.plot([x0, x1], [y0, y1], color="lightgrey", ls="-" if len(up) == len(p) - 1 else "--", zorder=1)
    xs, ys = zip(*(xy(p) for p in asked))
    ax.scatter(xs, ys, s=30, color="grey", zorder=2, label=f"prefetched ({len(asked)})")
    path_pts = [xy(n["decision"]) for n in walked]
    if path_pts:
        ax.plot(
            *zip(*path_pts),
            color="tab:red",
            marker="o",
            zorder=3,
            label=f"realized ({len(walked)} transitions; accepted {sum(n['accepted'] for n in walked)})",
        )
    ax.set_xticks([])
    ax.set_yticks(range(0, min(ys) - 1, -1))
    ax.set_ylabel("depth below the round's root")
    ax.set_title(f"Call {call['index']} (stage {call['stage']}): right = accept, left = reject")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.04), ncol=2)
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
