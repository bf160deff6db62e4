"""Starting and stopping the project's own servers from tests and benchmarks (scripts/*_server.sh of
a repository checkout)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def restartable(script: str, url: str) -> str | None:
    """The port of ``url`` when ``script`` started the server there (``restart`` has its options)."""
    port = url.rstrip("/").rsplit(":", 1)[-1]
    folder = "vllm" if script.startswith("vllm") else "sglang"
    return port if (ROOT / ".cache" / folder / f"server-{port}.args").is_file() else None


def run_through_a_restart(
    script: str, make_engine: Callable[[str], Any], run: Callable[[Any], Any], shared_url: str | None = None
):
    """``run(engine)`` in a thread, with the server stopped while the third call is in flight (the
    fourth waits until it is down) and started again. The server: the one at ``shared_url`` when
    ``script`` started it (``script restart`` brings it back with the same options; it stays up),
    else one of its own (fp32) on a spare port, stopped at the end. Returns run's result."""
    shared = restartable(script, shared_url) if shared_url else None
    own = shared is None
    port = shared or str(free_port())
    if own:
        server_script(script, "start", "--port", port, "--dtype", "float32", "--timeout", "600")
    try:
        eng = make_engine(f"http://127.0.0.1:{port}")
        in_call, stopped = threading.Event(), threading.Event()
        calls = 0
        real_generate = eng.generate

        def generate(requests):
            nonlocal calls
            calls += 1
            if calls == 3:
                in_call.set()
            elif calls > 3:
                stopped.wait()
            return real_generate(requests)

        eng.generate = generate
        out: dict = {}
        chain = threading.Thread(target=lambda: out.update(result=run(eng)), daemon=True)
        chain.start()
        assert in_call.wait(600)
        t0 = time.monotonic()
        server_script(script, "stop", "--port", port)
        stopped.set()
        server_script(script, "restart", "--port", port)
        chain.join(600)
        print(f"restart: down and back in {time.monotonic() - t0:.0f} s, reconnects {eng.stats.reconnects}")
        assert not chain.is_alive() and "result" in out
        assert eng.stats.reconnects >= 1
        return out["result"]
    finally:
        if own:
            server_script(script, "stop", "--port", port)
