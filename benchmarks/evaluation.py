"""Evaluation results (issue 12; paper Case Studies 1-3 and 8): accuracy and time of the
baselines, sequential PowerMH and PreSTO on one task, the TOST table, every figure.

    python -m benchmarks.evaluation --suite smollm2 [--dataset reasoning-gym:TASK] [--limit 30]
    python -m benchmarks.evaluation --suite tiny [--limit 30]
    python -m benchmarks.evaluation --suite humaneval|champ [--limit 30]
    python -m benchmarks.evaluation --suite tiny --report-only     # tables and figures from the runs

Each method is one `presto-sgl run` (in this process, one after another, so no two time
at once) into ``OUT/runs/NAME``; a rerun resumes each run (the problems done are skipped)
and ``--report-only`` only regenerates ``OUT/report.md`` and its PNGs with `presto-sgl
report` over the runs. OUT defaults to ``benchmarks/results/evaluation/SUITE``.

Git keeps each run's manifest, records and ``traces.digest.jsonl``, not its per-prompt
``traces/``: the digest holds what the report reads of them (every MH decision for the
eps-certainty figure; with path keys, the prefetching call the walk went deepest in, for
the prefetched-tree figure), written from ``traces/`` before every report. A run without
``traces/`` is reported from its digest, so ``--report-only`` on a fresh clone regenerates
the same tables and figures.

Suites (embedded engine, fp32 and seeded, so PreSTO's chains are the sequential ones):
- ``smollm2``: SmolLM2-135M-Instruct on a reasoning-gym task (default: one-digit sums and
  differences of two terms, which low-temperature sampling solves about a fifth of), T = 64
  in two blocks of 32, K = 10 per block, alpha = 4, tau = 1/4: low temperature,
  best-of-4/8/16, Power-SMC (8 particles), sequential PowerMH, PreSTO step (the fastest
  rule on this engine), and the two biased chains.
- ``humaneval`` and ``champ``: SmolLM2-135M-Instruct on HumanEval (chat, graded by its
  tests in the sandbox) and on CHAMP (competition math, answer matching), T = 128 in two
  blocks of 64, K = 5 per block: the baselines (CHAMP: best-of-8 only), sequential
  PowerMH and PreSTO step. At
  135M parameters and 128 tokens the model solves almost none of either: these runs
  measure time, speedup and equivalence on real prompts of other lengths and kinds.
- ``gemma3``: Gemma 3 270M (a base model, no chat template) on ``arithmetic:1`` (few-shot sums
  and differences of two one-digit numbers, which greedy decoding solves about half of; the
  answer opens the first line), T = 8 in two blocks of 4, K = 4 per block, alpha = 4, tau = 1/4:
  greedy (tau = 0.001), low temperature, best-of-8, Power-SMC (8 particles) and PreSTO step (the
  chains sequential PowerMH draws). ``gemma3-sequence``: the same on ``sequence`` (the next term of
  an arithmetic progression from five, which greedy decoding solves about a third of).
- ``tiny``: the project's tiny adder on ``addition`` with noisy proposals (tau = 2, where
  plain sampling solves about half): the same baselines, sequential PowerMH with each
  keying, PreSTO bfs, predictive and step at N_pf = 8 (bfs and step also at 2, 4 and 16),
  and the two biased chains.

Two biased chains, PreSTO step with a wrong PowerMH acceptance, test the TOST's power:
``biased`` flips the proposal term (log A = alpha (log p0(y) - log p0(x)) + log q(y) - log
q(x)), the sabotage the exactness suites must reject; ``accept-all`` skips the test (log A
= 0), so the chain keeps its last proposal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.compare import machine
from presto_sgl import cli
from presto_sgl.kernels import mh

FLIPPED = "PreSTO step, proposal term flipped (biased on purpose)"
ACCEPT_ALL = "PreSTO step, every proposal accepted (biased on purpose)"
DIGEST = "traces.digest.jsonl"
"""A run's digest of its traces/ (module docstring), trace-shaped: the report reads it as a trace."""


def _flipped(orig: Callable[..., float]) -> Callable[..., float]:
    """log A = alpha (log p0(y) - log p0(x)) + log q(y) - log q(x): the q terms swapped, the
    sabotage of tests/support/cases.py."""

    def log_acceptance(lq_x: float, lq_y: float, lp_x: float, lp_y: float, alpha: float, extra: float = 0.0) -> float:
        return orig(lq_y, lq_x, lp_x, lp_y, alpha, extra)

    return log_acceptance


