"""What every command shares: the program name, the usage error (exit code 2) and how a
library :class:`~presto_sgl.errors.ConfigError` is told in flags."""

from __future__ import annotations

import sys

from ..config import parameters
from ..errors import ConfigError

PROG = "presto-sgl"


class UsageError(Exception):
    """Bad arguments or input: exit code 2."""


FLAGS = {
    "online": "--online-predictor",
    "timeout_s": "--timeout",
    "restart_timeout_s": "--restart-timeout",
    "n": "--best-of",
    "request_timeout_s": "--request-timeout",
    "share_from": "--load-cap-from",
}
"""Library parameters the registry does not declare whose flag is not ``--name-with-dashes``."""


def flag(param: str) -> str:
    """The flag that sets library parameter ``param``: the registry's, else ``--name-with-dashes``."""
    declared = {p.name: p.cli_flag for p in parameters()}
    return declared.get(param) or FLAGS.get(param) or "--" + param.replace("_", "-")


def cli_message(exc: BaseException) -> str:
    """An error's message in flags: a ConfigError's parameters as the flags that set them
    (`` `--max-new-tokens` ``, ``e.g. --max-new-tokens 32``); any other error as it is."""
    if isinstance(exc, ConfigError):
        return exc.render(flag, lambda name, value: f"{name} {value}")
    return str(exc)


def error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
