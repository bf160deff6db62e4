"""The SGLang front end: ``s += power_gen(...)`` in ``@sgl.function`` programs, and whole
programs power-sampled with no change to their code (the interpreter hooks, the program
state's token view)::

    from presto_sgl.program import power_gen, power_gen_int, power_gen_string, power_select
    from presto_sgl.program import power_sampled, power_sampling

    with power_sampling(alpha=4.0):
        state = program.run(...)  # every sgl.gen / sgl.select in it power-sampled
"""

from .frontend import power_gen, power_gen_int, power_gen_string, power_select
from .scope import power_sampled, power_sampling

__all__ = ["power_gen", "power_gen_int", "power_gen_string", "power_sampled", "power_sampling", "power_select"]
