"""``presto-sgl report RUN_DIR... --out DIR``: tables and figures of runs (:mod:`presto_sgl.evaluation.report`)."""

from __future__ import annotations

import argparse

from .common import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "report",
        help="Markdown report with figures of `run` directories",
        description="Accuracy, time, speedup over sequential, equivalence tests and the paper's "
        "figures for one or more `presto-sgl run` directories.",
    )
    p.add_argument("runs", nargs="+", metavar="RUN_DIR")
    p.add_argument("--out", required=True, metavar="DIR", help="where report.md and the PNGs go")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..evaluation.report import write_report

    try:
        path = write_report(args.runs, args.out)
    except (ValueError, KeyError) as exc:
        raise UsageError(str(exc)) from exc
    print(path)
    return 0
