"""Starting and stopping the project's own servers from tests and benchmarks (scripts/*_server.sh of
a repository checkout)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (tests/support/servers.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_script(script: str, *args: str, cpu: int | None = None) -> None:
    """``bash scripts/<script> args...`` (e.g. ``sglang_server.sh start --port P``), failing the test
    on error; ``cpu``: pinned to that core (``taskset``; the service's threads inherit it)."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    subprocess.run([*pin, "bash", str(ROOT / "scripts" / script), *args], check=True, timeout=900)


def kill_server(script: str, port: int | str) -> None:
    """SIGKILL the whole process group of ``script``'s service on ``port`` (its PID file):
    a crash, not a shutdown; ``server_script(script, "start", ...)`` starts it again."""
    folder = "vllm" if script.startswith("vllm") else "sglang"
    name = "router" if "router" in script else "server"
    pidfile = ROOT / ".cache" / folder / f"{name}-{port}.pid"
    pid = int(pidfile.read_text())
    os.killpg(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):  # SIGKILL is delivered asynchronously
        time.sleep(0.1)
    pidfile.unlink(missing_ok=True)  # a zombie not yet reaped would read as "still starting"


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
