"""The SGLang front end: ``s += power_gen(...)`` in ``@sgl.function`` programs (the
interpreter hooks, the program state's token view)::

    from presto_sgl.program import power_gen, power_select
"""

from .frontend import power_gen, power_select

__all__ = ["power_gen", "power_select"]
