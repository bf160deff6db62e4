"""``presto-sgl sample``: draw one response by (PreSTO-)PowerMH and print it (text or JSON).

The chain runs with no EOS stop (exactly ``--max-new-tokens`` tokens); the printed
answer ends at the first of the model's stop tokens (:func:`cut_at_stop`).

``--resume TRACE`` goes on with the interrupted run whose ``--trace`` is TRACE, from the
last boundary it recorded (:mod:`presto_sgl.execution.resume`), appending to TRACE. The prompt, seed
and prompt id come from the trace; the other options must be the ones it was written with
(a difference is refused, named).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from dataclasses import asdict
from typing import Any

from ..chain.metrics import PromptMetrics
from ..chain.trace import TraceWriter
from ..engines.base import Engine
from ..engines.monitor import Monitored
from ..errors import ConfigError, EngineError
from ..execution.context import RunContext
from ..execution.resume import Checkpoint, check_same_run, read_checkpoint, truncate
from ..methods import Method, SampleResult
from ..scheduling.pool import GuardedEngine
from .common import UsageError, cli_message, flag
from .options import (
    add_constraint_options,
    add_engine_options,
    add_method_options,
    answer_valid,
    args_constraint,
    build,
    model_name,
    note_plain_prompts,
)
from .progress import Progress


# -- arguments ----------------------------------------------------------------------
def _prompt_ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.replace(" ", "").split(",") if part != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated token ids such as 1,2,3, got {text!r}") from None


def _prompt_id(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sample",
        help="sample one response from p0^alpha",
        description="Sample one response from pi_alpha ∝ p0^alpha by PowerMH or PreSTO-PowerMH.",
    )

    add_engine_options(p)

    prm = p.add_argument_group("prompt (or --resume)").add_mutually_exclusive_group()
    prm.add_argument("--prompt", metavar="TEXT", help="prompt text, encoded by the engine's tokenizer")
    prm.add_argument("--prompt-ids", metavar="IDS", type=_prompt_ids, help="prompt token ids, e.g. 1,2,3")

    add_method_options(p)
    add_constraint_options(p)
    keys = p.add_argument_group("chain keys")
    keys.add_argument("--seed", type=int, default=None, help="run seed (default: 0, or the resumed trace's)")
    keys.add_argument(
        "--prompt-id",
        type=_prompt_id,
        default=None,
        help="prompt id in the chain keys (default: 0, or the resumed trace's)",
    )

    out = p.add_argument_group("output")
    out.add_argument("--trace", metavar="FILE", help="write a JSONL trace of every call and transition to FILE")
    out.add_argument(
        "--resume",
        metavar="TRACE",
        help="go on with the interrupted run that wrote TRACE (its --trace), appending to it",
    )
    out.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    out.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress line on stderr (default: only when stderr is a terminal)",
    )
    p.set_defaults(func=run)


# -- setup --------------------------------------------------------------------------
def _encode(engine: Engine, args: argparse.Namespace) -> list[int]:
    """The prompt ids as given (--prompt-ids) or encoded (--prompt); the method validates them."""
    if args.prompt_ids is not None:
        return list(args.prompt_ids)
    if not engine.text.has_tokenizer:
        raise ValueError(f"`--prompt`: engine {args.engine!r} has no tokenizer here; pass --prompt-ids instead")
    note_plain_prompts(engine, args.chat)
    return engine.text.prompt_ids(args.prompt or "", chat=args.chat)


def _check_prompt(method: Method, ids: list[int], args: argparse.Namespace) -> list[int]:
    """``method.check_prompt``, its messages naming the flag the user passed."""
    given = "--prompt-ids" if args.prompt_ids is not None else "--prompt"
    try:
        return list(method.check_prompt(ids))
    except ConfigError as exc:
        raise UsageError(exc.render(lambda p: given if p == "prompt" else flag(p), lambda n, v: f"{n} {v}")) from None


def _setup(args: argparse.Namespace) -> tuple[GuardedEngine, Method, list[int], Any, Checkpoint | None]:
    """(engine, method, prompt ids, open trace stream or None, checkpoint or None), or a UsageError.

    Everything that can be rejected is checked before the trace file is opened, and
    only this setup maps ValueError/TypeError to exit code 2: the same exceptions
    from inside a run would be bugs and keep their traceback."""
    try:
        checkpoint = _checkpoint(args)
        engine, method = build(args)
        ids = (
            list(checkpoint.run["prompt"])
            if checkpoint is not None and not _has_prompt(args)
            else _encode(engine, args)
        )
        prompt = _check_prompt(method, ids, args)
        if checkpoint is not None:  # refused here, before the trace is touched, when the run differs
            check_same_run(
                checkpoint.name,
                checkpoint.run,
                method.run_record(prompt, args.seed, args.prompt_id, _info(engine, args)),
            )
        stream = None
        path = args.resume or args.trace
        if path:
            try:
                if checkpoint is not None:
                    truncate(path, checkpoint.offset)  # what follows the last boundary is redone
                # closed by the caller once the run ends (it outlives this function)
                stream = open(path, "a" if checkpoint is not None else "w", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                option = "--resume" if checkpoint is not None else "--trace"
                raise ValueError(f"`{option}` cannot open {path!r}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(cli_message(exc)) from exc
    except EngineError as exc:  # e.g. the SGLang server is unreachable
        raise UsageError(str(exc)) from exc
    return engine, method, prompt, stream, checkpoint


def _has_prompt(args: argparse.Namespace) -> bool:
    return args.prompt is not None or args.prompt_ids is not None


def _checkpoint(args: argparse.Namespace) -> Checkpoint | None:
    """The resumed trace's checkpoint (seed and prompt id defaulted from it), or None."""
    if args.resume is None:
        if not _has_prompt(args):
            raise ValueError("one of `--prompt`, `--prompt-ids` or `--resume` is required")
        args.seed = 0 if args.seed is None else args.seed
        args.prompt_id = 0 if args.prompt_id is None else args.prompt_id
        return None
    if args.trace is not None:
        raise ValueError("`--resume` appends to the trace it resumes; drop `--trace`")
    checkpoint = read_checkpoint(args.resume)
    args.seed = checkpoint.run.get("seed", 0) if args.seed is None else args.seed
    args.prompt_id = checkpoint.run.get("prompt_id", 0) if args.prompt_id is None else args.prompt_id
    return checkpoint


