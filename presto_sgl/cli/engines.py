"""Engines by name (``--engine``): builders from the parsed arguments, generated from the
engine catalog's declared options (:mod:`presto_sgl.catalog`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from .. import catalog
from ..engines.base import Engine
from ..fields import params_of
from .common import PROG


def engine_flags() -> dict[str, list[tuple[str, object]]]:
    """Each engine option's name -> (engine, its default) of every engine that declares it."""
    out: dict[str, list[tuple[str, object]]] = {}
    for spec in catalog.ENGINES.values():
        for p in params_of(spec.options):
            out.setdefault(p.name, []).append((spec.name, p.default))
    return out


def _builder(spec: catalog.EngineSpec) -> Callable[[argparse.Namespace], Engine]:
    """The builder of ``spec``'s engine: the flags it declares (the rest: its defaults); a flag
    of another engine is ignored, with a warning naming it."""
    own = {p.name: p.cli_flag for p in params_of(spec.options)}

    def build(args: argparse.Namespace) -> Engine:
        given = {name: getattr(args, name) for name in engine_flags() if getattr(args, name, None) is not None}
        for name in sorted(set(given) - set(own)):
            others = [e for e, _ in engine_flags()[name]]
            print(
                f"{PROG}: warning: --{name.replace('_', '-')} applies to the {' / '.join(others)} engine; "
                f"ignored with --engine {spec.name}",
                file=sys.stderr,
            )
        return spec.create(**{k: v for k, v in given.items() if k in own})

    return build


ENGINES: dict[str, Callable[[argparse.Namespace], Engine]] = {
    name: _builder(spec) for name, spec in catalog.ENGINES.items()
}
"""Engine name -> builder from the parsed arguments (a flag left out: the engine's default)."""