def _accept_all(orig: Callable[..., float]) -> Callable[..., float]:
    """log A = 0: the acceptance test skipped, so the chain keeps its last proposal."""
    return lambda *args, **kwargs: 0.0


@dataclass(frozen=True)
class Method:
    name: str
    args: tuple[str, ...]
    sabotage: Callable[[Callable[..., float]], Callable[..., float]] | None = None


@dataclass(frozen=True)
class Suite:
    dataset: str
    common: tuple[str, ...]
    methods: tuple[Method, ...]


BASELINES = (  # Power-SMC grows its particles in blocks of the suite's --block-size
    Method("lowtemp", ("--method", "lowtemp")),
    *(Method(f"bestof{n}", ("--method", "bestofn", "--best-of", str(n))) for n in (4, 8, 16)),
    Method("powersmc", ("--method", "powersmc", "--particles", "8")),
)


SUITES = {
    "smollm2": Suite(
        "reasoning-gym:basic_arithmetic:max_terms=2,max_digits=1,operators=('+','-')",
        ("--engine", "embedded", "--model", "smollm2", "--max-new-tokens", "64", "--block-size", "32", "--steps", "10"),
        (
            *BASELINES,
            Method("sequential", ("--rule", "sequential")),
            Method("presto-step", ("--rule", "step", "--budget", "20", "--traces")),
            Method("biased", ("--rule", "step", "--budget", "20", "--label", FLIPPED), _flipped),
            Method("accept-all", ("--rule", "step", "--budget", "20", "--label", ACCEPT_ALL), _accept_all),
        ),
    ),
    **{
        name: Suite(  # code and competition math at T = 128: the model solves (almost) none
            name,
            (
                "--engine",
                "embedded",
                "--model",
                "smollm2",
                "--max-new-tokens",
                "128",
                "--block-size",
                "64",
                "--steps",
                "5",
            ),
            (
                *baselines,
                Method("sequential", ("--rule", "sequential")),
                Method("presto-step", ("--rule", "step", "--budget", "20", "--traces")),
            ),
        )
        for name, baselines in (
            ("humaneval", BASELINES),
            ("champ", [m for m in BASELINES if m.name in ("lowtemp", "bestof8", "powersmc")]),
        )
    },
    **{
        name: Suite(
            dataset,
            (
                *("--engine", "embedded", "--model", "gemma3", "--ending", "fixed"),
                *("--max-new-tokens", "8", "--block-size", "4", "--steps", "4"),
            ),
            (
                Method("greedy", ("--method", "lowtemp", "--tau", "0.001")),
                *(m for m in BASELINES if m.name in ("lowtemp", "bestof8", "powersmc")),
                Method("presto-step", ("--rule", "step", "--budget", "20")),
            ),
        )
        for name, dataset in (("gemma3", "arithmetic:1"), ("gemma3-sequence", "sequence"))
    },
    "tiny": Suite(
        "addition",
        (
            "--engine",
            "embedded",
            "--model",
            "tiny-adder",
            "--no-chat",
            "--tau",
            "2",
            "--max-new-tokens",
            "36",
            "--block-size",
            "12",
            "--steps",
            "8",
        ),
        (
            *BASELINES,
            Method("sequential-path", ("--rule", "sequential", "--keying", "path")),
            Method("sequential-step", ("--rule", "sequential", "--keying", "step")),
            Method("presto-bfs", ("--rule", "bfs", "--budget", "8", "--traces")),
            Method("presto-predictive", ("--rule", "predictive", "--budget", "8", "--traces")),
            Method("presto-step", ("--rule", "step", "--budget", "8", "--traces")),
            *(
                Method(f"presto-{rule}-{b}", ("--rule", rule, "--budget", str(b)))  # speedup vs budget (Fig. 5)
                for rule in ("bfs", "step")
                for b in (2, 4, 16)
            ),
            Method("biased", ("--rule", "step", "--budget", "8", "--label", FLIPPED), _flipped),
            Method("accept-all", ("--rule", "step", "--budget", "8", "--label", ACCEPT_ALL), _accept_all),
        ),
    ),
}


