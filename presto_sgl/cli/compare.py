"""``presto-sgl compare RUN_A RUN_B``: paired TOST of log-likelihood and confidence between
two runs on the same prompts (A is the baseline; :mod:`presto_sgl.evaluation.equivalence`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="paired equivalence test (TOST) between two runs",
                       description="Paired TOST of token-normalized log-likelihood and confidence between two "
                       "`presto-sgl run` directories on the same prompts; RUN_A is the baseline.")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--margin-sd", type=float, default=0.2,
                   help="equivalence margin in standard deviations of RUN_A's values (default: 0.2, the paper's)")
    p.add_argument("--plot", metavar="PNG", help="also draw the forest plot to this file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.equivalence import compare_runs, forest_plot

    try:
        tests = compare_runs(args.run_a, args.run_b, margin_sd=args.margin_sd)
    except (ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    print(f"A = {args.run_a} (baseline), B = {args.run_b}; margin {args.margin_sd} SD of A; Holm over {len(tests)} tests")
    print(f"{'statistic':16s} {'n':>4s} {'mean A':>9s} {'mean B':>9s} {'B - A':>9s} {'90% CI':>21s} "
          f"{'margin':>8s} {'p_eq':>7s} {'p_holm':>7s}  verdict")
    for t in tests:
        ci = f"[{t.ci90[0]:+.4f}, {t.ci90[1]:+.4f}]"
        print(f"{t.statistic:16s} {t.n:4d} {t.mean_a:9.4f} {t.mean_b:9.4f} {t.diff:+9.4f} {ci:>21s} "
              f"{t.margin:8.4f} {t.p_eq:7.4f} {t.p_holm:7.4f}  {'equivalent' if t.equivalent else 'not shown equivalent'}")
    if args.plot:
        label = f"{Path(args.run_b).name} vs {Path(args.run_a).name}"
        forest_plot([(label, t) for t in tests], args.plot)
        print(f"forest plot: {args.plot}")
    return 0
