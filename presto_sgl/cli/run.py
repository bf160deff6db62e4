"""``presto-sgl run``: sample every prompt of a dataset, grade it, one JSON record per prompt.

``--out DIR`` gets ``manifest.json`` and ``records.jsonl`` (:mod:`presto_sgl.evaluation.rundir`);
a rerun with the same options skips the prompts already there and appends the rest (with
``--traces``, a prompt whose chain was interrupted goes on from its trace's last boundary,
:mod:`presto_sgl.execution.resume`), and one with other options is refused with the difference
named. Each prompt's chain keys are
(``--seed``, the problem's id), so a prompt samples the same way whatever else runs.
``--workers`` chains are in flight at once (a server batches across them), in the package's
one :class:`~presto_sgl.scheduling.pool.ChainPool`; Ctrl-C, or a chain that fails, cancels the others, each
at its next model call (what they wrote to their traces resumes).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import time
from concurrent.futures import FIRST_EXCEPTION, wait
from pathlib import Path
from typing import Any, NamedTuple

from ..build import make_method, method_under
from ..chain.trace import TraceWriter
from ..constraints import Constraint
from ..errors import ConfigError, EngineError
from ..evaluation.records import make_record
from ..evaluation.results import aggregate, write_results
from ..evaluation.rundir import RunDir
from ..execution.context import RunContext
from ..execution.resume import Checkpoint, read_checkpoint, truncate
from ..methods import Method
from ..scheduling.pool import ChainPool, Ticket
from ..scheduling.scheduler import Scheduler
from ..tasks.base import Problem
from ..tasks.registry import NAMES, load_task
from .common import PROG, UsageError, cli_message, flag
from .options import (
    add_constraint_options,
    add_engine_options,
    add_method_options,
    add_scheduler_flag,
    answer_valid,
    args_constraint,
    build,
    method_options,
    model_name,
    note_plain_prompts,
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="sample and grade a dataset, resumably",
        description="Sample every prompt of a dataset from pi_alpha ∝ p0^alpha and grade it.",
    )
    data = p.add_argument_group("dataset")
    data.add_argument("--dataset", required=True, metavar="NAME|FILE", help=f"one of {', '.join(NAMES)}")
    data.add_argument(
        "--limit", type=int, default=None, help="the first N problems (default: all; 100 for procedural tasks)"
    )
    data.add_argument(
        "--prompt-field",
        default=None,
        metavar="NAME",
        help="hf:... datasets and JSONL files: the prompt's column (default: the first of prompt, "
        "question, problem, input; JSONL: prompt)",
    )
    data.add_argument(
        "--answer-field",
        default=None,
        metavar="NAME",
        help="hf:... datasets and JSONL files: the reference answer's column (default: the first of "
        "answer, solution, target; JSONL: answer); GSM8K's '#### X' and MATH's \\boxed{X} are read",
    )
    data.add_argument(
        "--samples",
        type=int,
        default=1,
        metavar="K",
        help="chains per problem, for pass@k (the unbiased estimator) in results.json (default: 1)",
    )
    data.add_argument("--out", required=True, metavar="DIR", help="run directory (created, or resumed)")
    add_engine_options(p)
    add_method_options(p)
    add_constraint_options(p)
    p.add_argument("--seed", type=int, default=0, help="run seed: chain keys and procedural problems (default: 0)")
    p.add_argument(
        "--label",
        default=None,
        help="the run's name in `report` and `compare` tables (default: its method, e.g. "
        "'powermh PreSTO step N_pf=20'); part of the run's config",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="chains in flight (default: 8 on a server engine, 1 in process)"
    )
    add_scheduler_flag(p)
    p.add_argument(
        "--rescore",
        choices=("engine", "local", "off"),
        default="engine",
        help="rescore each response under p0 for the log-likelihood statistic: 'engine' through the "
        "sampling engine itself (one scoring pass; the confidence's entropies from it on the embedded and "
        "reference engines, else the chain's where it has them), 'local' with "
        "a float32 forward of a local copy of the model (log-likelihood and "
        "confidence), 'off' from the chain's own log p0 (default: engine)",
    )
    p.add_argument("--no-rescore", dest="rescore", action="store_const", const="off", help="same as --rescore off")
    p.add_argument(
        "--traces",
        action="store_true",
        help="also write each prompt's JSONL trace of calls and transitions to DIR/traces/",
    )
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: only when stderr is a terminal)",
    )
    p.set_defaults(func=run)


def _setup(args: argparse.Namespace):
    try:
        if args.workers is not None and args.workers < 1:
            raise ValueError(f"`--workers` (={args.workers}) must be >= 1")
        if args.samples < 1:
            raise ValueError(f"`--samples` (={args.samples}) must be >= 1")
        task, problems = load_task(
            args.dataset,
            limit=args.limit,
            seed=args.seed,
            prompt_field=args.prompt_field,
            answer_field=args.answer_field,
        )
        engine, sampler = build(args)
        model = model_name(engine.inner, args)
        config = {
            "dataset": args.dataset,
            "seed": args.seed,
            "engine": args.engine,
            "model": str(model),
            "chat": args.chat,
            **sampler.describe(),
        }
        config |= {
            k: v
            for k, v in (
                ("samples", args.samples),
                ("prompt_field", args.prompt_field),
                ("answer_field", args.answer_field),
            )
            if v not in (None, 1)
        }
        if args.label is not None:
            if not args.label.strip():
                raise ValueError("`--label` must not be empty: give a name, or leave the option out")
            config["label"] = args.label
        info = {
            "task": {"name": task.name, "grader": task.grader, "problems": len(problems)},
            "engine": {
                "name": args.engine,
                "url": args.url,
                "mode": _mode(engine.inner),
                "seeded": engine.capabilities.seeded,
            },
        }
        note_plain_prompts(engine, args.chat and any(p.chat for p in problems))
        plans = _plans(args, engine, sampler, problems)
        prompts = {p.id: _encode(engine, plans[p.id].method, p, args) for p in problems}
        rundir = RunDir(args.out, config, info)
    except (ValueError, TypeError, ImportError) as exc:
        raise UsageError(cli_message(exc)) from exc
    except EngineError as exc:
        raise UsageError(str(exc)) from exc
    return task, problems, engine, plans, rundir, prompts, str(model)


class Plan(NamedTuple):
    """A problem's method and the constraint it samples under (None: none)."""

    method: Method
    constraint: Constraint | None