@contextlib.contextmanager
def sabotaged(sabotage: Callable[[Callable[..., float]], Callable[..., float]]) -> Iterator[None]:
    """PowerMH's acceptance replaced by ``sabotage(the real one)`` for the block."""
    orig = mh.log_acceptance
    mh.log_acceptance = sabotage(orig)
    try:
        yield
    finally:
        mh.log_acceptance = orig


def write_digest(run: Path) -> None:
    """``run/DIGEST`` from ``run/traces/``: every MH decision node (the fields the report
    reads), and the mh call of path keys the walk went deepest in (ties: the most requests,
    then the first; the report's choice) with its nodes, the only nodes linked to a call."""
    nodes, best = [], None
    for trace in sorted((run / "traces").glob("*.jsonl")):
        records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines() if line.strip()]
        walked: dict[int, list[dict]] = {}
        for r in records:
            if r["type"] == "node":
                node = {k: r[k] for k in ("type", "call", "decision", "accepted", "log_accept")}
                nodes.append(node)
                walked.setdefault(r["call"], []).append(node)
        for call in records:
            if call["type"] == "call" and call["kind"] == "mh" and isinstance(call["requests"][0]["decision"], str):
                score = (len(walked.get(call["index"], [])), len(call["requests"]))
                if best is None or score > best[0]:
                    best = (score, call, walked.get(call["index"], []))
    chosen = {id(n) for n in best[2]} if best else set()
    lines = [json.dumps(n if id(n) in chosen else n | {"call": None}) for n in nodes]
    if best is not None:
        lines.append(json.dumps(best[1]))
    (run / DIGEST).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def report_view(runs: list[Path], tmp: Path) -> list[Path]:
    """The runs as the report reads them: a run without ``traces/`` but with a digest as a
    folder of links to its files and a ``traces/`` holding only the digest."""
    view = []
    for run in runs:
        if (run / "traces").is_dir() or not (run / DIGEST).is_file():
            view.append(run)
            continue
        (tmp / run.name / "traces").mkdir(parents=True)
        for f in run.iterdir():
            (tmp / run.name / f.name).symlink_to(f.resolve())
        (tmp / run.name / "traces" / DIGEST).symlink_to((run / DIGEST).resolve())
        view.append(tmp / run.name)
    return view


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", choices=sorted(SUITES), required=True)
    ap.add_argument("--dataset", default=None, help="the suite's dataset (smollm2: a reasoning-gym task)")
    ap.add_argument("--limit", type=int, default=30, help="problems per run (default: 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/evaluation/SUITE")
    ap.add_argument("--only", default=None, help="comma-separated method names to run (default: all)")
    ap.add_argument("--report-only", action="store_true", help="no sampling: the report from the runs there")
    args = ap.parse_args()
    suite = SUITES[args.suite]
    out = args.out or Path(__file__).resolve().parent / "results" / "evaluation" / args.suite
    dataset = args.dataset or suite.dataset
    methods = [m for m in suite.methods if args.only is None or m.name in args.only.split(",")]
    if args.only is not None and len(methods) != len(args.only.split(",")):
        ap.error(f"--only: methods are {', '.join(m.name for m in suite.methods)}, not {args.only!r}")
    print(machine(), flush=True)
    if not args.report_only:
        for m in methods:
            argv = [
                "run",
                "--dataset",
                dataset,
                "--limit",
                str(args.limit),
                "--seed",
                str(args.seed),
                "--out",
                str(out / "runs" / m.name),
                *suite.common,
                *m.args,
            ]
            print(f"== {m.name}: presto-sgl {' '.join(argv)}", flush=True)
            with sabotaged(m.sabotage) if m.sabotage is not None else contextlib.nullcontext():
                rc = cli.main(argv)
            if rc != 0:
                return rc
    runs = [p for m in suite.methods if ((p := out / "runs" / m.name) / "manifest.json").is_file()]
    if not runs:
        print(f"no runs under {out / 'runs'}: run without --report-only first", file=sys.stderr)
        return 1
    for run in runs:
        if (run / "traces").is_dir():
            write_digest(run)
    with tempfile.TemporaryDirectory() as tmp:
        return cli.main(["report", *map(str, report_view(runs, Path(tmp))), "--out", str(out)])


if __name__ == "__main__":
    raise SystemExit(main())
