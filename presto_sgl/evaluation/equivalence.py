"""Paired equivalence tests between two runs on the same prompts (paper Case Study 3, App. E.3).

For a statistic s (log-likelihood, confidence) and the paired differences d_i = s_B(i) - s_A(i)
with mean m and standard error se over n prompts, the two one-sided t-tests (TOST) of
H0: mu_d <= -delta and H0: mu_d >= +delta give p_eq = max(p_lower, p_upper); equivalence
at level 0.05 is the 90% interval m +- t_{0.95, n-1} se inside (-delta, delta). The margin
delta is ``margin_sd`` (0.2) standard deviations of s across prompts in run A (the
baseline). p-values of the statistics tested together are Holm-adjusted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

STATISTICS = ("log_likelihood", "confidence")


@dataclass(frozen=True)
class Tost:
    statistic: str
    n: int
    mean_a: float
    mean_b: float
    _: KW_ONLY
    diff: float  # mean of B - A
    ci90: tuple[float, float]
    margin: float
    p_eq: float
    p_holm: float = math.nan

    @property
    def equivalent(self) -> bool:
        return self.p_holm < 0.05 if not math.isnan(self.p_holm) else self.p_eq < 0.05


def paired_tost(a: Sequence[float], b: Sequence[float], margin: float, statistic: str = "") -> Tost:
    from scipy import stats

    n = len(a)
    if n != len(b) or n < 3:
        raise ValueError(f"paired TOST needs the same n >= 3 values in both runs, got {len(a)} and {len(b)}")
    if not margin > 0:
        raise ValueError(f"the equivalence margin (={margin}) must be > 0 (the baseline's values do not vary)")
    d = [y - x for x, y in zip(a, b)]
    m = sum(d) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1))
    se = sd / math.sqrt(n)
    if se == 0:
        p = 0.0 if abs(m) < margin else 1.0
        ci = (m, m)
    else:
        p = max(stats.t.sf((m + margin) / se, n - 1), stats.t.cdf((m - margin) / se, n - 1))
        half = stats.t.ppf(0.95, n - 1) * se
        ci = (m - half, m + half)
    return Tost(statistic, n, sum(a) / n, sum(b) / n, diff=m, ci90=ci, margin=margin, p_eq=float(p))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values (monotone, capped at 1)."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    out, running = [0.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        out[i] = running
    return out


def load_records(run: str | Path) -> dict[str, dict]:
    path = Path(run) / "records.jsonl" if Path(run).is_dir() else Path(run)
    if not path.exists():
        raise ValueError(f"{str(run)!r}: no records.jsonl (a `presto-sgl run --out` directory)")
    return {r["id"]: r for r in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if r}


def compare_runs(
    run_a: str | Path, run_b: str | Path, *, statistics: Sequence[str] = STATISTICS, margin_sd: float = 0.2
) -> list[Tost]:
    """TOST of each statistic on the prompts both runs have (A is the baseline), Holm-adjusted."""
    a, b = load_records(run_a), load_records(run_b)
    ids = sorted(set(a) & set(b))
    tests = []
    for s in statistics:
        pairs = [(a[i][s], b[i][s]) for i in ids if a[i].get(s) is not None and b[i].get(s) is not None]
        if len(pairs) < 3:
            raise ValueError(
                f"{s}: only {len(pairs)} prompts have it in both runs (need >= 3; confidence needs "
                "--rescore or an engine with entropy)"
            )
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        mean = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
        tests.append(paired_tost(xs, ys, margin_sd * sd, s))
    adjusted = holm([t.p_eq for t in tests])
    return [Tost(**{**t.__dict__, "p_holm": p}) for t, p in zip(tests, adjusted)]


def forest_plot(rows: Sequence[tuple[str, Tost]], path: str | Path) -> Path:
    """The paper's Fig. 6 / 14 style: each test's 90% interval of the difference in margin units."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    edge = 3.0  # the axis spans +-3 margins; a difference beyond is drawn at the edge, its value written
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(rows) + 1.6))
    for y, (_label, t) in enumerate(rows):
        lo, hi, mid = (min(edge, max(-edge, c / t.margin)) for c in (*t.ci90, t.diff))
        color = "tab:green" if t.equivalent else "tab:red"
        ax.plot([lo, hi], [y, y], color=color, lw=2)
        ax.plot([mid], [y], ">" if mid == edge else "<" if mid == -edge else "o", color=color)
        if abs(t.diff / t.margin) > edge:
            ax.annotate(
                f"{t.diff / t.margin:+.0f}",
                (mid, y),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color=color,
            )
    ax.set_xlim(-edge - 0.3, edge + 0.3)
    ax.axvline(-1, ls="--", color="grey")
    ax.axvline(1, ls="--", color="grey")
    ax.axvline(0, color="black", lw=0.5)
    ax.set_yticks(range(len(rows)), [f"{label} ({t.statistic})" for label, t in rows])
    ax.invert_yaxis()
    ax.set_xlabel("difference B - A, 90% CI, in units of the margin (0.2 SD of A)")
    ax.set_title("Paired TOST: green = equivalent (Holm-adjusted p < 0.05)", loc="left")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return Path(path)
