"""Where an SGLang CPU server's time goes (server side, opt-in; ``benchmarks/sglang_profile.py``).

With ``PRESTO_SGL_PROFILE=DIR`` (``scripts/sglang_server.sh start --profile DIR``) the plugin
wraps, in the scheduler process, the scheduler's batch step (``Scheduler.run_batch``), the
model forward (``ModelRunner.forward``), sampling (``ModelRunner.sample``, the one-pass
plugin's work included) and the ``torch_native`` attention loops (decode and extend), and
after every batch step writes the cumulative seconds and counts to
``DIR/profile-PID.json``. A client takes the difference around a call: what is not inside
a batch step is the scheduler's loop, tokenization, detokenization and HTTP.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from . import PATCHES

_TORCH_NATIVE = "sglang.srt.layers.attention.torch_native_backend.TorchNativeAttnBackend"
TARGETS = {
    "batch_step": "sglang.srt.managers.scheduler.Scheduler.run_batch",
    "model_forward": "sglang.srt.model_executor.model_runner.ModelRunner.forward",
    "sampling": "sglang.srt.model_executor.model_runner.ModelRunner.sample",
    "attention_decode": f"{_TORCH_NATIVE}._run_sdpa_forward_decode",
    "attention_extend": f"{_TORCH_NATIVE}._run_sdpa_forward_extend",
}

_totals: dict[str, float] = {}
_counts: dict[str, int] = {}
_lock = threading.Lock()


def directory() -> Path | None:
    value = os.environ.get(PATCHES["profile"][0], "")
    return Path(value) if value else None


def _timed(name: str) -> Any:
    def hook(original: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            with _lock:
                _totals[name] = _totals.get(name, 0.0) + time.perf_counter() - t0
                _counts[name] = _counts.get(name, 0) + 1
            if name == "batch_step":
                _dump()

    return hook


def _dump() -> None:
    out = directory()
    if out is None:
        return
    with _lock:
        data = {"pid": os.getpid(), "seconds": dict(_totals), "counts": dict(_counts)}
    path = out / f"profile-{os.getpid()}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def register() -> None:
    """Install the timers (called by the plugin in each SGLang process when ``PRESTO_SGL_PROFILE`` is set)."""
    from sglang.srt.plugins.hook_registry import HookType

    from ..hooks import register_all

    out = directory()
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    register_all([(target, _timed(name), HookType.AROUND) for name, target in TARGETS.items()])


def read(out: Path) -> dict[str, float]:
    """Cumulative seconds per timer, summed over the processes that wrote to ``out``."""
    totals: dict[str, float] = {}
    for path in out.glob("profile-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for k, v in data["seconds"].items():
            totals[k] = totals.get(k, 0.0) + v
        for k, v in data["counts"].items():
            totals["n_" + k] = totals.get("n_" + k, 0) + v
    return totals
