"""``presto-sgl compare RUN_A RUN_B``: paired TOST of log-likelihood and confidence between
two runs on the same prompts (A is the baseline; :mod:`presto_sgl.evaluation.equivalence`).

Exit status 0 when every statistic is shown equivalent, 1 when one is not (so scripts and CI
can gate on it), 2 on bad input; ``--json`` prints the tests as JSON instead of the table."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from .common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare",
        help="paired equivalence test (TOST) between two runs",
        description="Paired TOST of token-normalized log-likelihood and confidence between two "
        "`presto-sgl run` directories on the same prompts; RUN_A is the baseline.",
    )
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument(
        "--margin-sd",
        type=float,
        default=0.2,
        help="equivalence margin in standard deviations of RUN_A's values (default: 0.2, the paper's)",
    )
    p.add_argument(
        "--answer",
        action="store_true",
        help="test the statistics of the answers (the tokens up to and including the first stop token: "
        "answer_log_likelihood, answer_confidence) instead of the whole responses; compares a "
        "--ending eos run with a --ending fixed one",
    )
    p.add_argument("--plot", metavar="PNG", help="also draw the forest plot to this file")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the tests as JSON (statistic, n, means, difference, 90%% CI, margin, p_eq, p_holm, "
        "equivalent) and the verdict",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.equivalence import STATISTICS, compare_runs, forest_plot

    statistics = tuple(f"answer_{s}" for s in STATISTICS) if args.answer else STATISTICS
    try:
        tests = compare_runs(args.run_a, args.run_b, statistics=statistics, margin_sd=args.margin_sd)
    except (ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    verdict = all(t.equivalent for t in tests)
    if args.json:
        rows = [
            {
                **{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in t.__dict__.items()},
                "ci90": list(t.ci90),
                "equivalent": t.equivalent,
            }
            for t in tests
        ]
        print(
            json.dumps(
                {
                    "run_a": args.run_a,
                    "run_b": args.run_b,
                    "margin_sd": args.margin_sd,
                    "tests": rows,
                    "equivalent": verdict,
                },
                indent=2,
            )
        )
    else:
        print(
            f"A = {args.run_a} (baseline), B = {args.run_b}; margin "
            f"{args.margin_sd} SD of A; Holm over {len(tests)} tests"
        )
        print(
            f"{'statistic':23s} {'n':>4s} {'mean A':>9s} {'mean B':>9s} {'B - A':>9s} {'90% CI':>21s} "
            f"{'margin':>8s} {'p_eq':>7s} {'p_holm':>7s}  verdict"
        )
        for t in tests:
            ci = f"[{t.ci90[0]:+.4f}, {t.ci90[1]:+.4f}]"
            print(
                f"{t.statistic:23s} {t.n:4d} {t.mean_a:9.4f} "
                f"{t.mean_b:9.4f} {t.diff:+9.4f} {ci:>21s} "
                f"{t.margin:8.4f} {t.p_eq:7.4f} {t.p_holm:7.4f}  "
                f"{'equivalent' if t.equivalent else 'not shown equivalent'}"
            )
        print("equivalent" if verdict else "equivalence not established (exit 1)")
    if args.plot:
        label = f"{Path(args.run_b).name} vs {Path(args.run_a).name}"
        forest_plot([(label, t) for t in tests], args.plot)
        if not args.json:
            print(f"forest plot: {args.plot}")
    return 0 if verdict else 1
