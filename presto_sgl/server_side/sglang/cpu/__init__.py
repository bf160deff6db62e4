"""Optional patches for SGLang's CPU engine and its profiling, each opt-in by its environment
variable and imported only then (a GPU server, or a CPU one without them, imports none):

- :mod:`.attention` (``PRESTO_SGL_BATCHED_ATTENTION=1``): batched attention for the
  ``torch_native`` backend;
- :mod:`.sampling` (``PRESTO_SGL_CDF_SAMPLING=1``): one uniform per row and the row's
  cumulative distribution instead of one exponential per vocabulary entry;
- :mod:`.profile` (``PRESTO_SGL_PROFILE=DIR``): timers of the scheduler's steps, written to DIR.

``scripts/sglang_server.sh start --batched-attention / --cdf-sampling / --profile DIR`` sets them.
"""

from __future__ import annotations

import importlib
import os

PATCHES = {
    "attention": ("PRESTO_SGL_BATCHED_ATTENTION", "1"),
    "sampling": ("PRESTO_SGL_CDF_SAMPLING", "1"),
    "profile": ("PRESTO_SGL_PROFILE", None),  # None: any non-empty value (a directory)
}
"""Each patch module: (its environment variable, the value that enables it)."""


def enabled(name: str) -> bool:
    variable, value = PATCHES[name]
    set_to = os.environ.get(variable, "")
    return set_to == value if value is not None else bool(set_to)


def install() -> list[str]:
    """Register the enabled patches (in this order: profile outermost, so last); their names."""
    names = [name for name in PATCHES if enabled(name)]
    for name in names:
        importlib.import_module(f"{__name__}.{name}").register()
    return names
