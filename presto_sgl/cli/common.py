"""What every command shares: the program name, the usage error (exit code 2) and the
naming of library parameters as command-line flags in messages."""

from __future__ import annotations

import sys

PROG = "presto-sgl"


class UsageError(Exception):
    """Bad arguments or input: exit code 2."""


FLAGS = {
    name: "--" + name.replace("_", "-")
    for name in (
        "alpha", "tau", "sampler", "beta", "tries", "try_temperatures", "max_new_tokens", "block_size", "steps", "keying", "rule", "budget", "seed", "vocab_size", "prompt",
        "model", "device", "predictor", "cost_aware", "features", "folds", "particles", "select",
    )
} | {"online": "--online-predictor", "timeout_s": "--timeout", "restart_timeout_s": "--restart-timeout",
    "n": "--best-of", "ramp_tokens": "--ramp-tokens", "max_n": "--max-n"}
"""Library parameter name -> the flag that sets it."""


def cli_names(message: str) -> str:
    """Library messages name parameters as `max_new_tokens`; say `--max-new-tokens`."""
    for name, flag in FLAGS.items():
        message = message.replace(f"`{name}`", f"`{flag}`").replace(f"e.g. {name}=", f"e.g. {flag} ")
    return message


def error(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)
