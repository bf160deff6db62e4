"""Starting and stopping the project's own servers from tests (scripts/*_server.sh)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_script(script: str, *args: str) -> None:
    """``bash scripts/<script> args...`` (e.g. ``sglang_server.sh start --port P``), failing the test on error."""
    subprocess.run(["bash", str(ROOT / "scripts" / script), *args], check=True, timeout=900)
