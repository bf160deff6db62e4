"""Run untrusted Python (a model's completion and its tests) in a separate, limited process.

Never in the sampler's process: each program runs as ``python -I`` in a fresh temporary
directory, in its own session (the whole process group is killed at the limit), with
address-space, CPU-time, file-size and open-file limits, an empty environment, and no
network: inside a new network namespace (``unshare -rn``, loopback only and down) where the
kernel allows unprivileged namespaces, and in every case with the ``socket`` module's
constructors replaced by ones that raise. Exit status 0 is a pass.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

_PRELUDE = """\
import socket as _s
def _no_network(*a, **k):
    raise OSError("network access is disabled in the grader's sandbox")
_s.socket = _s.create_connection = _s.socketpair = _s.fromfd = _no_network
del _s, _no_network
"""


@dataclass(frozen=True)
class Outcome:
    """``status``: passed, failed (non-zero exit, an exception), timeout or memory."""

    status: str
    detail: str
    seconds: float

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@functools.cache
def _unshare() -> list[str]:
    """``["unshare", "-rn"]`` when an unprivileged network namespace can be made here, else []."""
    tool = shutil.which("unshare")
    if tool is None:
        return []
    try:
        ok = subprocess.run([tool, "-rn", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return [tool, "-rn"] if ok else []


def network_isolated() -> bool:
    """Whether programs run in their own network namespace (else only the socket guard applies)."""
    return bool(_unshare())


def run_python(program: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> Outcome:
    """Run ``program`` under the limits above; wall-clock ``timeout_s``, address space ``memory_mb``."""
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"`timeout_s` (={timeout_s!r}) must be a positive number of seconds")
    if not (isinstance(memory_mb, int) and memory_mb >= 64):
        raise ValueError(f"`memory_mb` (={memory_mb!r}) must be an integer >= 64")

    def limits() -> None:  # in the child, before exec
        import resource

        cpu = int(timeout_s) + 1
        for which, value in ((resource.RLIMIT_AS, memory_mb << 20), (resource.RLIMIT_CPU, cpu),
                             (resource.RLIMIT_FSIZE, 16 << 20), (resource.RLIMIT_NOFILE, 64),
                             (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))

    with tempfile.TemporaryDirectory(prefix="presto-sgl-grade-") as tmp:
        path = os.path.join(tmp, "program.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(_PRELUDE + program)
        cmd = [*_unshare(), sys.executable, "-I", "-B", path]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=limits)
        try:
            _, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill(proc)
            return Outcome("timeout", f"killed after {timeout_s:g} s", time.monotonic() - t0)
        finally:
            _kill(proc)
        dt = time.monotonic() - t0
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    if proc.returncode == 0:
        return Outcome("passed", "", dt)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and dt >= timeout_s * 0.9:
        return Outcome("timeout", f"CPU limit ({proc.returncode})", dt)
    if "MemoryError" in tail[0]:
        return Outcome("memory", f"over {memory_mb} MiB", dt)
    return Outcome("failed", tail[0][-300:] or f"exit status {proc.returncode}", dt)


def _kill(proc: subprocess.Popen) -> None:
    """Kill the program's whole process group (children it forked included)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    if proc.stderr is not None:
        proc.stderr.close()
