"""Modules that moved when the top level was grouped into subpackages (``chain``, ``scheduling``,
``program``): their old names still import, as the new module, with a DeprecationWarning
naming it (``from presto_sgl.frontend import power_gen`` keeps working)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED = {
    **{
        f"presto_sgl.{m}": f"presto_sgl.chain.{m}"
        for m in ("state", "keys", "proposals", "walker", "executor", "samplers", "resume", "trace", "metrics")
    },
    **{f"presto_sgl.{m}": f"presto_sgl.scheduling.{m}" for m in ("scheduler", "offers", "pool", "runner")},
    "presto_sgl.frontend": "presto_sgl.program.frontend",
    "presto_sgl.interpreter": "presto_sgl.program.interpreter",
    "presto_sgl.program_state": "presto_sgl.program.state",
    "presto_sgl.options": "presto_sgl.build",
    "presto_sgl.serve.metrics": "presto_sgl.serve.prometheus",
}
"""Old module name -> where it lives now."""


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name (after the path finders did not) and loads it as the new module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The new module ran when it was imported."""


def install() -> None:
    """Answer the old names (once per process)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())
