"""Test-time baselines that are not MH (paper Case Study 8): low-temperature sampling,
best-of-N and Power-SMC, with the samplers' ``run`` / ``describe`` / ``check_prompt``."""

from .parallel import BestOfN, LowTemperature
from .smc import PowerSMC

BASELINES = ("lowtemp", "bestofn", "powersmc")

__all__ = ["BASELINES", "BestOfN", "LowTemperature", "PowerSMC"]
