"""Options that ``sample``, ``run`` and ``serve`` share: the engine, the method, and building both.

The method flags are generated from the registry's declared parameters
(:func:`presto_sgl.config.parameters`): a kernel or baseline registered there gets its
``--method`` choice and its flags here with no other edit. A flag left out is not sent to
the library, whose defaults apply (and whose checks refuse a parameter of another method).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .. import catalog, registry
from ..build import make_method, method_under
from ..config import MethodConfig, parameters
from ..constraints import GRAMMARS, Constraint
from ..engines.text import ModelFolder, TokenizerView
from ..fields import Param, params_of
from ..methods import Method
from ..scheduling.pool import GuardedEngine
from .engines import ENGINES, engine_flags


def _temperatures(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(t) for t in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated temperatures such as 0.25,0.5,1.0, got {text!r}"
        ) from None


TYPES = {"bool": None, "tuple": _temperatures, "float": float, "int": int, "str": str}
"""A declared parameter's kind -> the argparse type of its flag."""


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """``--engine`` and every engine's options, generated from the engine catalog's declarations
    (:mod:`presto_sgl.catalog`): a flag shared by engines is one flag, its defaults said
    per engine where they differ; a flag left out is the chosen engine's default."""
    eng = p.add_argument_group("engine")
    eng.add_argument(
        "--engine",
        choices=list(catalog.ENGINES),
        default="embedded",
        help="model engine: " + "; ".join(f"{s.name} ({s.doc})" for s in catalog.ENGINES.values()),
    )
    declared = {q.name: q for spec in reversed(catalog.ENGINES.values()) for q in params_of(spec.options)}
    for name, defaults in engine_flags().items():
        param = declared[name]
        shown = {str(d) for _, d in defaults if d is not None}
        if len(shown) > 1:
            tail = " (default: " + ", ".join(f"{e} {d}" for e, d in defaults) + ")"
        else:
            tail = f" (default: {shown.pop()})" if shown else ""
        eng.add_argument(
            param.cli_flag,
            dest=name,
            default=None,
            type=TYPES[param.kind] or str,
            choices=param.choice_list(),
            metavar=param.metavar,
            help=param.doc + tail,
        )
    eng.add_argument(
        "--no-chat",
        dest="chat",
        action="store_false",
        help="do not apply the model's chat template to the prompt (run: to any problem)",
    )


def _method_help() -> str:
    kernels = ", ".join(f"{s.name} ({s.doc})" for s in registry.KERNELS.values())
    baselines = ", ".join(f"{s.name} ({s.doc})" for s in registry.BASELINES.values())
    return f"what the run uses: an MH kernel, run by --rule: {kernels}; or a baseline that is not MH: {baselines}"


def _add_param(group: argparse._ArgumentGroup, param: Param, owner: str) -> None:
    kind = param.kind
    default = (
        "1/alpha" if param.name == "tau" else (",".join(map(str, param.default)) if kind == "tuple" else param.default)
    )
    doc = param.doc if param.name != "method" else _method_help()
    if owner and not doc.startswith(f"{owner}:"):
        doc = f"{owner}: {doc}"
    tail = "" if kind == "bool" or "(default" in doc else f" (default: {default})"
    kw: dict[str, Any] = {"dest": param.name, "default": None, "help": doc + tail}
    if kind == "bool":
        kw |= {"action": "store_const", "const": True}
    else:
        kw |= {"type": TYPES[kind], "metavar": param.metavar, "choices": param.choice_list()}
    group.add_argument(param.cli_flag, **kw)


def add_method_options(p: argparse.ArgumentParser) -> None:
    """The method flags: ``--method``, the schedule, the rule and every
    kernel's and baseline's parameters, from the registry."""
    grp = p.add_argument_group("method (a kernel run by a rule, or a baseline)")
    owners = registry.declared()
    for param in parameters():
        _add_param(grp, param, owners.get(param.name, ""))


def method_options(args: argparse.Namespace) -> dict[str, Any]:
    """The method flags the user gave (the library's defaults fill the rest)."""
    given = {p.name: getattr(args, p.name, None) for p in parameters()}
    return {k: v for k, v in given.items() if v is not None}


