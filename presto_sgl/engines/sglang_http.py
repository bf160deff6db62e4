"""The SGLang server engine: native ``/generate`` with token ids (never text).

Decode pass: ``input_ids`` + per-request ``sampling_params`` (temperature tau, fixed
``max_new_tokens``, ``ignore_eos``, full vocabulary: top_k -1, top_p 1, min_p 0) with
``return_logprob``: ``meta_info.output_token_logprobs`` are after temperature, i.e.
log q_tau of each sampled token.

log p0 comes either from the same pass (one-pass mode: the server loads this package's
SGLang plugin, which adds ``meta_info.raw_logprob`` and ``raw_entropy`` computed from
the same logits row before temperature) or from a second, prefill-only scoring call
(two-pass mode, stock servers): ``max_new_tokens: 0``, ``logprob_start_len: P - 1``,
whose ``input_token_logprobs`` (always raw) after the first, null entry score the new
tokens; the cached prefix is reused. ``mode="auto"`` detects the plugin once.

A short or aborted response is re-issued as a fresh draw (bounded), then raises
:class:`EngineError`; the chain never advances on bad data. Only the standard library
is used for HTTP.
"""

from __future__ import annotations

import json
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .base import Completion, EngineCapabilities, EngineError, Request, validate_completion
from .text import TokenizerText

MODES = ("auto", "one-pass", "two-pass")


@dataclass
class ServerStats:
    calls: int = 0
    http_requests: int = 0
    retries: int = 0
    cached_tokens: int = 0
    prompt_tokens: int = 0