def _plans(args: argparse.Namespace, engine: Any, sampler: Method, problems: list[Problem]) -> dict[str, Plan]:
    """Each problem's plan: the run's method (under the flags' constraint), or one under the
    problem's own constraint where its record has one (one method per distinct constraint)."""
    run_constraint = args_constraint(args)
    by_constraint: dict[Any, Method] = {run_constraint: sampler}
    out = {}
    for p in problems:
        constraint = p.meta.get("constraint") or run_constraint
        if constraint not in by_constraint:
            try:
                by_constraint[constraint] = make_method(engine, method_under(method_options(args), constraint))
            except ConfigError as exc:
                raise ValueError(f"problem {p.id!r}: {exc.render(flag, lambda n, v: f'{n} {v}')}") from None
        out[p.id] = Plan(by_constraint[constraint], constraint)
    return out


def _validity(record: dict[str, Any], constraint: Constraint | None) -> dict[str, Any]:
    """The record's constraint and whether its answer is one the constraint allows (none: {})."""
    if constraint is None:
        return {}
    valid = answer_valid(constraint, record["response_text"], record["eos_index"], len(record["response_ids"]))
    return {"constraint": constraint.describe(), "valid": valid}


def _mode(engine: Any) -> str | None:
    """A server engine's mode (one-pass / two-pass), else None."""
    from ..engines.server import ServerEngine

    return engine.mode if isinstance(engine, ServerEngine) else None


def _encode(engine: Any, method: Method, problem: Problem, args: argparse.Namespace) -> list[int]:
    if not engine.text.has_tokenizer:
        raise ValueError(f"--dataset: engine {args.engine!r} has no tokenizer here for text prompts")
    try:
        return list(method.check_prompt(engine.text.prompt_ids(problem.prompt, chat=problem.chat and args.chat)))
    except ConfigError as exc:
        raise ValueError(f"problem {problem.id!r}: {exc.render(flag, lambda n, v: f'{n} {v}')}") from None


def _interrupted(path: Path) -> Checkpoint | None:
    """The checkpoint of the chain an interrupted run left in its trace at ``path``, cut to
    its last boundary, to resume; None to start afresh (no trace, or a trace that cannot be
    resumed: it is overwritten, with a warning)."""
    if not path.is_file():
        return None
    try:
        checkpoint = read_checkpoint(path)
    except ValueError as exc:
        print(f"{PROG}: warning: {exc}; sampling this prompt afresh", file=sys.stderr)
        return None
    truncate(path, checkpoint.offset)
    return checkpoint


def _rescorer(args: argparse.Namespace, model: str, engine: Any):
    """What rescores each response (``--rescore``), or None."""
    from ..evaluation.rescore import EngineRescorer, Rescorer

    if args.rescore == "off":
        return None
    try:
        return EngineRescorer(engine) if args.rescore == "engine" else Rescorer(model)
    except (OSError, ValueError) as exc:  # an engine that cannot score; a model folder not on this machine
        print(f"{PROG}: warning: no rescoring ({exc}); statistics from the chain's own log p0", file=sys.stderr)
        return None


def _samples(problems: list[Problem], k: int) -> list[tuple[str, Problem, int]]:
    """(record id, problem, sample) for each chain: sample 0 has the problem's id (a run with
    --samples 1 is the run without it), sample j the id ``ID#j``; the id keys the chain."""
    return [(p.id if j == 0 else f"{p.id}#{j}", p, j) for p in problems for j in range(k)]


