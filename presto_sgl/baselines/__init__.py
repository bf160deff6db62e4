"""Test-time baselines that are not MH (paper Case Study 8): low-temperature sampling,
best-of-N and Power-SMC, methods like the MH samplers (:mod:`presto_sgl.methods`), each
registered by name in :mod:`presto_sgl.registry` when this package loads."""

from ..registry import BaselineSpec, builtin
from .base import Baseline
from .parallel import BestOfN, LowTemperature
from .params import BestOfNParams, LowTemperatureParams, PowerSMCParams, check_smc
from .smc import PowerSMC

__all__ = [
    "Baseline",
    "BestOfN",
    "BestOfNParams",
    "LowTemperature",
    "LowTemperatureParams",
    "PowerSMC",
    "PowerSMCParams",
]

builtin(BaselineSpec("lowtemp", LowTemperatureParams, LowTemperature, LowTemperature.uses, doc="one draw at --tau"))
builtin(BaselineSpec("bestofn", BestOfNParams, BestOfN, BestOfN.uses, doc="--best-of draws, the best by --select"))
builtin(
    BaselineSpec(
        "powersmc",
        PowerSMCParams,
        PowerSMC,
        PowerSMC.uses,
        doc="--particles grown in blocks of --block-size, the exponent ramped to alpha over --ramp-tokens",
        check=check_smc,
    )
)
