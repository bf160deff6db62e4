"""Test-time baselines that are not MH (paper Case Study 8): low-temperature sampling,
best-of-N and Power-SMC, methods like the MH samplers (:mod:`presto_sgl.methods`), each
declared to :mod:`presto_sgl.registry` by :data:`SPECS`."""

from ..registry import BaselineSpec
from .base import Baseline
from .parallel import BestOfN, LowTemperature
from .params import BestOfNParams, LowTemperatureParams, PowerSMCParams, check_smc
from .smc import PowerSMC

__all__ = [
    "SPECS",
    "Baseline",
    "BestOfN",
    "BestOfNParams",
    "LowTemperature",
    "LowTemperatureParams",
    "PowerSMC",
    "PowerSMCParams",
]

SPECS = (
    BaselineSpec("lowtemp", LowTemperatureParams, LowTemperature, LowTemperature.uses, doc="one draw at --tau"),
    BaselineSpec("bestofn", BestOfNParams, BestOfN, BestOfN.uses, doc="--best-of draws, the best by --select"),
    BaselineSpec(
        "powersmc",
        PowerSMCParams,
        PowerSMC,
        PowerSMC.uses,
        doc="--particles grown in blocks of --block-size, the exponent ramped to alpha over --ramp-tokens",
        check=check_smc,
    ),
)
"""The built-in baselines, registered by :mod:`presto_sgl.registry` on a table's first read."""