def _info(engine: GuardedEngine, args: argparse.Namespace) -> dict[str, object]:
    """The run record's engine and model (compared on resume)."""
    return {"engine": args.engine, "model": model_name(engine.inner, args)}


# -- run ----------------------------------------------------------------------------
def run(args: argparse.Namespace) -> int:
    engine, method, prompt, stream, checkpoint = _setup(args)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = Progress(sys.stderr, engine, method.transitions_per_run) if show and method.transitions_per_run else None
    if progress is not None and checkpoint is not None:
        progress.done = len(checkpoint.nodes)
    try:
        trace = TraceWriter(stream) if stream is not None else None
        # Engines with server-side metrics (sglang, vllm) add a `server` record: KV-pool peak, prefix hits.
        monitored = engine.inner if trace is not None and isinstance(engine.inner, Monitored) else None
        with monitored.monitor() if monitored is not None else contextlib.nullcontext() as server:
            result = method.run(
                prompt,
                seed=args.seed,
                prompt_id=args.prompt_id,
                context=RunContext(trace=trace, resume=checkpoint),
                on_transition=progress,
                info=_info(engine, args),
            )
        if trace is not None and server is not None:
            trace.write("server", server.summary().as_record())
    finally:
        if progress is not None:
            progress.close()
        if stream is not None:
            stream.close()
    _print_result(args, engine, method, result)
    return 0


# -- output -------------------------------------------------------------------------
VERDICTS = {
    True: "the answer validates",
    False: "the answer does not validate (or is a prefix cut at the length)",
    None: "not checked here (no independent validator for this grammar)",
}


def _summary(metrics: PromptMetrics) -> str:
    m = metrics
    rate = m.accepted / m.transitions if m.transitions else 0.0
    return "\n".join(
        [
            f"transitions       {m.transitions} (accepted {m.accepted}, acceptance rate {100 * rate:.1f}%)",
            f"model calls       {m.model_calls} (+{m.extend_calls} block extensions), "
            f"transitions/call {m.transitions_per_call:.2f}",
            f"requests          issued {m.requests_issued}, realized {m.requests_realized}, "
            f"unreachable {m.requests_unreachable}",
            f"call time         {m.call_time_s:.3f} s (extensions {m.extend_time_s:.3f} s)",
            f"coordinator time  {m.coordinator_time_s:.3f} s",
        ]
    )


def _print_result(args: argparse.Namespace, engine: Engine, method: Method, result: SampleResult) -> None:
    state = result.state
    # The chain runs with no EOS stop (fixed length T); the answer ends at the first stop token.
    answer = engine.text.answer(state.tokens)
    constraint = args_constraint(args)
    valid = answer_valid(constraint, answer.text, answer.eos_index, state.length) if constraint is not None else None
    if args.json:
        loglik = state.log_likelihood()
        payload: dict[str, Any] = {
            "engine": args.engine,
            "seed": args.seed,
            "prompt_id": args.prompt_id,
            "prompt_ids": list(state.prompt),
            "response_ids": list(state.tokens),
            "response_text": answer.text,
            "eos_index": answer.eos_index,
            "config": method.describe(),
            "metrics": asdict(result.metrics),
            "log_likelihood": loglik,
            "log_likelihood_per_token": loglik / state.length if state.length else 0.0,
        }
        if constraint is not None:
            payload["valid"] = valid  # the answer is one the constraint allows (None: not checked here)
        print(json.dumps(payload))
    else:
        print(answer.text)
        print()
        print(_summary(result.metrics))
        if constraint is not None:
            print(f"constraint        {json.dumps(constraint.describe())}: {VERDICTS[valid]}")
