"""``presto-sgl fit-predictor`` and ``eval-predictor``: fit and score the eps-certainty
predictor on the decisions scored in ``presto-sgl sample --trace`` traces."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import UsageError, cli_message


# -- arguments ----------------------------------------------------------------------
def _features(text: str) -> list[str]:
    from ..predictor.model import FEATURES

    names = [part for part in text.replace(" ", "").split(",") if part]
    unknown = [n for n in names if n not in FEATURES]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected distinct names from {', '.join(FEATURES)} separated by commas, got {text!r}"
        )
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
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
    f.set_defaults(func=fit)

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
    e.set_defaults(func=evaluate)


# -- pieces -------------------------------------------------------------------------
def _observations(args: argparse.Namespace) -> list:
    from ..predictor.evaluation import load_observations

    try:
        return load_observations(args.traces)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _cross_validate(args: argparse.Namespace, observations: list):
    """The held-out evaluation, or None with --folds 0."""
    from ..predictor.evaluation import cross_validate

    if args.folds == 0:
        return None
    try:
        return cross_validate(observations, args.features, folds=args.folds)
    except ValueError as exc:
        raise UsageError(cli_message(exc)) from exc


def _run_settings(paths: Sequence[str]) -> list[dict[str, Any]]:
    """The distinct sampler settings of the traces' runs (seeds and prompts left out)."""
    from ..chain.trace import read_trace

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
    return (
        f"decisions {shares['decisions']} from {shares['prompts']} prompts: {parts} (eps-certain {100 * certain:.1f}%)"
    )


# -- commands -----------------------------------------------------------------------
def fit(args: argparse.Namespace) -> int:
    """``fit-predictor``."""
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
        raise UsageError(cli_message(exc)) from exc
    except OSError as exc:
        raise UsageError(f"`--output` cannot write {args.output!r}: {exc.strerror or exc}") from exc
    lines = [_shares_line(_shares(observations))]
    if cv is not None:
        lines += _evaluation_lines(f"{cv.folds}-fold CV, prompts held out:", cv, "class prior")
    print("\n".join([*lines, f"saved {args.output} (features {', '.join(predictor.features)})"]))
    return 0


def evaluate(args: argparse.Namespace) -> int:
    """``eval-predictor``."""
    from ..predictor import load_predictor
    from ..predictor.evaluation import evaluate as score

    observations = _observations(args)
    cv = _cross_validate(args, observations)
    given = None
    if args.predictor is not None:
        try:
            given = score(load_predictor(args.predictor), observations)
        except ValueError as exc:
            raise UsageError(cli_message(exc)) from exc
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
