"""The baselines' own parameters (declared fields: CLI flags, ``serve`` fields, run records)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..fields import Validated, integer, number, one_of, option

if TYPE_CHECKING:
    from ..config import BaselineConfig

SELECT = ("logq", "logp")


@dataclass(frozen=True)
class LowTemperatureParams(Validated):
    """Low-temperature sampling has no parameters beyond the schedule's (tau)."""


@dataclass(frozen=True)
class BestOfNParams(Validated):
    best_of: int = option(8, "bestofn: draws per prompt, N", integer(1))
    select: str = option(
        "logq",
        "bestofn: keep the draw with the highest sum of log q_tau (the paper's) or of log p0 over its answer tokens",
        one_of(SELECT),
        choices=SELECT,
    )


def _ramp(name: str, value: object) -> int | None:
    return None if value is None else integer(0)(name, value)


@dataclass(frozen=True)
class PowerSMCParams(Validated):
    particles: int = option(8, "powersmc: particles, P", integer(1))
    ramp_tokens: int | None = option(
        None,
        "powersmc: tokens over which the exponent rises from 1 to alpha (default: "
        "the paper's 400 of 1024, scaled: max_new_tokens * 400 // 1024)",
        _ramp,
    )
    ess_fraction: float = option(
        0.5, "powersmc: resample when the effective sample size falls below this fraction of P", number(0, strict=True)
    )

    def _check(self) -> None:
        if self.ess_fraction > 1:
            raise ConfigError(
                "ess_fraction", self.ess_fraction, f"{{ess_fraction}} (={self.ess_fraction!r}) must be in (0, 1]"
            )


def ramp_tokens(config: BaselineConfig) -> int:
    """Power-SMC's ramp: as given, or the paper's 400 of 1024 scaled to ``max_new_tokens``."""
    given = config.params.ramp_tokens
    return given if given is not None else config.target.max_new_tokens * 400 // 1024


def check_smc(config: BaselineConfig) -> None:
    """ConfigError unless the ramp ends within the response (the target checks that the blocks tile it)."""
    n, ramp = config.target.max_new_tokens, ramp_tokens(config)
    if ramp > n:
        raise ConfigError(
            "ramp_tokens",
            ramp,
            f"{{ramp_tokens}} (={ramp}) must be <= {{max_new_tokens}} (={n}), else the particles never target p0^alpha",
        )
