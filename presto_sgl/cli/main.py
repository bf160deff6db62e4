"""Command line: ``presto-sgl sample`` draws one response by (PreSTO-)PowerMH; ``run``
samples and grades a dataset into a resumable run directory; ``compare``
tests two runs for equivalence (paired TOST); ``report`` writes tables and figures of runs;
``fit-predictor`` and ``eval-predictor`` fit and score the eps-certainty predictor on traces;
``serve`` answers OpenAI-API requests by power sampling.

Exit codes: 0 success; 1 ``compare``: equivalence not established; 2 bad arguments or input
(argparse errors included);
3 the engine returned something the sampler cannot use (:class:`EngineError`);
130 interrupted (Ctrl-C). Results go to stdout; the progress line and all error
messages go to stderr only.

One module per command family: :mod:`.sample` (``sample``), :mod:`.run` (``run``), :mod:`.compare` (``compare``),
:mod:`.report` (``report``), :mod:`.predictor`
(``fit-predictor``, ``eval-predictor``), :mod:`.serve` (``serve``); engines by name in :mod:`.engines`, the
progress line in :mod:`.progress`, the usage error and flag naming in :mod:`.common`.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import EngineError
from ..version import __version__
from . import compare, predictor, report, run, sample, serve
from .common import PROG, UsageError, error


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Exact LLM power sampling (PowerMH, PreSTO-PowerMH).")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sample.add_parser(sub)
    run.add_parser(sub)
    compare.add_parser(sub)
    report.add_parser(sub)
    predictor.add_parsers(sub)
    serve.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, 1, 2, 3 or 130)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return args.func(args)
    except UsageError as exc:
        error(str(exc))
        return 2
    except EngineError as exc:
        error(f"engine: {exc}")
        return 3
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; {_resume_hint(args)}", file=sys.stderr)
        return 130


def _resume_hint(args: argparse.Namespace) -> str:
    """How to go on after Ctrl-C."""
    trace = getattr(args, "resume", None) or getattr(args, "trace", None)
    if args.command == "sample" and trace:
        return f"trace holds the finished calls; go on with `{PROG} sample --resume {trace}` and the same options"
    if args.command == "run":
        return "rerun the same command to go on (finished prompts are kept; with --traces, chains resume)"
    return "nothing was kept"


if __name__ == "__main__":
    sys.exit(main())
