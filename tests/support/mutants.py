"""Deliberately wrong samplers, to show which exactness test catches each
(``python -m benchmarks.mutations``). ``PRESTO_SGL_MUTANT=NAME pytest ...`` applies mutant NAME
to the library for the whole session (tests/conftest.py); unset, nothing changes.

Each mutant is a plausible bug: a wrong acceptance that still looks like an MH rule, broken
keys, a walker that takes draws it may not, a content-dependent redraw, a lossy resume.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the repository: a CLI subprocess imports this module from it

MUTANTS: dict[str, tuple[str, Callable[[], None]]] = {}


def mutant(name: str, what: str):
    def register(apply: Callable[[], None]) -> Callable[[], None]:
        MUTANTS[name] = (what, apply)
        return apply

    return register


@mutant("q-flipped", "PowerMH acceptance with the proposal terms swapped: alpha (lp_y - lp_x) + lq_y - lq_x")
def _q_flipped() -> None:
    from presto_sgl.kernels import mh

    orig = mh.log_acceptance
    mh.log_acceptance = lambda logq_current, logq_proposal, logp_current, logp_proposal, alpha, extra=0.0: orig(
        logq_proposal, logq_current, logp_current, logp_proposal, alpha, extra
    )


@mutant("no-q-term", "PowerMH acceptance without the proposal terms: alpha (lp_y - lp_x) (independence-sampler slip)")
def _no_q_term() -> None:
    from presto_sgl.kernels import mh

    orig = mh.log_acceptance
    mh.log_acceptance = lambda logq_current, logq_proposal, logp_current, logp_proposal, alpha, extra=0.0: orig(
        0.0, 0.0, logp_current, logp_proposal, alpha, extra
    )


@mutant("alpha-one", "PowerMH acceptance at alpha = 1 (targets p0, not p0^alpha)")
def _alpha_one() -> None:
    from presto_sgl.kernels import mh

    orig = mh.log_acceptance
    mh.log_acceptance = lambda logq_current, logq_proposal, logp_current, logp_proposal, alpha, extra=0.0: orig(
        logq_current, logq_proposal, logp_current, logp_proposal, 1.0, extra
    )


@mutant("accept-all", "every proposal accepted (log A = 0)")
def _accept_all() -> None:
    from presto_sgl.kernels import mh

    mh.log_acceptance = lambda *args, **kwargs: 0.0


@mutant("cut-never-0", "the uniform cut drawn from {1..T-1}: the first token is never resampled")
def _cut_never_0() -> None:
    from presto_sgl.chain.keys import DecisionDraws, randbelow

    DecisionDraws.cut = lambda self, length: 1 + randbelow(self.cut_key, length - 1) if length > 1 else 0  # type: ignore[method-assign]  # the mutant replaces the method


@mutant("uniform-per-stage", "one acceptance uniform for every decision of a stage (keys not per decision)")
def _uniform_per_stage() -> None:
    from presto_sgl.chain import keys

    orig = keys.ChainKeys.decision

    def decision(self, stage, decision):
        d = orig(self, stage, decision)
        return keys.DecisionDraws(d.cut_key, d.seed, keys.uniform01(keys.hash64("acc", self.run_seed, stage)))

    keys.ChainKeys.decision = decision  # type: ignore[method-assign]  # the mutant replaces the method


@mutant("stale-prefix", "the walker takes draws made after another prefix (the store's prefix check dropped)")
def _stale_prefix() -> None:
    from presto_sgl.kernels.proposals import ProposalStore

    def find(self, decision, tokens, cut):
        return next((e for e in self._by_decision.get(decision, ()) if e.cut == cut), None)

    ProposalStore.find = find  # type: ignore[method-assign]  # the mutant replaces the method


@mutant("content-redraw", "an engine that redraws a response whose first token is 0, once (a content-triggered retry)")
def _content_redraw() -> None:
    from presto_sgl.engines.reference import ReferenceEngine

    orig = ReferenceEngine._complete

    def complete(self, request):
        c = orig(self, request)
        return orig(self, request) if c.tokens and c.tokens[0] == 0 else c

    ReferenceEngine._complete = complete  # type: ignore[method-assign]  # the mutant replaces the method


@mutant("entropycut-inverted", "EntropyCut's cut-law ratio turned over (forward over reverse)")
def _entropycut_inverted() -> None:
    from presto_sgl.kernels import entropycut

    orig = entropycut.log_cut_ratio
    entropycut.log_cut_ratio = lambda current, proposed, cut, beta: -orig(current, proposed, cut, beta)


@mutant("multitry-weight", "MultiTryMH weighting draws by q at the first temperature, not the mixture")
def _multitry_weight() -> None:
    from presto_sgl.kernels import multitry

    multitry.log_weight = lambda logp, logq_at, alpha: alpha * math.fsum(logp) - math.fsum(r[0] for r in logq_at)


@mutant(
    "eos-no-length-term",
    "ending=eos: the uniform cut's law read as constant (PowerMH loses L(x)/L(y), MultiTryMH its lambda = 1/L)",
)
def _eos_no_length_term() -> None:
    from presto_sgl.kernels import multitry, powermh

    for module in (powermh, multitry):  # each imports it from kernels.mh by name
        setattr(module, "log_uniform_cut", lambda length: 0.0)  # noqa: B010


@mutant(
    "eos-entropycut-same-length",
    "ending=eos: EntropyCut's reverse cut law over the current state's positions, as if the proposal had its length",
)
def _eos_entropycut_same_length() -> None:
    from presto_sgl.kernels import entropycut

    orig = entropycut.log_cut_ratio

    def same_length(current, proposed, cut, beta):
        proposed = (tuple(proposed) + tuple(current[len(proposed) :]))[: len(current)]
        return orig(current, proposed, cut, beta)

    entropycut.log_cut_ratio = same_length


@mutant("resume-path-lost", "resume restarts the stage's walk path at the root (path keys of the rest change)")
def _resume_path_lost() -> None:
    import dataclasses
    import importlib

    from presto_sgl.execution import resume

    orig = resume.read_checkpoint
    resume.read_checkpoint = lambda path: dataclasses.replace(orig(path), path="")
    for module in ("presto_sgl.cli.sample", "presto_sgl.cli.run"):  # they import it by name
        cli: Any = importlib.import_module(module)
        cli.read_checkpoint = resume.read_checkpoint


def cli_command(prelude: str = "") -> list[str]:
    """The argv that starts ``presto-sgl`` in a subprocess, under the session's mutant
    (``PRESTO_SGL_MUTANT``) when there is one: a test that compares a subprocess with an
    in-process run must not compare the unmutated library with the mutated one. ``prelude``:
    Python run before the CLI (after the mutant), e.g. a test's hook into the library."""
    name = os.environ.get("PRESTO_SGL_MUTANT")
    if not name and not prelude:
        return [sys.executable, "-m", "presto_sgl.cli"]
    mutant = (
        f"sys.path.insert(0, {str(ROOT)!r})\nfrom tests.support.mutants import apply\napply({name!r})\n" if name else ""
    )
    code = f"import sys\n{mutant}{prelude}\nfrom presto_sgl.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return [sys.executable, "-c", code]


def apply(name: str) -> str:
    """Apply mutant ``name``; its description."""
    if name not in MUTANTS:
        raise ValueError(f"PRESTO_SGL_MUTANT={name!r}: no such mutant (choose from {', '.join(MUTANTS)})")
    what, fn = MUTANTS[name]
    fn()
    return what