class SGLangEngine(TokenizerText):
    """The engine protocol against ``python -m sglang.launch_server`` (or an SGLang router)."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:30000",
        *,
        mode: str = "auto",
        timeout_s: float = 600.0,
        max_retries: int = 2,
        seeded: bool = False,
        vocab_size: int | None = None,
        context_length: int | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"`mode` (={mode!r}) must be one of {MODES}")
        if not timeout_s > 0:
            raise ValueError(f"`timeout_s` (={timeout_s!r}) must be > 0")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise ValueError(f"`max_retries` (={max_retries!r}) must be an integer >= 0")
        self.url = url.rstrip("/")
        self._seeded = seeded
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.stats = ServerStats()
        self._stats_lock = threading.Lock()
        info = self._call("GET", "/model_info")
        self.model_path = info.get("model_path")
        config = self._local_config()
        vocab = vocab_size or config.get("vocab_size")
        if not vocab:
            raise ValueError(f"cannot read the vocabulary size of {self.model_path!r}; pass `vocab_size`")
        context = context_length or config.get("max_position_embeddings")
        self._mode = mode
        if mode == "auto":
            self._mode = "one-pass" if self._probe_one_pass() else "two-pass"
        self.capabilities = EngineCapabilities(
            seeded=seeded, entropy=self._mode == "one-pass", vocab_size=int(vocab), context_length=context
        )
        self._tokenizer: Any = None

    @property
    def mode(self) -> str:
        return self._mode

    # -- the protocol ----------------------------------------------------------------------
    def generate(self, requests: Sequence[Request]) -> list[Completion]:
        with self._stats_lock:
            self.stats.calls += 1
        out: list[Completion | None] = [None] * len(requests)
        pending = list(range(len(requests)))
        for attempt in range(self.max_retries + 1):
            if attempt:
                with self._stats_lock:
                    self.stats.retries += len(pending)
            decoded = self._decode([requests[i] for i in pending])
            good = [(i, d) for i, d in zip(pending, decoded, strict=True) if d is not None]
            if self._mode == "two-pass" and good:
                raws = self._score([requests[i] for i, _ in good], [d[0] for _, d in good])
            else:
                raws = [d[2] for _, d in good]
            for (i, (tokens, logq, _, entropy, cached)), logp in zip(good, raws, strict=True):
                if logp is None:
                    continue
                comp = Completion(tokens, logq, logp, entropy if requests[i].return_entropy else None, cached)
                try:
                    validate_completion(requests[i], comp, self.capabilities.vocab_size)
                except EngineError:
                    continue
                out[i] = comp
            pending = [i for i in pending if out[i] is None]
            if not pending:
                return out  # type: ignore[return-value]
        raise EngineError(
            f"SGLang server {self.url} returned incomplete results for {len(pending)} request(s) "
            f"after {self.max_retries + 1} attempts (short, aborted or inconsistent responses)"
        )

    # -- passes ----------------------------------------------------------------------------------
    def _decode(self, requests: Sequence[Request]) -> list[tuple | None]:
        params = []
        for r in requests:
            p = {"temperature": r.temperature, "max_new_tokens": r.max_new_tokens, "ignore_eos": True,
                 "top_k": -1, "top_p": 1.0, "min_p": 0.0}
            if self._seeded and r.seed is not None:
                p["sampling_seed"] = int(r.seed % (1 << 31))
            params.append(p)
        body = {"input_ids": [list(r.prefix) for r in requests], "sampling_params": params, "return_logprob": True}
        results = self._call("POST", "/generate", body)
        if not isinstance(results, list) or len(results) != len(requests):
            raise EngineError(f"SGLang server {self.url} answered {len(requests)} requests with {type(results).__name__}")
        out: list[tuple | None] = []
        for r, res in zip(requests, results, strict=True):
            meta = res.get("meta_info", {})
            ids = res.get("output_ids") or []
            lps = meta.get("output_token_logprobs") or []
            if len(ids) != r.max_new_tokens or len(lps) != len(ids) or any(e[1] != t for e, t in zip(lps, ids, strict=True)):
                out.append(None)  # short or aborted: re-issued as a fresh draw
                continue
            logq = tuple(_as_float(e[0]) for e in lps)
            raw = meta.get("raw_logprob")
            ent = meta.get("raw_entropy")
            raw_t = tuple(_as_float(x) for x in raw) if raw is not None and len(raw) == len(ids) else None
            ent_t = tuple(float(x) for x in ent) if ent is not None and len(ent) == len(ids) else None
            with self._stats_lock:
                self.stats.cached_tokens += int(meta.get("cached_tokens", 0))
                self.stats.prompt_tokens += len(r.prefix)
            out.append((tuple(ids), logq, raw_t, ent_t, int(meta.get("cached_tokens", 0))))
        return out

    def _score(self, requests: Sequence[Request], outputs: Sequence[tuple[int, ...]]) -> list[tuple[float, ...] | None]:
        """log p0 of each output after its prefix: a prefill-only call, cached prefix reused."""
        starts = [len(r.prefix) - 1 for r in requests]
        body = {
            "input_ids": [list(r.prefix) + list(o) for r, o in zip(requests, outputs, strict=True)],
            "sampling_params": [{"max_new_tokens": 0, "temperature": 1.0} for _ in requests],
            "return_logprob": True,
            "logprob_start_len": starts,
        }
        results = self._call("POST", "/generate", body)
        scores: list[tuple[float, ...] | None] = []
        for o, res in zip(outputs, results, strict=True):
            entries = res.get("meta_info", {}).get("input_token_logprobs") or []
            tail = entries[1:]  # entry 0 scores the last prefix token: null
            if len(tail) != len(o) or any(e[1] != t for e, t in zip(tail, o, strict=True)):
                scores.append(None)
                continue
            scores.append(tuple(_as_float(e[0]) for e in tail))
        return scores

    def _probe_one_pass(self) -> bool:
        body = {"input_ids": [1, 2, 3], "sampling_params": {"temperature": 1.0, "max_new_tokens": 1, "ignore_eos": True},
                "return_logprob": True}
        res = self._call("POST", "/generate", body)
        return "raw_logprob" in res.get("meta_info", {})

    # -- HTTP ------------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={"Content-Type": "application/json"})
        with self._stats_lock:
            self.stats.http_requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return json.loads(resp.read().decode())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise EngineError(f"SGLang server {self.url}{path} returned HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EngineError(
                f"SGLang server {self.url} is unreachable or not ready ({reason}); start it with "
                "`bash scripts/sglang_server.sh start` or pass the right --url"
            ) from None

    # -- server facts and text -------------------------------------------------------------------
    def _local_config(self) -> dict[str, Any]:
        path = Path(self.model_path or "") / "config.json"
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}

    def server_load(self) -> dict[str, Any]:
        """``/v1/loads``: KV-pool use (num_used_tokens, token_usage) and cache hit rate."""
        return self._call("GET", "/v1/loads")

    def server_info(self) -> dict[str, Any]:
        return self._call("GET", "/server_info")

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        return self._tokenizer


def _as_float(x: Any) -> float:
    """A log-probability from JSON; null (not computed) and NaN become NaN (caught downstream)."""
    return math.nan if x is None else float(x)


def wait_ready(url: str, timeout_s: float = 300.0) -> None:
    """Block until ``GET url/health`` answers 200, or raise EngineError naming the URL."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/health", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        if time.monotonic() > deadline:
            raise EngineError(f"SGLang server {url} not ready after {timeout_s:.0f} s")
        time.sleep(1.0)