def add_constraint_options(p: argparse.ArgumentParser) -> None:
    """Structured power sampling: one flag per grammar kind (:data:`~presto_sgl.constraints.GRAMMARS`;
    a value that names a file is read from it), ``--dtype`` and ``--min-tokens``."""
    grp = p.add_argument_group(
        "constraint (structured power sampling: the target restricted to the answers it allows, sampled exactly)"
    )
    for g in GRAMMARS.values():
        grp.add_argument(
            "--" + g.name.replace("_", "-"),
            dest=g.name,
            metavar="TEXT|FILE",
            help=f"{g.doc}: inline, or a file holding it (one grammar per run)",
        )
    grp.add_argument(
        "--dtype", choices=("int", "float", "str", "bool"), help="an answer of this type (SGLang's regexes)"
    )
    grp.add_argument(
        "--min-tokens", dest="min_tokens", type=int, metavar="N", help="no stop token before N answer tokens"
    )


def args_constraint(args: argparse.Namespace) -> Constraint | None:
    """The constraint of the flags (None: none), a grammar given as a file read from it."""
    grammars = {}
    for kind in GRAMMARS:
        value = getattr(args, kind, None)
        if value is not None:
            path = Path(value)
            grammars[kind] = path.read_text(encoding="utf-8") if len(value) < 4096 and path.is_file() else value
    dtype, min_tokens = getattr(args, "dtype", None), getattr(args, "min_tokens", None)
    return Constraint.of(dtype=dtype, min_tokens=min_tokens, **grammars)


def answer_valid(constraint: Constraint, text: str, eos_index: int | None, length: int) -> bool | None:
    """Whether a chain's answer (``text``, ended by the stop token at ``eos_index``; None: cut at
    the response's ``length``) is one ``constraint`` allows (:meth:`Constraint.validates`)."""
    return constraint.validates(text, eos_index if eos_index is not None else length, eos_index is not None)


def model_name(engine: Any, args: argparse.Namespace) -> str:
    """The model a run samples from, for its manifest or trace: the server's model folder,
    else the embedded ``--model``, else the engine's name."""
    path = engine.model_path if isinstance(engine, ModelFolder) else None
    return str(path or (args.model or catalog.EmbeddedOptions.model if args.engine == "embedded" else args.engine))


def args_method(args: argparse.Namespace) -> MethodConfig:
    """The validated method of the flags, under their constraint (ConfigError naming the
    parameter); no engine is built."""
    return method_under(method_options(args), args_constraint(args))


def build(args: argparse.Namespace) -> tuple[GuardedEngine, Method]:
    """The engine (in a :class:`~presto_sgl.scheduling.pool.GuardedEngine`: it counts the calls for the
    progress line, and lets a pool cancel its chains) and the method the options name;
    ConfigError / TypeError / EngineError on bad input. The method's options are checked
    before the engine is built (a bad flag never waits on a server)."""
    spec = args_method(args)
    engine = GuardedEngine(ENGINES[args.engine](args))
    return engine, make_method(engine, spec)


def add_scheduler_flag(p: argparse.ArgumentParser) -> None:
    """``--scheduler`` and ``--load-cap-from``: how the chains in flight share the engine
    (presto_sgl.scheduling.scheduler)."""
    p.add_argument(
        "--scheduler",
        choices=("shared", "off"),
        default="shared",
        help="with several chains in flight on an in-process engine, 'shared' merges every chain's model calls "
        "into one engine call per round and picks how many prefetched requests each chain sends from a call-time "
        "model of the merged calls (the most predicted transitions per second); on a server engine each chain "
        "plans and calls alone (the server batches the calls) unless --load-cap-from; 'off' lets each chain plan "
        "and call alone on any engine (default: shared)",
    )
    p.add_argument(
        "--load-cap-from",
        dest="share_from",
        type=int,
        default=None,
        metavar="N",
        help="server engines, --scheduler shared: from N chains in flight, cap each chain's prefetched requests "
        "by the server's load (default: never; measured no faster than each chain's own budget: "
        "benchmarks/RESULTS.md)",
    )


def note_plain_prompts(engine: Any, chat: bool) -> None:
    """Tell the user (stderr) when prompts meant for a chat template go as plain text: the model has none."""
    text = engine.text
    if chat and isinstance(text, TokenizerView) and not text.has_chat_template:
        special = (
            ", with the model's special tokens (its <bos>)"
            if text.encode("x", special=True) != text.encode("x")
            else ""
        )
        print(
            f"presto-sgl: the model has no chat template (a base model): prompts go as plain text{special}; "
            "write them as text to continue (--no-chat says so and silences this)",
            file=sys.stderr,
        )