def run(args: argparse.Namespace) -> int:
    task, problems, engine, plans, rundir, prompts, model = _setup(args)
    for w in [*rundir.warnings, *task.errors]:
        print(f"{PROG}: warning: {w}", file=sys.stderr)
    done = rundir.done_ids()
    chains = _samples(problems, args.samples)
    todo = [c for c in chains if c[0] not in done]
    print(
        f"{PROG}: {task.name}: {len(problems)} problems x {args.samples} samples, {len(chains) - len(todo)} already "
        f"in {rundir.path}, {len(todo)} to run",
        file=sys.stderr,
    )
    rescorer = _rescorer(args, model, engine.inner) if todo else None
    workers = args.workers or (8 if args.engine in ("sglang", "vllm") else 1)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    bar = _bar(len(chains), len(chains) - len(todo), task.name, show)

    traces = rundir.path / "traces"
    if args.traces:
        traces.mkdir(exist_ok=True)

    def one(chain_id: str, problem: Problem, sample: int, context: RunContext) -> None:
        t0 = time.perf_counter()
        method, constraint = plans[problem.id]
        if args.traces:
            name = "".join(c if c.isalnum() or c in "-_." else "_" for c in chain_id)
            path = traces / f"{name}.jsonl"
            checkpoint = _interrupted(path)
            with open(path, "a" if checkpoint is not None else "w", encoding="utf-8") as f:
                traced = dataclasses.replace(context, trace=TraceWriter(f), resume=checkpoint)
                result = method.run(prompts[problem.id], seed=args.seed, prompt_id=chain_id, context=traced)
        else:
            result = method.run(prompts[problem.id], seed=args.seed, prompt_id=chain_id, context=context)
        record = make_record(
            problem, task, engine.inner, result, seed=args.seed, rescorer=rescorer, seconds=time.perf_counter() - t0
        )
        record |= _validity(record, constraint)
        if args.samples > 1:
            record |= {"id": chain_id, "problem": problem.id, "sample": sample}
        rundir.append(record)
        if bar is not None:
            right, n = _accuracy(rundir.records)
            bar.set_postfix_str(f"accuracy {right / n:.1%}" if n else "", refresh=False)
            bar.update(1)

    shared = args.scheduler == "shared" and workers > 1
    distinct = list({id(p.method): p.method for p in plans.values()}.values())
    scheduler = Scheduler.for_method(distinct[0], engine.inner, share_from=args.share_from) if shared else None
    if scheduler is not None:
        for method in distinct[1:]:
            scheduler.adopt(method)
    pool, ticket = ChainPool(workers, len(todo), scheduler), Ticket(math.inf)
    try:
        futures = pool.submit(ticket, [functools.partial(one, *c) for c in todo], engine) or []
        finished, _ = wait(futures, return_when=FIRST_EXCEPTION)
        ticket.cancel("a chain failed")  # after a failure: chains not started never start, the others stop
        failed = [f.exception() for f in finished if f.exception() is not None]
        if failed:
            raise failed[0]  # type: ignore[misc]  # exceptions only: None was filtered out above
    except KeyboardInterrupt:  # records are on disk as they finish: stop now, resume later
        ticket.cancel("interrupted")  # each running chain stops at its next model call; main says how to go on
        raise
    finally:
        pool.close()
        if bar is not None:
            bar.close()
    right, n = _accuracy(rundir.records)
    acc = f", accuracy {right}/{n} = {right / n:.1%}" if n else ""
    results = aggregate(rundir.records)
    passes = "".join(f", pass@{k} {v:.1%}" for k, v in results.get("pass_at_k", {}).items() if args.samples > 1)
    write_results(rundir.path / "results.json", {"run": str(rundir.path), "config": rundir.config, **results})
    print(f"{rundir.path}: {len(rundir.records)} records{acc}{passes}{_validated(rundir.records)}; results.json")
    return 0


def _validated(records: list[dict[str, Any]]) -> str:
    """The summary's count of the answers that validate against their constraint ('' with none)."""
    checked = [r["valid"] for r in records if "valid" in r]
    if not checked:
        return ""
    unchecked = sum(v is None for v in checked)
    tail = f" ({unchecked} not checked here: no independent validator)" if unchecked else ""
    return f", {sum(v is True for v in checked)}/{len(checked)} answers validate{tail}"


def _accuracy(records: list[dict[str, Any]]) -> tuple[int, int]:
    """(correct, graded) over the records that have a grade."""
    graded = [r["grade"]["correct"] for r in records if r["grade"]["correct"] is not None]
    return sum(graded), len(graded)


def _bar(total: int, initial: int, name: str, show: bool):
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="prompt", file=sys.stderr, dynamic_ncols=True)
