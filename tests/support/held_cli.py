"""``presto-sgl`` in a subprocess that stops before a chosen trace record until it is killed:
a test that kills it once its trace has reached some point can never find it already done,
however slowly the test's own polling runs."""

from __future__ import annotations

from tests.support.mutants import cli_command

HOLD_S = 300.0
"""How long the held CLI waits before it writes the record after all (a test that never kills it still ends)."""


def held_cli(before: int | str, file: str = "") -> list[str]:
    """The argv that starts ``presto-sgl`` (under the session's mutant when there is one:
    :func:`tests.support.mutants.cli_command`) whose trace writers wait ``HOLD_S`` before
    they write record number ``before`` (1 for the first) or the first record of type
    ``before``, in a trace file whose path ends with ``file``."""
    return cli_command(
        f"""\
import time
from presto_sgl.chain.trace import TraceWriter

write = TraceWriter.write


def held(self, record_type, payload):
    self.held_n = getattr(self, "held_n", 0) + 1
    if {before!r} in (self.held_n, record_type) and (not {file!r} or self._stream.name.endswith({file!r})):
        time.sleep({HOLD_S!r})  # until the test kills the process
    write(self, record_type, payload)


TraceWriter.write = held
"""
    )
